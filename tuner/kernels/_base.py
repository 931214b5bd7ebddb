"""The interface of a tunable kernel: what the tuner needs to know of a kernel, said once.

The stages ask the kernel, never the other way round: the space and its restrictions
(:mod:`tuner.study`, :mod:`tuner.search`), the budget rules and the compile units
(:mod:`tuner.budget`), the gate, the timing calls and the baseline they are compared with
(:mod:`tuner.runner`), the FLOPs of a problem (:mod:`tuner.records`), the emitted
``triton.Config`` form and its inverse (:mod:`tuner.emit`, :mod:`tuner.verify`), and the
kernel names Nsight Compute should keep (:mod:`tuner.profile`). A kernel is a
:class:`TunableKernel` subclass in one module of :mod:`tuner.kernels`, or in a user's module
that exposes it as ``KERNEL`` (a study's ``kernel = "mypkg.mykernel"``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kernel.measure.timing import Pinned
from tuner.gpus import GpuSpec
from tuner.outcome import NamedError
from tuner.problem import Problem
from tuner.space import KernelConfig, SearchSpace

__all__ = ["Case", "CompileUnit", "GateResult", "NamedError", "Pinned", "TunableKernel"]


@dataclass(frozen=True)
class CompileUnit:
    """One JIT kernel of a config, specialised for a problem exactly as its launch would be.

    A config may launch several JIT kernels (the backward: a preprocess, a dK/dV and a dQ
    kernel); each is compiled and judged, and the config's budget is the worst of them.

    Attributes:
        name: how verdicts name it (the JIT function's name).
        fn: the ``triton.JITFunction``.
        signature, constexprs, attrs: ``triton.compiler.ASTSource``'s arguments.
        options: ``triton.compile``'s options (``num_warps``, ``num_stages``, ...).
        warmup_args, warmup_kwargs: ``JITFunction.warmup``'s arguments for the GPU present
            (dtypes for tensors, constexprs and options by name), so the binary lands where a
            launch looks for it.
        launch: beyond the binary, what makes two launches take different times (the warps,
            the grid): configs are "the same binary" only when this is equal too.
    """

    name: str
    fn: Any
    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], list]
    options: dict
    warmup_args: tuple = ()
    warmup_kwargs: dict = field(default_factory=dict)
    launch: tuple = ()

    @property
    def num_warps(self) -> int:
        return int(self.options.get("num_warps", 4))


@dataclass(frozen=True)
class GateResult:
    """A config's outputs on one shape against the reference: every named error, and the verdict."""

    ok: bool
    reason: str
    errors: tuple[NamedError, ...] = ()


@dataclass
class Case:
    """One shape's inputs, preallocated outputs and reference, built once in the worker.

    Attributes:
        gate: the gate shape's name, or "study".
        problem: the shape the tensors are of.
        seed: the random seed of the inputs (fresh each time, never fixed).
        tensors: the launch's tensors by name, inputs and outputs alike.
        outputs: which of ``tensors`` the kernel writes (filled with NaN before each check).
        reference: what :meth:`TunableKernel.judge` compares against.
        torch_error: PyTorch's own error on the same inputs, which the bounds scale with.
    """

    gate: str
    problem: Problem
    seed: int
    tensors: dict[str, Any]
    outputs: tuple[str, ...]
    reference: Any = None
    torch_error: Any = None


class TunableKernel(abc.ABC):
    """A kernel the tuner can search, check, time and emit.

    Class attributes:
        name: the kernel's name, as a study's ``kernel`` field gives it ("triton").
        pass_: its pass: "fwd", "bwd" or "fwd+bwd" (a study's ``pass`` field).
        config_type: its :class:`~tuner.space.KernelConfig`.
        autotune_key: the kernel arguments an emitted ``@triton.autotune`` list is keyed on.
        description: one line for listings and emitted files.
        emitted_imports: the import line of an emitted list (its entries' type).
    """

    name: ClassVar[str]
    pass_: ClassVar[str]
    config_type: ClassVar[type[KernelConfig]]
    autotune_key: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    emitted_imports: ClassVar[str] = "import triton"    # what an emitted list's file imports
    emitted_what: ClassVar[str] = "@triton.autotune configs"    # what its entries are, for its docstring

    @property
    def label(self) -> str:
        """``triton-fwd``: the kernel and its pass."""
        return f"{self.name}-{self.pass_}"

    # -------------------------------------------------------------------- the space

    def space(self, **values) -> SearchSpace:
        """A space over this kernel's axes: ``values`` where given, else each axis's default."""
        unknown = sorted(set(values) - {a.name for a in self.config_type.axes()})
        if unknown:
            raise ValueError(f"{self.label} has no axis {unknown[0]!r}; its axes: "
                             f"{', '.join(a.name for a in self.config_type.axes())}")
        return SearchSpace(self, tuple((a.name, tuple(values.get(a.name, a.default))) for a in self.config_type.axes()))

    def plain_space(self, **values) -> SearchSpace:
        """A space of the plain kernel only (every knob off), with the given axes."""
        return self.space(**{a.name: (a.plain,) for a in self.config_type.knobs()} | values)

    @abc.abstractmethod
    def restriction(self, config, head_dim: int) -> str | None:
        """Why the kernel can never run this config at this head dim (a limit no compiler beats), or None."""

    @abc.abstractmethod
    def budget_rule(self, config, gpu: GpuSpec) -> str | None:
        """Why this target or the installed Triton cannot run the config's knobs ("unsupported: ..."), or None."""

    @abc.abstractmethod
    def model_smem_bytes(self, config, problem: Problem, gpu: GpuSpec) -> int:
        """The analytic model of the config's dynamic shared memory on ``gpu`` (the worst unit), bytes."""

    # ------------------------------------------------------------------ the compile

    @abc.abstractmethod
    def compile_units(self, config, problem: Problem) -> list[CompileUnit]:
        """Every JIT kernel a launch of ``config`` on ``problem`` runs, specialised as the launch would be."""

    @abc.abstractmethod
    def device_source(self) -> str:
        """The source of every JIT function: editing it must throw the compile cache away."""

    def specialisation(self, problem: Problem) -> str:
        """What the JIT specialises a launch of this problem on: problems with equal keys run the
        same binaries for a given config (the smallest config stands in for all)."""
        smallest = self.config_type(*(a.default[0] for a in self.config_type.tiles()))
        return repr([(u.name, u.signature, sorted(u.constexprs.items()), sorted(u.attrs.items()))
                     for u in self.compile_units(smallest, problem)])

    def edge_tiles(self, config):
        """What the gate's edge shapes are made of (its ``block_m`` and ``block_n``): the config's
        tiles; a kernel of several passes gives the largest of each, so that the last tile of every
        pass holds one valid row (or key)."""
        return config

    def gate_compile_problems(self, problem: Problem, config) -> list[Problem]:
        """Problems the gate launches beyond the study's that need a binary of their own, to compile
        ahead: those whose specialisation differs from ``problem``'s (a kernel that does not specialise
        on lengths checks its edge shapes in the very binary that is timed, and compiles nothing more)."""
        from tuner.gate import gate_compile_problems

        own = self.specialisation(problem)
        return [p for p in gate_compile_problems(problem, self.edge_tiles(config)) if self.specialisation(p) != own]

    # ------------------------------------------------------------ check and time

    def gate_shapes(self, problem: Problem, config, small: bool = False) -> list:
        """The :class:`tuner.gate.GateShape` s a config is checked on beyond the study's shape."""
        from tuner.gate import gate_shapes

        return gate_shapes(problem, self.edge_tiles(config), small)

    @abc.abstractmethod
    def make_case(self, gate, device: str) -> Case:
        """Fresh random inputs for a problem or a :class:`tuner.gate.GateShape`, with the reference."""

    @abc.abstractmethod
    def call(self, config, tensors: dict, problem: Problem, allocate: bool = False) -> Callable[[], object]:
        """One launch of ``config`` on ``tensors`` (writing its outputs there, or allocating them
        as a user's call does when ``allocate``)."""

    @abc.abstractmethod
    def judge(self, case: Case) -> GateResult:
        """The case's outputs against its reference: the named errors and their bounds."""

    @abc.abstractmethod
    def timing_sets(self, case: Case, device: str) -> list[dict]:
        """Tensors for timing: the case's own, then more until together they miss the L2."""

    @abc.abstractmethod
    def baselines(self, sets: list[dict], problem: Problem) -> dict[str, Pinned]:
        """What the kernel is compared with, by backend name ("flash", "cudnn"): on every set."""

    @abc.abstractmethod
    def flops(self, problem: Problem) -> float:
        """Floating-point operations of one launch on ``problem``, for TFLOP/s."""

    @abc.abstractmethod
    def compulsory_bytes(self, problem: Problem) -> float:
        """Bytes one launch must move to or from HBM, for the roofline."""

    # ---------------------------------------------------------------- the outputs

    @abc.abstractmethod
    def triton_config(self, config) -> str:
        """``config`` as the ``triton.Config(...)`` source of an emitted autotune list."""

    @abc.abstractmethod
    def from_triton(self, triton_config):
        """The config a ``triton.Config`` of an emitted list stands for (:meth:`triton_config`'s inverse)."""

    @abc.abstractmethod
    def autotuned(self, configs: Sequence, key: Sequence[str]) -> Callable[[dict, Problem], Any]:
        """The kernel under ``@triton.autotune`` over an emitted list: a function of (tensors,
        problem) that launches it (the first call on a key tunes) and returns the config it picked."""

    @abc.abstractmethod
    def inputs(self, problem: Problem, device: str, generator=None) -> dict:
        """Random input tensors of ``problem`` and room for the outputs (``generator``: its seed)."""

    @abc.abstractmethod
    def ncu_kernels(self) -> dict[str, str]:
        """Regexes over kernel names: the launch Nsight Compute keeps, for ``"ours"`` and for each
        of :meth:`baselines`' backends (the longest match is kept)."""
