"""The new-user battery: every command run as a new user would, with bad values, odd environments and the
kernels' edges, each case in a subprocess in a fresh folder, its verdict mechanical.

    python -m scripts.battery [--family NAME ...] [--only SUBSTRING ...] [--markdown FILE] [--json FILE] [--jobs N]

Families (one module of cases each, a list of :class:`scripts.battery.case.Case`):

* ``help`` (:mod:`.help_cases`): every ``--help``/``-h``, ``fa2-tuner`` alone, unknown flags and commands, pipes.
* ``args`` (:mod:`.args_sweep`, :mod:`.args_tools`, :mod:`.args_studies`): bad values for every flag of sweep,
  budget, emit, dashboard, profile and kernels, and bad study files.
* ``env`` (:mod:`.env_cases`): HOME, FA2_TUNER_CACHE, TRITON_CACHE_DIR, TMPDIR, locales, closed and full
  streams, pipes, a read-only working folder, SIGINT and SIGTERM in the middle of a sweep.
* ``kernel`` (:mod:`.kernel_cases`, run by :mod:`.kernel_probe`): ``flash_attn_fwd``, ``flash_attn_bwd`` and
  ``flash_attention`` under ``TRITON_INTERPRET=1`` in fp32 and fp16 against a float64 reference.
* ``advice`` (:mod:`.advice_cases`): the commands the tool prints as advice, run as printed.

Each case runs ``bash -o pipefail -c COMMAND`` in ``<folder>/work`` with ``HOME=<folder>/home`` (and read-only
bind mounts in a private mount namespace where a case asks for them: run as root). The folder's files are
hashed before and after; a call that is refused (a non-zero exit the case expects) must change nothing.
Verdicts (:func:`scripts.battery.case.classify`): ok, timeout, traceback, wrong-answer, wrong-exit, unclear,
changed-files; a case that cannot run here (no root for a read-only mount, an expensive command) is skipped
with its reason. Nothing in the repository is written but the files ``--markdown`` and ``--json`` name.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FAMILIES = ("help", "args", "env", "kernel", "advice")
