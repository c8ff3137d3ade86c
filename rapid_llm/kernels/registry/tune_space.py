"""A row's search space, declared in its own source: the variants ``tune`` compiles, verifies and times.

A CUDA source (a ``%%cuda_jit`` cell or a shipped ``.cu``) declares it on one line::

    // rapid_llm tune: {"THREADS": [128, 256, 512], "VECS": [1, 2, 4], "where": "THREADS * VECS <= 2048"}

Each name is a preprocessor macro the source reads with a default::

    #ifndef THREADS
    #define THREADS 256   // the untuned row: what a build without a pinned config runs
    #endif

A candidate is one value per name, built with ``-DNAME=VALUE``; ``where`` (optional) is an expression over
the names that a candidate must satisfy (plain arithmetic and comparisons, no calls). A Triton row declares the
same dict as its spec's ``tune_space`` (its names are the launcher's keyword arguments). The line is part of
the source, so it is in the row's digest: editing the space is editing the code.
"""
from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

__all__ = ["SearchSpace", "TuneSpaceError", "TUNE_PREFIX", "read_space", "config_flags", "config_label"]

TUNE_PREFIX = "// rapid_llm tune: "
_TUNE_RE = re.compile(r"^// rapid_llm tune: (\{.*\})\s*$", re.M)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: What a ``where`` expression may use: names, numbers, arithmetic, comparisons, and/or/not.
_ALLOWED = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Load, ast.Constant,
            ast.And, ast.Or, ast.Not, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
            ast.USub, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.IfExp)

Config = Mapping[str, Any]


class TuneSpaceError(ValueError):
    """A search space that cannot be read: names the source and the problem."""


@dataclass(frozen=True)
class SearchSpace:
    """Names -> the values each may take, and the condition a candidate must meet."""

    params: tuple[tuple[str, tuple[Any, ...]], ...]
    where: str | None = None

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any], where_from: str = "search space") -> "SearchSpace":
        fields = dict(fields)
        where = fields.pop("where", None)
        if where is not None and not isinstance(where, str):
            raise TuneSpaceError(f"{where_from}: 'where' must be a string expression, got {where!r}")
        if not fields:
            raise TuneSpaceError(f"{where_from}: the space names no parameter")
        params = []
        for name, values in fields.items():
            if not _NAME_RE.match(name):
                raise TuneSpaceError(f"{where_from}: parameter {name!r} is not a plain identifier")
            if not isinstance(values, (list, tuple)) or not values:
                raise TuneSpaceError(f"{where_from}: {name} must list at least one value, got {values!r}")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                    raise TuneSpaceError(f"{where_from}: {name}'s values must be numbers or strings, got {v!r}")
            if len(set(values)) != len(values):
                raise TuneSpaceError(f"{where_from}: {name} lists a value twice: {list(values)}")
            params.append((name, tuple(values)))
        space = cls(tuple(params), where)
        if where is not None:
            space._compiled_where(where_from)
        return space

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.params)

    def _compiled_where(self, where_from: str = "search space") -> Any:
        try:
            tree = ast.parse(self.where, mode="eval")
        except SyntaxError as exc:
            raise TuneSpaceError(f"{where_from}: 'where' is not an expression: {exc.msg}") from None
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED):
                raise TuneSpaceError(f"{where_from}: 'where' may use names, numbers, arithmetic and comparisons "
                                     f"only, not {type(node).__name__}")
            if isinstance(node, ast.Name) and node.id not in self.names:
                raise TuneSpaceError(f"{where_from}: 'where' names {node.id!r}, which is not a parameter "
                                     f"({', '.join(self.names)})")
        return compile(tree, "<where>", "eval")

    def configs(self) -> Iterator[dict[str, Any]]:
        """Every candidate, in the order the lists give (the first candidate is the first of each list)."""
        code = self._compiled_where() if self.where else None
        for values in itertools.product(*(v for _, v in self.params)):
            config = dict(zip(self.names, values))
            if code is None or eval(code, {"__builtins__": {}}, dict(config)):
                yield config

    def size(self) -> int:
        return sum(1 for _ in self.configs())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {n: list(v) for n, v in self.params}
        if self.where:
            out["where"] = self.where
        return out

    def contains(self, config: Config) -> bool:
        return set(config) == set(self.names) and any(dict(config) == c for c in self.configs())


def read_space(text: str, where_from: str = "source") -> SearchSpace | None:
    """The search space a CUDA source declares (its ``// rapid_llm tune:`` line), or None."""
    found = _TUNE_RE.findall(text)
    if not found:
        return None
    if len(found) > 1:
        raise TuneSpaceError(f"{where_from}: more than one '{TUNE_PREFIX.strip()}' line; declare one space")
    try:
        fields = json.loads(found[0])
    except ValueError as exc:
        raise TuneSpaceError(f"{where_from}: the rapid_llm tune line is not valid JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise TuneSpaceError(f"{where_from}: the rapid_llm tune line must be a JSON object")
    return SearchSpace.from_dict(fields, where_from)


def config_flags(config: Config | None) -> tuple[str, ...]:
    """The compiler flags that build ``config``: one ``-DNAME=VALUE`` per name, in name order."""
    return tuple(f"-D{k}={config[k]}" for k in sorted(config)) if config else ()


def config_label(config: Config | None) -> str:
    """``THREADS=256 VECS=2``, or ``untuned`` for none."""
    return " ".join(f"{k}={config[k]}" for k in sorted(config)) if config else "untuned"
