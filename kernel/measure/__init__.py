"""Stopwatches: timing beside SDPA, re-timing finalists, the SM clock. The map: :mod:`kernel`."""
