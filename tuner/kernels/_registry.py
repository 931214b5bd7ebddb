"""Which kernels a study may name: the built-in ones, and a user's module by its import path."""

from __future__ import annotations

import importlib
import sys

from tuner.kernels._base import TunableKernel
from tuner.kernels.gluon_bwd import KERNEL as GLUON_BWD_KERNEL
from tuner.kernels.gluon_fwd import KERNEL as GLUON_KERNEL
from tuner.kernels.triton_bwd import KERNELS as BWD_KERNELS
from tuner.kernels.triton_fwd import KERNEL as FWD_KERNEL

__all__ = ["DEFAULT_KERNEL", "DEFAULT_PASS", "KernelNotFound", "get", "kernel_of", "known", "registered"]

DEFAULT_KERNEL, DEFAULT_PASS = "triton", "fwd"
# (kernel name, pass) -> kernel: the built-in kernels, then every user module loaded so far.
_KERNELS: dict[tuple[str, str], TunableKernel] = {(k.name, k.pass_): k for k in (FWD_KERNEL, *BWD_KERNELS,
                                                                                    GLUON_KERNEL, GLUON_BWD_KERNEL)}


class KernelNotFound(LookupError):
    """No kernel of that name and pass; the message lists the registered ones.

    Attributes:
        field: which was wrong, "kernel" or "pass" (a study file's field).
    """

    def __init__(self, message: str, field: str = "kernel"):
        super().__init__(message)
        self.field = field


def registered() -> list[str]:
    """``name (pass)`` of every kernel known now, for messages."""
    return [f"{name} ({pass_})" for name, pass_ in sorted(_KERNELS)]


def known() -> list[tuple[str, str, TunableKernel]]:
    """(name, pass, kernel) of every kernel known now: the built-in ones and the user modules loaded."""
    return [(name, pass_, _KERNELS[(name, pass_)]) for name, pass_ in sorted(_KERNELS)]


def _module_kernels(module) -> list[TunableKernel]:
    found = getattr(module, "KERNELS", None) or [getattr(module, "KERNEL", None)]
    return [k for k in found if isinstance(k, TunableKernel)]


def _load(path: str) -> None:
    """Import a user's kernel module (it exposes ``KERNEL``, or ``KERNELS`` for several passes)
    and register its kernels under the module's path."""
    if path.startswith(".") or not all(part.isidentifier() for part in path.split(".")):
        raise KernelNotFound(f"kernel {path!r} is not a registered kernel ({', '.join(registered())}) nor a module "
                             f"path (dotted names, e.g. mypackage.my_kernel)")
    try:
        module = importlib.import_module(path)
    except ImportError as exc:
        raise KernelNotFound(f"kernel {path!r} is not a registered kernel ({', '.join(registered())}) nor an "
                             f"importable module exposing KERNEL ({exc})") from None
    except Exception as exc:      # the user's module fails as it loads: its error, named, not a traceback
        raise KernelNotFound(f"kernel module {path!r} failed to import: {type(exc).__name__}: {exc}") from None
    kernels = _module_kernels(module)
    if not kernels:
        raise KernelNotFound(f"module {path!r} has no KERNEL (a tuner.kernels.TunableKernel) nor KERNELS")
    for kernel in kernels:
        _KERNELS.setdefault((path, kernel.pass_), kernel)


def get(name: str | None = DEFAULT_KERNEL, pass_: str | None = None) -> TunableKernel:
    """The kernel a study names: a registered name ("triton") or a module path ("mypkg.mykernel").

    Args:
        name: the kernel; None (a row stored before kernels had names): the Triton forward.
        pass_: "fwd", "bwd", "fwd+bwd"; None: the kernel's only pass (or "fwd" among several).

    Raises:
        KernelNotFound: the message lists the registered kernels and their passes.
    """
    name = name or DEFAULT_KERNEL
    if not any(known == name for known, _ in _KERNELS):
        _load(name)                   # not a registered name: a user's module path
    passes = sorted(p for known, p in _KERNELS if known == name)
    chosen = pass_ or (passes[0] if len(passes) == 1 else DEFAULT_PASS)
    if chosen not in passes:
        raise KernelNotFound(f"kernel {name!r} has no pass {chosen!r}; it has {', '.join(passes)} "
                             f"(registered: {', '.join(registered())})", field="pass")
    return _KERNELS[(name, chosen)]


def kernel_of(config) -> TunableKernel:
    """The kernel whose config type ``config`` is (found in the module that defines the type, so it
    works in any process that could unpickle the config)."""
    module = sys.modules[type(config).__module__]
    for kernel in _module_kernels(module) + list(_KERNELS.values()):
        if isinstance(config, kernel.config_type):
            return kernel
    raise KernelNotFound(f"no kernel has config type {type(config).__name__}")
