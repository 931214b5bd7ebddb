"""Study files: what to tune for (shapes), over which configs (space), for what (objective).

A study is a TOML file in ``studies/``::

    name = "article"
    description = "The article's table"
    kernel = "triton"         # optional: the kernel (tuner.kernels), or a module path exposing KERNEL
    pass = "fwd"              # optional: its pass (fwd, bwd, fwd+bwd)

    [problem]                 # lists expand into several shapes (their product)
    batch = 4
    heads = 8
    n = [512, 1024, 2048, 4096]   # or n_q and n_k separately
    head_dim = 64
    dtype = "bf16"
    causal = [false, true]

    [space]                   # optional; each key (an axis of the kernel's config) defaults to its default space
    block_m = [16, 32, 64, 128, 256]
    tma = [false, true]       # knobs: tma, warp_specialize, maxnreg (0: none), persistent (programs per SM)
    restrictions = ["block_m >= block_n"]   # over the kernel's axes and head_dim

    [objective]               # optional
    metric = "speedup_vs_flash"  # or speedup_vs_cudnn, tflops; geometric mean over shapes

    [timing]                  # optional: per shape, how long to warm up and to time
    warmup_ms = 10            # and rep_ms = 40

A restriction is arithmetic (``+ - * // %``), comparisons and ``and``/``or``/``not`` over the kernel's
axes, ``head_dim`` and the knobs, with integer constants; one that cannot be parsed or names anything
else refuses the file when it is loaded. One that raises for a config (``block_m // (num_stages - 1)``
at ``num_stages = 1``) rejects that config as ``restricted``, with the reason ("restriction '...'
raised ZeroDivisionError"): a config the rule cannot judge is never searched; the others still are.

Several ``[[problem]]`` tables may be given instead of one ``[problem]``. Every error names the file,
the field and what is allowed (:class:`StudyError`). The shipped studies are package data
(``tuner.studies``), found from any working directory. A study's :attr:`Study.fingerprint` identifies
its definition, so that the store can refuse a different study that reuses a stored name.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shlex
import sys
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path

from tuner import kernels
from tuner.problem import DTYPE_BYTES, HEAD_DIMS, Problem
from tuner.restrictions import RestrictionError, compiled, evaluate
from tuner.space import SearchSpace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PASSES = ("fwd", "bwd", "fwd+bwd")
METRICS = ("speedup_vs_flash", "speedup_vs_cudnn", "tflops")
MAX_BATCH_HEADS = 65535        # CUDA's limit on a grid's second axis, where the Triton forward puts batch x heads
PROBLEM_FIELDS = ("batch", "heads", "n", "n_q", "n_k", "head_dim", "dtype", "causal")
TOP_FIELDS = ("name", "description", "kernel", "pass", "problem", "space", "objective", "timing")


class StudyError(ValueError):
    """A study file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Timing:
    """How long ``triton.testing.do_bench`` warms up and repeats, per shape."""

    warmup_ms: int = 10
    rep_ms: int = 40


