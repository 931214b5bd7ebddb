"""``python -m tuner.dashboard``."""

from tuner.console import run
from tuner.dashboard import main

run(main)
