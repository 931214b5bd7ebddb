"""The Gluon backward for Hopper. The map: :mod:`kernel`."""
