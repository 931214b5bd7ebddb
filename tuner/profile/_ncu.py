"""Running Nsight Compute on one target, and telling its failures apart.

A target is one kernel on one shape: one of our configs, or an SDPA backend. Each runs
in its own ``ncu`` process (``python -m tuner.profile._launch``), so one that crashes or
that ncu cannot read costs only its own row.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner import kernels
from tuner.problem import Problem
from tuner.profile._metrics import (
    KernelCounters,
    NcuOutputError,
    ProfileError,
    metrics_argument,
    parse_raw_csv,
    pick_kernel,
)

# kind -> what _launch runs: our kernel, or one of its baselines (and the key of the kernel's
# ``ncu_kernels``, the regex over kernel names of the launch whose counters are kept)
KINDS = {"ours": "ours", "sdpa_flash": "flash", "sdpa_cudnn": "cudnn"}
PERMISSION_HELP = (
    "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM). Run as root, or let every user "
    "read them: put 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/nvidia-profiling.conf "
    "and reload the driver (or reboot); in a container, start it with --cap-add=SYS_ADMIN. "
    "See https://developer.nvidia.com/ERR_NVGPUCTRPERM")


class NcuMissing(ProfileError):
    """No ``ncu`` binary was found."""


class CountersNotPermitted(ProfileError):
    """ncu runs but may not read the counters: every further target would fail the same way."""


@dataclass(frozen=True)
class Target:
    """One launch to profile: a kind of :data:`KINDS` on a shape (with a config for ours), of a
    kernel (its name and pass, :func:`tuner.kernels.get`)."""

    kind: str
    shape: Problem
    config: object | None = None
    rank: int | None = None
    kernel: str = kernels.DEFAULT_KERNEL
    pass_: str = kernels.DEFAULT_PASS

    @property
    def pattern(self) -> str:
        """The regex over kernel names of the launch whose counters are kept (the kernel's ``ncu_kernels``)."""
        return kernels.get(self.kernel, self.pass_).ncu_kernels()[KINDS[self.kind]]

    @property
    def label(self) -> str:
        return f"{self.shape.label} · {self.config.key if self.config else self.kind}"

    def request(self) -> str:
        """The JSON argument of ``python -m tuner.profile._launch``."""
        shape = {f: getattr(self.shape, f) for f in ("batch", "heads", "n_q", "n_k", "head_dim", "dtype", "causal")}
        return json.dumps({"target": KINDS[self.kind], "shape": shape, "kernel": self.kernel, "pass": self.pass_,
                           "config": self.config.as_kwargs() if self.config else None})


def find_ncu(explicit: str | None = None) -> str:
    """The ncu binary: ``explicit``, else $FA2_TUNER_NCU, else PATH, else $CUDA_HOME/bin and /usr/local/cuda/bin.

    Raises:
        NcuMissing: none found; the message lists where it looked.
    """
    candidates = [explicit] if explicit else [os.environ.get("FA2_TUNER_NCU"), shutil.which("ncu")] + [
        str(Path(home) / "bin" / "ncu") for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if home]
    for candidate in filter(None, candidates):
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = explicit or "$FA2_TUNER_NCU, PATH, $CUDA_HOME/bin and /usr/local/cuda/bin"
    raise NcuMissing(f"Nsight Compute's ncu was not found (looked in {where}); install Nsight Compute "
                     f"(it ships with the CUDA toolkit) or pass --ncu /path/to/ncu")


def ncu_version(ncu: str) -> str:
    """``2025.3.1.0``-style version of the binary (its last ``--version`` line if unparsed)."""
    try:
        text = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NcuMissing(f"{ncu} --version failed: {exc}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Version "):
            return line.split()[1]
    return lines[-1][:64] if lines else "unknown"


def command(ncu: str, target: Target) -> list[str]:
    """The ncu command line for one target: the fixed metric set over the program's
    profiled range (its second call), with the GPU's clocks left alone."""
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
            "--profile-from-start", "off", "--metrics", metrics_argument(),
            sys.executable, "-m", "tuner.profile._launch", target.request()]


def interpret(stdout: str, stderr: str, returncode: int, target: Target) -> KernelCounters:
    """The target's counters from ncu's output, or the error that says what went wrong.

    Raises:
        CountersNotPermitted: the counters are off limits (fatal for the whole run).
        ProfileError: this target failed; the message says how.
    """
    text = stdout + "\n" + stderr
    if "ERR_NVGPUCTRPERM" in text:
        raise CountersNotPermitted(PERMISSION_HELP)
    if not text.strip():
        raise NcuOutputError(f"ncu printed nothing (exit status {returncode})")
    if "No kernels were profiled" in text:
        seen = re.findall(r"^\s*\d+\.\s+(\S.*)$", text.partition("Available Kernels:")[2], re.MULTILINE)
        raise NcuOutputError(f"ncu profiled no kernel of {target.label} (exit status {returncode}); "
                             + (f"kernels it saw: {', '.join(k[:80] for k in seen)}" if seen else
                                "the program launched none in its profiled range"))
    if returncode != 0 and '"ID",' not in stdout:
        tail = " | ".join(line for line in text.strip().splitlines()[-4:])
        raise ProfileError(f"the profiled program failed (exit status {returncode}): {tail[-400:]}")
    return pick_kernel(parse_raw_csv(stdout), target.pattern)


def profile(ncu: str, target: Target, timeout_s: float = 300.0) -> KernelCounters:
    """Run ncu on one target and return its counters.

    Raises:
        CountersNotPermitted: as :func:`interpret`.
        ProfileError: this target failed (including a timeout).
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                    os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run(command(ncu, target), capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"ncu did not finish {target.label} in {timeout_s:.0f} s") from None
    except OSError as exc:
        raise NcuMissing(f"cannot run {ncu}: {exc.strerror or exc}") from None
    return interpret(done.stdout, done.stderr, done.returncode, target)
