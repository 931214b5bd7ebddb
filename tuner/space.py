"""What is searched, for any kernel: a config made of axes, and a space of values per axis.

A kernel's config is a frozen dataclass (a :class:`KernelConfig`) whose fields are declared
with :func:`axis`. Each axis says, once: the values of the default space, the values a study
may ask for, the value that leaves the kernel as it is (a *knob*'s off value; tiles have
none, they are always given), the knob's tag in the config's key, and how Optuna's TPE
samples it (an ordinal exponent, an ordinal integer, or a categorical). Everything else is
derived from that: the key (``128x64_w8_s3_tma_p2``) and its parser, the keyword arguments
of the kernel's launcher, the study file's ``[space]`` fields and restriction names, the
Optuna parameters and the fingerprint of a study.

A :class:`SearchSpace` is the values searched per axis of one kernel; which configs the
kernel can run at all is the kernel's own rule (:mod:`tuner.kernels`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["CATEGORICAL", "LOG2", "ORDINAL", "Axis", "KernelConfig", "SearchSpace", "axis"]

# How TPE samples an axis: as log2 of a power of two (ordered), as the integer itself (ordered),
# or as unordered choices. Grid and random search take every axis as a categorical of its values.
LOG2, ORDINAL, CATEGORICAL = "log2", "ordinal", "categorical"


@dataclass(frozen=True)
class Axis:
    """One field of a config, as the tuner searches it.

    Attributes:
        name: the field (and the launcher's keyword argument).
        default: the values of the default space.
        allowed: the values a study may ask for.
        plain: for a knob, its value when off (the kernel without it); None for a tile axis.
        tag: for a knob, its piece of the key: a bool adds ``_tag`` when on, an int ``_tagN``.
        tpe: how TPE samples it: :data:`LOG2`, :data:`ORDINAL` or :data:`CATEGORICAL`.
        param: the Optuna parameter name under TPE (grid and random use ``name``); stored
            Optuna studies resume only while it stays the same.
        always_asked: a knob Optuna is asked for even where the space fixes it to one value. A
            knob is otherwise left out of the parameters unless the space searches it, so that
            adding a knob leaves every stored Optuna study's parameters as they were; the
            forward's first knobs were always asked, and stay so for their stored studies.
    """

    name: str
    default: tuple
    allowed: tuple
    plain: Any = None
    tag: str = ""
    tpe: str = CATEGORICAL
    param: str = ""
    always_asked: bool = False

    @property
    def knob(self) -> bool:
        return self.plain is not None

    def asked(self, values: tuple) -> bool:
        """Whether Optuna is asked for this axis over ``values``: tiles always, knobs unless the space
        leaves them off (a knob fixed on, ``tma = [true]``, is asked: decoding leaves a knob not asked off)."""
        return not self.knob or self.always_asked or tuple(values) != (self.plain,)

    @property
    def tpe_param(self) -> str:
        return self.param or self.name

    def suffix(self, value) -> str:
        """This axis's piece of a key for ``value``: "" when off (and for tiles)."""
        if not self.knob or value == self.plain:
            return ""
        return f"_{self.tag}" if isinstance(value, bool) else f"_{self.tag}{value}"


def axis(default: tuple, allowed: tuple | None = None, *, plain: Any = None, tag: str = "",
         tpe: str = CATEGORICAL, param: str = "", always_asked: bool = False) -> Any:
    """A config field that is a searched axis (see :class:`Axis`); a knob defaults to its off value."""
    spec = dict(default=tuple(default), allowed=tuple(allowed if allowed is not None else default), plain=plain,
                tag=tag, tpe=tpe, param=param, always_asked=always_asked)
    if plain is None:
        return dataclasses.field(metadata={"axis": spec})
    return dataclasses.field(default=plain, metadata={"axis": spec})


class KernelConfig:
    """Base of a kernel's config type: a frozen dataclass whose fields are :func:`axis` fields.

    Every kernel's config has the tile axes ``block_m``, ``block_n``, ``num_warps`` and
    ``num_stages``: the store gives them columns and the heatmaps their grid and panels; any
    other tile axis (the backward's dQ tiles) and every knob tell the heatmap's variants apart.

    Class attributes a config type sets:
        KEY_FORMAT: the key's head from the tile axes, e.g. ``"{block_m}x{block_n}_w{num_warps}_s{num_stages}"``;
            the knobs set follow it as their suffixes.
        KEY_HELP: how to write one, for error messages.
    """

    KEY_FORMAT: ClassVar[str]
    KEY_HELP: ClassVar[str]
    GRID_AXES: ClassVar[tuple[str, ...]] = ("block_m", "block_n", "num_warps", "num_stages")

    @classmethod
    @functools.cache
    def axes(cls) -> tuple[Axis, ...]:
        """Every axis, in field order (tiles first, then the knobs)."""
        return tuple(Axis(name=f.name, **f.metadata["axis"]) for f in dataclasses.fields(cls))

    @classmethod
    def tiles(cls) -> tuple[Axis, ...]:
        return tuple(a for a in cls.axes() if not a.knob)

    @classmethod
    def knobs(cls) -> tuple[Axis, ...]:
        return tuple(a for a in cls.axes() if a.knob)

    @property
    def key(self) -> str:
        """A short stable name: the tiles (``128x64_w8_s3``), then every knob set (``_tma_ws_r168_p1``)."""
        values = dataclasses.asdict(self)
        return self.KEY_FORMAT.format(**values) + "".join(a.suffix(values[a.name]) for a in self.knobs())

    @property
    def plain(self) -> bool:
        """No knob set: the kernel every Triton version and GPU runs."""
        return all(getattr(self, a.name) == a.plain for a in self.knobs())

    @property
    def variant(self) -> str:
        """What tells this config apart beyond the heatmap's grid (:data:`GRID_AXES`): other tiles as
        ``name=value``, then the knobs set as their tags (``"tma p2"``); ``"plain"`` for none."""
        tiles = [f"{a.name}={getattr(self, a.name)}" for a in self.tiles() if a.name not in self.GRID_AXES]
        knobs = [a.suffix(getattr(self, a.name))[1:] for a in self.knobs()]
        return " ".join(tiles + [w for w in knobs if w]) or "plain"

    def params(self) -> dict:
        """Every field and its value."""
        return dataclasses.asdict(self)

    def as_kwargs(self) -> dict:
        """Keyword arguments of the kernel's launcher: the tiles, and the knobs set only (so a
        plain config calls the kernel exactly as before the knobs existed)."""
        return {a.name: getattr(self, a.name) for a in self.axes() if not a.knob or getattr(self, a.name) != a.plain}

    @classmethod
    def parse(cls, text: str):
        """Parse the tiles as comma-separated integers (``128,64,8,3``), or a :attr:`key` (knobs included).

        Raises:
            ValueError: not that form, a tile below 1, or an unknown knob; the message shows the forms.
        """
        text = text.strip() if isinstance(text, str) else ""
        tiles = cls.tiles()
        head = re.escape(cls.KEY_FORMAT)
        for a in tiles:
            head = head.replace(re.escape("{" + a.name + "}"), r"(\d+)")
        found = re.fullmatch(head + r"((?:_\w+?)*)", text)
        rest = ""
        if found:
            values, rest = [int(v) for v in found.groups()[:len(tiles)]], found.group(len(tiles) + 1)
        else:
            parts = [p.strip() for p in text.split(",")]
            values = [int(p) for p in parts] if all(p.isdigit() for p in parts) else []
        if len(values) != len(tiles) or min(values) < 1:
            raise ValueError(f"config {text!r} must be {cls.KEY_HELP}")
        return cls(*values, **cls._knob_values(text, rest))

    @classmethod
    def _knob_values(cls, text: str, rest: str) -> dict:
        fields: dict = {}
        for piece in filter(None, rest.split("_")):
            for a in cls.knobs():
                if isinstance(a.plain, bool) and piece == a.tag:
                    fields[a.name] = True
                    break
                if not isinstance(a.plain, bool) and piece.startswith(a.tag) and piece[len(a.tag):].isdigit():
                    fields[a.name] = int(piece[len(a.tag):])
                    break
            else:
                forms = ", ".join(f"_{a.tag}" if isinstance(a.plain, bool) else f"_{a.tag}N ({a.name})"
                                  for a in cls.knobs())
                raise ValueError(f"config {text!r}: unknown knob {piece!r}; knobs are {forms}")
        return fields


@dataclass(frozen=True)
class SearchSpace:
    """The values searched per axis of one kernel; the space is their product.

    Attributes:
        kernel: the :class:`tuner.kernels.TunableKernel` whose configs these are.
        axes: (axis name, values) for every axis of its config type, in field order.
    """

    kernel: Any
    axes: tuple[tuple[str, tuple], ...]

    @property
    def values(self) -> dict[str, tuple]:
        return dict(self.axes)

    def __getitem__(self, name: str) -> tuple:
        return self.values[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    def all_configs(self) -> list:
        """Every combination, restricted or not, in a stable order (the last axis varies fastest)."""
        config_type = self.kernel.config_type
        return [config_type(*values) for values in itertools.product(*(values for _, values in self.axes))]

    def runnable_on(self, gpu) -> SearchSpace:
        """This space less the knob values ``gpu`` (or the installed Triton) can never run: a knob keeps a
        value only where some config of the space carrying it passes the kernel's budget rule (so TMA and
        warp specialization leave an sm_89 space; warp specialization stays on sm_90, where only some warp
        counts refuse it). Tiles, and combinations the rule refuses, stay: the budget judges those. A space
        of which the target runs nothing is left whole (the budget says why of each config)."""
        runs = [c for c in self.all_configs() if self.kernel.budget_rule(c, gpu) is None]
        if not runs:
            return self
        seen = {a.name: {getattr(c, a.name) for c in runs} for a in self.kernel.config_type.knobs()}
        return SearchSpace(self.kernel, tuple((name, tuple(v for v in values if v in seen[name]) if name in seen
                                               else values) for name, values in self.axes))

    def configs(self, head_dim: int) -> list:
        """The combinations the kernel can run at this head dim (its restriction)."""
        return [c for c in self.all_configs() if self.kernel.restriction(c, head_dim) is None]

    def trial_params(self, config, tpe: bool) -> dict:
        """Optuna's parameters for ``config``, the inverse of :func:`tuner.search.config_of`: the axes
        Optuna is asked for (:meth:`Axis.asked`), in TPE's encoding under ``tpe``, else as values."""
        params = {}
        for axis in self.kernel.config_type.axes():
            if axis.asked(self[axis.name]):
                value = getattr(config, axis.name)
                if not tpe:
                    params[axis.name] = value
                else:
                    params[axis.tpe_param] = value.bit_length() - 1 if axis.tpe == LOG2 else value
        return params

    def size(self) -> int:
        """Points of the product, restricted ones included."""
        count = 1
        for _, values in self.axes:
            count *= len(values)
        return count
