"""Benchmarks of the kernel and of the tuner, each ``python -m benchmarks.<name>`` (``--help`` for its use).

* ``vs_sdpa``: the kernel against PyTorch SDPA's flash and cuDNN backends, same run (GPU);
* ``knobs``: what each Hopper knob buys, shape by shape (GPU);
* ``bwd``: the backward against SDPA's (flash and cuDNN), an exploration of its configs, fwd+bwd (GPU);
* ``search``: how fast the tuner finds a near-best config: the race against ``@triton.autotune``,
  replayed searches against a grid, the stability of re-timed winners;
* ``timing``: the bars of the timing work: host time per call, two grids' winners, TPE against a grid;
* ``store``: the database work per trial of a sweep, without a GPU;
* ``timing_experiment``: how to re-time finalists so that a config's own rounds agree (GPU).

Installed with the package; nothing in ``kernel`` or ``tuner`` imports them. Every re-timing
here goes through :func:`kernel.measure.timing.interleaved_rounds`, as the sweep's finalists do.
"""
