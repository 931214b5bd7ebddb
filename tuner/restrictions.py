"""A study's restrictions: a small expression language over a config's axes (``block_m >= block_n``).

Arithmetic (``+ - * // %``), comparisons and ``and``/``or``/``not`` over the names a kernel gives, and
integer constants; nothing else parses. Each is vetted and compiled once (:func:`compiled`), then
evaluated per config (:func:`evaluate`). Plain Python.
"""

from __future__ import annotations

import ast
import functools

__all__ = ["MAX_RESTRICTION", "RestrictionError", "compiled", "evaluate", "parse"]


class RestrictionError(ValueError):
    """A restriction that is not in the language; the message names it and what is allowed."""


MAX_RESTRICTION = 500      # characters: a rule over a handful of axes is far shorter
_ALLOWED_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp,
                  ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Compare, ast.Eq, ast.NotEq, ast.Lt,
                  ast.LtE, ast.Gt, ast.GtE, ast.Name, ast.Load, ast.Constant)


def parse(text: str, names: tuple[str, ...], where: str = "") -> ast.Expression:
    """Parse a restriction: arithmetic and comparisons over the config's names, nothing else."""
    if len(text) > MAX_RESTRICTION:
        raise RestrictionError(f"{where}: [space] restriction {text[:40]!r}... is {len(text)} characters long; "
                               f"a restriction is at most {MAX_RESTRICTION}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, MemoryError, RecursionError):      # the last two: nested too deep for the parser
        raise RestrictionError(f"{where}: [space] restriction {text!r:.80} is not a valid expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise RestrictionError(f"{where}: [space] restriction {text!r} uses {type(node).__name__}; only arithmetic "
                                   f"(+ - * // %), comparisons, and/or/not over {', '.join(names)} are allowed")
        if isinstance(node, ast.Name) and node.id not in names:
            raise RestrictionError(f"{where}: [space] restriction {text!r} names {node.id!r}; use {', '.join(names)}")
        if isinstance(node, ast.Constant) and (not isinstance(node.value, int) or isinstance(node.value, bool)):
            raise RestrictionError(f"{where}: [space] restriction {text!r}: only integer constants are allowed")
    return tree


@functools.lru_cache(maxsize=256)
def compiled(text: str, names: tuple[str, ...], where: str = ""):
    """A restriction parsed, vetted and compiled once (a sweep judges thousands of configs)."""
    tree = parse(text, names, where)
    try:
        return compile(tree, "<restriction>", "eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise RestrictionError(f"{where}: [space] restriction {text!r} cannot be compiled "
                               f"({type(exc).__name__})") from None


def evaluate(text: str, names: dict[str, int]) -> bool:
    """The restriction's value for one config; raises what the arithmetic raises (e.g. ZeroDivisionError)."""
    return bool(eval(compiled(text, tuple(names)), {"__builtins__": {}}, names))  # noqa: S307 (vetted nodes only)