@dataclass(frozen=True)
class Study:
    """A parsed, validated study file."""

    name: str
    description: str
    shapes: tuple[Problem, ...]
    space: SearchSpace
    restrictions: tuple[str, ...] = ()
    metric: str = "speedup_vs_flash"
    timing: Timing = field(default_factory=Timing)
    path: str = ""
    kernel_name: str = kernels.DEFAULT_KERNEL     # as the study file names it (a registered name or a module path)
    pass_: str = kernels.DEFAULT_PASS
    defined_space: SearchSpace | None = None  # the file's, where a target narrowed ``space`` (the fingerprint's)
    flags: str = ""     # the flags that load it again: --study <the file, or the shipped name>[ --pass <pass>]

    @property
    def kernel(self) -> kernels.TunableKernel:
        """The kernel the study tunes (its space's)."""
        return self.space.kernel

    def for_pass(self, pass_: str | None) -> Study:
        """This study's shapes tuned for another pass of its kernel (``--pass``): that pass's default
        space and no restrictions (the file's are its own pass's), under the name ``<name>-<pass>``
        so that its rows never mix with the file's pass. ``None`` or the study's own pass: itself.

        Raises:
            StudyError: the kernel has no such pass; the message lists the registered ones.
        """
        if pass_ is None or pass_ == self.pass_:
            return self
        try:
            kernel = kernels.get(self.kernel_name, pass_)
        except kernels.KernelNotFound as exc:
            raise StudyError(f"--pass {pass_!r}: {exc}") from None
        return replace(self, name=f"{self.name}-{kernel.pass_}", space=kernel.space(), restrictions=(),
                       pass_=kernel.pass_, flags=f"{self.flags} --pass {kernel.pass_}")

    def variants(self) -> list[Problem]:
        """One problem per compiled specialisation (the kernel's :meth:`~tuner.kernels.TunableKernel.specialisation`).

        Sequence lengths that are all multiples of 16 share one binary, so a study of
        four lengths compiles each config once per (dtype, head dim, causal).
        """
        seen: dict[str, Problem] = {}
        for shape in self.shapes:
            seen.setdefault(self.kernel.specialisation(shape), shape)
        return list(seen.values())

    def allowed(self, config, head_dim: int) -> bool:
        """Whether the study's own restrictions keep this config."""
        return self.restricted_by(config, head_dim) is None

    def restricted_by(self, config, head_dim: int) -> str | None:
        """Why the study's own restrictions reject this config at this head dim, or None: the
        first restriction that is false, or that raises for it (the error named)."""
        names = {name: int(value) for name, value in asdict(config).items()} | {"head_dim": head_dim}
        for text in self.restrictions:
            try:
                kept = evaluate(text, names)
            except Exception as exc:    # arithmetic only (vetted nodes): ZeroDivisionError and its kind
                return f"restriction {text!r} raised {type(exc).__name__} at head_dim {head_dim}"
            if not kept:
                return f"excluded by the study's restrictions {list(self.restrictions)}"
        return None

    def configs(self) -> list:
        """The configs the study searches: the space less its restrictions (at every head dim)."""
        head_dims = sorted({s.head_dim for s in self.shapes})
        return [c for c in self.space.all_configs() if all(self.allowed(c, d) for d in head_dims)]

    @property
    def fingerprint(self) -> str:
        """A hash of what the study measures (kernel, shapes, space, restrictions, metric, timing),
        not of its file: comments and the description may change, the definition may not. Knob axes
        left plain are not part of it (a study of the plain kernel keeps the fingerprint it had before
        the knobs existed), nor the kernel while it is the default (the Triton forward), nor a target's
        narrowing of the space (:func:`tuner.pre_gpu_stages.for_target`: the file's space counts)."""
        plain = {a.name: a.plain for a in self.kernel.config_type.knobs()}
        space = {name: list(values) for name, values in (self.defined_space or self.space).axes
                 if name not in plain or tuple(values) != (plain[name],)}
        space["exclude"] = []       # a field the space once had, always empty; kept so fingerprints stay
        definition = dict(name=self.name, shapes=[asdict(s) for s in self.shapes], space=space,
                          restrictions=list(self.restrictions), metric=self.metric, timing=asdict(self.timing))
        if (self.kernel_name, self.pass_) != (kernels.DEFAULT_KERNEL, kernels.DEFAULT_PASS):
            definition |= dict(kernel=self.kernel_name, pass_=self.pass_)
        return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------ loading


def shipped() -> dict[str, str]:
    """The studies that ship with fa2-tuner: name -> TOML text."""
    try:
        folder = resources.files("tuner.studies")
    except ModuleNotFoundError:      # a source checkout on PYTHONPATH, not installed: the folder itself
        folder = Path(__file__).resolve().parent.parent / "studies"
    found = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".toml"):
            found[entry.name.removesuffix(".toml")] = entry.read_text()
    return dict(sorted(found.items()))


