"""``python -m tuner.dashboard``."""

import sys

from tuner.dashboard import main

sys.exit(main())
