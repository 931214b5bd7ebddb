"""``python -m tuner.budget``: which configs fit a target GPU (see :mod:`tuner._budget`).

The implementation lives in ``tuner._budget`` so that running this module as
``__main__`` never imports the same code twice.
"""

import sys

from tuner._budget import *  # noqa: F401,F403  (the public budget API)
from tuner._budget import main

if __name__ == "__main__":
    sys.exit(main())
