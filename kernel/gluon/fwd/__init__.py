"""The Gluon forward for Hopper. The map: :mod:`kernel`."""