def _read(name_or_path: str) -> tuple[str, str]:
    """(where, text) of a study given by path or by the name of a shipped study."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise StudyError(f"--study is empty; give a study file or one of: {', '.join(shipped())}")
    path = Path(name_or_path)
    if path.is_dir():
        raise StudyError(f"study {name_or_path!r} is a directory; give a .toml file in it or a study name "
                         f"({', '.join(shipped())})")
    if path.exists():
        try:
            return str(path), path.read_bytes().decode("utf-8-sig")     # a byte-order mark (Notepad) dropped
        except UnicodeDecodeError:
            raise StudyError(f"{path}: not a text file (not UTF-8); a study is a TOML file") from None
        except OSError as exc:
            raise StudyError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    name = name_or_path.removesuffix(".toml")
    studies = shipped()
    if name in studies:
        return f"<shipped study {name}>", studies[name]
    raise StudyError(f"study {name_or_path!r} not found: not a file, and not a shipped study "
                     f"(available: {', '.join(studies) or 'none'})")


def load(name_or_path: str) -> Study:
    """Read and validate a study file.

    Raises:
        StudyError: the file is missing, not TOML, or a field is wrong; the message
            names the file, the field and the allowed values.
    """
    where, text = _read(name_or_path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{where}: not valid TOML: {exc}") from None
    _only(data, TOP_FIELDS, where, "top level")
    name = data.get("name", Path(name_or_path).stem)
    if not isinstance(name, str) or not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise StudyError(f"{where}: name = {name!r} must be a non-empty string of letters, digits, '-', '_', '.'")
    problems = data.get("problem")
    if problems is None:
        raise StudyError(f"{where}: [problem] is missing; it names the shapes to tune for (batch, heads, n, "
                         f"head_dim, dtype, causal)")
    problems = problems if isinstance(problems, list) else [problems]
    if not problems:
        raise StudyError(f"{where}: [problem] holds no shapes; give at least one table (batch, heads, n, head_dim, "
                         f"dtype, causal)")
    shapes: list[Problem] = []
    for index, table in enumerate(problems):
        label = "[problem]" if len(problems) == 1 else f"[[problem]] #{index + 1}"
        for shape in _shapes(table, where, label):
            if shape not in shapes:
                shapes.append(shape)
    kernel_name, pass_, kernel = _kernel(data, where)
    space, restrictions = _space(data.get("space", {}), where, kernel)
    objective = data.get("objective", {})
    _only(objective, ("metric",), where, "[objective]")
    metric = objective.get("metric", "speedup_vs_flash")
    if metric not in METRICS:
        raise StudyError(f"{where}: [objective] metric = {metric!r} is not allowed; use one of {', '.join(METRICS)}")
    timing_table = data.get("timing", {})
    _only(timing_table, ("warmup_ms", "rep_ms"), where, "[timing]")
    for key in timing_table:
        value = timing_table[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10_000:
            raise StudyError(f"{where}: [timing] {key} = {value!r} must be an integer from 1 to 10000 (ms)")
    given = name_or_path.removesuffix(".toml") if where.startswith("<shipped") else name_or_path   # for --study
    study = Study(name=name, description=str(data.get("description", "")), shapes=tuple(shapes), space=space,
                  restrictions=restrictions, metric=metric, timing=Timing(**timing_table), path=where,
                  kernel_name=kernel_name, pass_=pass_, flags=f"--study {shlex.quote(given)}")
    if not study.configs():
        first = study.space.all_configs()[0]
        why = study.restricted_by(first, study.shapes[0].head_dim) or "its restrictions"
        raise StudyError(f"{where}: [space] restrictions leave no config to search (e.g. {first.key}: {why})")
    return study


def _only(table, allowed: tuple[str, ...], where: str, label: str) -> None:
    if not isinstance(table, dict):
        raise StudyError(f"{where}: {label} must be a table")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise StudyError(f"{where}: {label} has unknown field {unknown[0]!r}; allowed: {', '.join(allowed)}")


def _values(table: dict, key: str, default, where: str, label: str) -> list:
    value = table.get(key, default)
    values = value if isinstance(value, list) else [value]
    if not values:
        raise StudyError(f"{where}: {label} {key} is an empty list")
    return values


def _shapes(table, where: str, label: str) -> list[Problem]:
    _only(table, PROBLEM_FIELDS, where, label)
    if "n" in table and ("n_q" in table or "n_k" in table):
        raise StudyError(f"{where}: {label} give either n, or n_q and n_k, not both")
    fields = {}
    for key, default in (("batch", 4), ("heads", 8), ("head_dim", 64)):
        fields[key] = _values(table, key, default, where, label)
        for value in fields[key]:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise StudyError(f"{where}: {label} {key} = {value!r} must be a positive integer")
    for b, h in itertools.product(fields["batch"], fields["heads"]):
        if b * h > MAX_BATCH_HEADS:
            raise StudyError(f"{where}: {label} batch x heads = {b} x {h} is over {MAX_BATCH_HEADS}, the most a "
                             f"kernel's grid takes on the axis it puts them on; give a smaller batch or fewer heads")
    for value in fields["head_dim"]:
        if value not in HEAD_DIMS:
            raise StudyError(f"{where}: {label} head_dim = {value} is not supported; use one of {HEAD_DIMS}")
    lengths = {}
    for key in ("n_q", "n_k"):
        lengths[key] = _values(table, "n" if "n" in table else key, 4096, where, label)
        for value in lengths[key]:
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1 << 20:
                raise StudyError(f"{where}: {label} {key if 'n' not in table else 'n'} = {value!r} "
                                 f"must be an integer from 1 to {1 << 20}")
    dtypes = _values(table, "dtype", "bf16", where, label)
    for value in dtypes:
        if value not in DTYPE_BYTES:
            raise StudyError(f"{where}: {label} dtype = {value!r} is not allowed; use one of "
                             f"{', '.join(DTYPE_BYTES)}")
    causals = _values(table, "causal", False, where, label)
    for value in causals:
        if not isinstance(value, bool):
            raise StudyError(f"{where}: {label} causal = {value!r} must be true or false")
    pairs = (list(zip(lengths["n_q"], lengths["n_k"])) if "n" in table
             else list(itertools.product(lengths["n_q"], lengths["n_k"])))
    return [Problem(batch=b, heads=h, n_q=n_q, n_k=n_k, head_dim=d, dtype=t, causal=c)
            for d in fields["head_dim"] for t in dtypes for c in causals for (n_q, n_k) in pairs
            for b in fields["batch"] for h in fields["heads"]]


def _kernel(data: dict, where: str) -> tuple[str, str, kernels.TunableKernel]:
    """(kernel name, pass, kernel) of the study's ``kernel`` and ``pass`` fields (default the Triton forward)."""
    name, pass_ = data.get("kernel", kernels.DEFAULT_KERNEL), data.get("pass")
    for field_name, value in (("kernel", name), ("pass", pass_)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise StudyError(f"{where}: {field_name} = {value!r} must be a non-empty string; registered kernels: "
                             f"{', '.join(kernels.registered())}")
    try:
        kernel = kernels.get(name, pass_)
    except kernels.KernelNotFound as exc:
        raise StudyError(f"{where}: {exc.field} = {pass_ if exc.field == 'pass' else name!r}: {exc}") from None
    return name, kernel.pass_, kernel


def restriction_names(kernel: kernels.TunableKernel) -> tuple[str, ...]:
    """The names a study's restrictions may use: the kernel's tile axes, head_dim, its knobs."""
    config_type = kernel.config_type
    return tuple(a.name for a in config_type.tiles()) + ("head_dim",) + tuple(a.name for a in config_type.knobs())


def _space(table, where: str, kernel: kernels.TunableKernel) -> tuple[SearchSpace, tuple[str, ...]]:
    axes = kernel.config_type.axes()
    _only(table, tuple(a.name for a in axes) + ("restrictions",), where, "[space]")
    values = {}
    for a in axes:
        key, default, allowed = a.name, a.default, a.allowed
        chosen = table.get(key, list(default))
        if not isinstance(chosen, list) or not chosen:
            raise StudyError(f"{where}: [space] {key} must be a non-empty list, e.g. {list(default)}")
        for value in chosen:
            if value not in allowed or type(value) is not type(allowed[0]):      # 4.0 == 4, True == 1
                shown = "true, false" if isinstance(allowed[0], bool) else _ranges(allowed)
                raise StudyError(f"{where}: [space] {key} value {value!r} is not allowed; use values from {shown}")
        values[key] = tuple(sorted(set(chosen)))
    restrictions = table.get("restrictions", [])
    if not isinstance(restrictions, list) or not all(isinstance(r, str) for r in restrictions):
        raise StudyError(f"{where}: [space] restrictions must be a list of strings such as \"block_m >= block_n\"")
    names = restriction_names(kernel)
    for text in restrictions:
        try:
            compiled(text, names, where)
        except RestrictionError as exc:
            raise StudyError(str(exc)) from None
    return kernel.space(**values), tuple(restrictions)


def _ranges(values) -> str:
    """``[0, 24, 32, ..., 248]`` for long runs of allowed values, else the list."""
    values = sorted(values)
    if len(values) <= 10:
        return str(values)
    return f"[{values[0]}, {values[1]}, {values[2]}, ..., {values[-1]}]"
