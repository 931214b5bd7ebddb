"""``python -m tuner`` is ``python -m tuner.sweep`` (see its ``--help``)."""

import sys

from tuner.sweep import main

if __name__ == "__main__":
    sys.exit(main())
