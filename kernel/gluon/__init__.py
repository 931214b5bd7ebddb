"""The Gluon kernels for Hopper (sm_90): forward (``fwd/``), backward (``bwd/``), and what both share.

The map: :mod:`kernel`.
"""
