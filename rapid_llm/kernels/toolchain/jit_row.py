"""A .cu file is a row: the generic JIT target, and rows that .cu files declare about themselves.

A shipped source in an op's folder, ``kernels/ops/<group>/<op>/``, becomes a row by carrying one
line, written by ``promote()`` (or by hand)::

    // rapid_llm row: {"name": "jit/scale", "op": "scale", "fn": "scale_vec", "dtypes": ["bf16", "fp16", "fp32"],
    //                 "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/scale"}}

(on a single line). The registry reads these lines when it discovers the
shipped ops; no per-op Python wrapper exists. :class:`JitRow` serves shipped
rows and ``%%cuda_jit`` rows alike: ``op(input, *args, out=None)`` allocates
``out`` like the input and calls the launcher ``fn(out, input, *args)``. The
line's ``"out"`` field names how ``out`` is made: one of the out rules
(rapid_llm.kernels.registry.out_rules).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.check_marks import values_read_on
from rapid_llm.kernels.registry.out_rules import DEFAULT as DEFAULT_OUT, OUT_RULES, make_out
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, RegistryError
from rapid_llm.kernels.toolchain.cache import local_sources
from rapid_llm.kernels.registry.tune_space import SearchSpace, config_flags, read_space

__all__ = ["JitRow", "HEADER_PREFIX", "read_header", "write_header", "row_from_header", "register_cu_rows",
           "source_digest"]

HEADER_PREFIX = "// rapid_llm row: "
_HEADER_RE = re.compile(r"^// rapid_llm row: (\{.*\})\s*$", re.M)
_FIELDS = ("name", "op", "fn", "dtypes", "golden", "graph_safe", "min_sm", "priority", "description", "out",
           "layouts")


def source_digest(text: str, flags: Sequence[str] = ()) -> str:
    """The digest of a source: what names the code a row runs, wherever a digest of a source is needed.

    The row line is left out (promote rewrites that line; the code stays the same). ``flags``, when
    given, are part of it: a cell built with other flags is other code, so a verification remembered
    for one (keyed by this digest) does not carry over to the other. The build cache's key
    (``cache.cache_key``) is not this digest: it names a build, so it also covers the included
    headers, the toolchain, the arch and Python, which change the binary and not the code.
    """
    return hashlib.sha256("\0".join((_HEADER_RE.sub("", text), *flags)).encode()).hexdigest()


#: (path, stamps, flags) -> digest: read on every dispatch resolution, hashed once per edit.
_files_memo: dict[tuple, str] = {}


def files_digest(source: Path, flags: Sequence[str]) -> str | None:
    """The digest of a JIT source's code: its text (the row line left out), every project header it includes,
    transitively, and its build flags; None where the file is gone."""
    if not source.is_file():
        return None
    files = local_sources(source)
    try:
        stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files) + (tuple(flags),)
    except OSError:
        return None
    digest = _files_memo.get(stamp)
    if digest is None:
        first, *headers = (p.read_text(errors="replace") for p in files)
        text = source_digest(first, flags)
        digest = hashlib.sha256("\0".join((text, *headers)).encode()).hexdigest() if headers else text
        _files_memo[stamp] = digest
    return digest


class JitRow:
    """Row target: launcher ``fn`` of the module built from ``source``, called out-first.

    The module is built (or loaded from the disk cache) on the first call;
    afterwards a call is :meth:`bound`: the allocation of ``out`` and the
    launcher call, both in C where the fast-path binding is built.
    """

    def __init__(self, source: str | Path, fn: str, *, launcher: Callable[..., Any] | None = None,
                 digest: str | None = None, not_built: str | None = None, out: str = DEFAULT_OUT,
                 flags: tuple[str, ...] = ("-O3",), built_from: str | Path | None = None,
                 config: dict[str, Any] | None = None) -> None:
        if out not in OUT_RULES:
            raise RegistryError(f"{Path(source).name}: out must be one of {', '.join(OUT_RULES)}, got {out!r}")
        self.source = Path(source)
        self.fn = fn
        self.out = out
        #: the build's nvcc/NVRTC flags before a config's defines (a sanitizer run adds -lineinfo)
        self.base_flags = tuple(flags)
        #: a config given (a tune candidate; {}: the untuned code on purpose), or None: the pinned one, if any
        self._config = dict(config) if config is not None else None
        self.digest = digest
        self.not_built = not_built  # why it cannot run here (a %%cuda_jit cell without CUDA: unbuilt, or compiled only)
        self._launcher = launcher
        self._launcher_flags = self.base_flags  # what a launcher given here was built with (the untuned code)
        self._bound: Callable[..., Any] | None = None
        self._unchecked_at: int | None = None  # the registry version a binding without the op's checks was made at
        #: the copy of the source its launcher was built from (the build cache's, which nothing rewrites; the
        #: file at ``source`` may since hold another cell's text): a child process rebuilds the row from it
        self.built_from = Path(built_from) if built_from is not None else None
        #: the source's digest when its launcher was built here (promote checks the file is still that code)
        self.built_digest = (source_digest((self.built_from or self.source).read_text()) if launcher is not None
                             else None)
        self._space: tuple[tuple, SearchSpace | None] | None = None
        self.__name__ = self.__qualname__ = fn
        self.__doc__ = (f"{fn}(*args): works in place, returns None." if out == "none" else
                        f"{fn}(input, *args, out=None): allocates out ({out}), then {fn}(out, input, *args).")

    # ------------------------------------------------------------ tuning
    def space(self) -> SearchSpace | None:
        """The search space the source declares (rapid_llm.kernels.registry.tune_space), or None."""
        path = self.source
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (str(path), st.st_mtime_ns, st.st_size)
        if self._space is None or self._space[0] != stamp:
            self._space = (stamp, read_space(path.read_text(errors="replace"), str(path)))
        return self._space[1]

    def untuned_digest(self) -> str | None:
        """The digest of the code and its space before a config's defines: what a pin is keyed by."""
        return files_digest(self.source, self.base_flags)

    def pin(self, kind: str | None = None) -> Any:
        """The config pinned for this code on a GPU kind (default: this process's; rapid_llm.kernels.registry.pins),
        or None."""
        if self._config is not None or self.space() is None:
            return None
        from rapid_llm.kernels.registry import pins

        digest = self.untuned_digest()
        return None if digest is None else pins.pinned(self.source, digest, kind or pins.current_kind())

    def config_for(self, kind: str | None = None) -> dict[str, Any] | None:
        """The config this row builds with on a GPU kind: the one given, else the pinned one, else None."""
        if self._config is not None:
            return self._config or None
        found = self.pin(kind)
        return found.config if found is not None else None

    @property
    def config(self) -> dict[str, Any] | None:
        """:meth:`config_for` this process's GPU kind."""
        return self.config_for()

    def flags_for(self, kind: str | None = None) -> tuple[str, ...]:
        """The build's flags on a GPU kind: the base flags, then the config's ``-DNAME=VALUE``."""
        return self.base_flags + config_flags(self.config_for(kind))

    @property
    def flags(self) -> tuple[str, ...]:
        """:meth:`flags_for` this process's GPU kind."""
        return self.flags_for()

    def forget_build(self) -> None:
        """Drop the loaded launcher: the next call builds (or loads) the code its flags name now (a new pin)."""
        self._bound = None
        if self._launcher is not None and self._launcher_flags != self.flags:
            self._launcher = None

    def launcher(self) -> Callable[..., Any]:
        """The built launcher (building the source on first use)."""
        if self.not_built is not None:
            raise RuntimeError(f"{self.source.name} cannot run on this machine: {self.not_built}")
        flags = self.flags
        if self._launcher is None or self._launcher_flags != flags:
            from rapid_llm.kernels.toolchain.jit import load_jit

            module = load_jit(self.source.stem, str(self.source), extra_cuda_cflags=flags)
            try:
                self._launcher = getattr(module, self.fn)
            except AttributeError:
                raise RegistryError(f"{self.source} exports no function {self.fn!r}") from None
            self._launcher_flags = flags
        return self._launcher

    def bound(self) -> Callable[..., Any]:
        """What a call runs: the op's argument checks (:func:`op_checks`), then the launcher with ``out`` made
        by the row's rule (building on first use)."""
        if self._bound is None or (self._unchecked_at is not None and self._unchecked_at != _spec.registry_version()):
            checks = op_checks(self)  # none yet where the row is not registered: asked again once the registry changes
            self._bound = _bind(self.launcher(), self.fn, self.out, *checks)
            self._unchecked_at = None if checks.check is not None else _spec.registry_version()
        return self._bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return ((self._bound if self._unchecked_at is None else None) or self.bound())(*args, **kwargs)

    def __repr__(self) -> str:
        shown = self.source.relative_to(platform.OPS_DIR) if self.source.is_relative_to(platform.OPS_DIR) else self.source.name
        return f"JitRow({str(shown)!r}, {self.fn!r})"


class RowChecks(NamedTuple):
    """What a JIT row's call path takes from its op (:func:`op_checks`)."""

    check: Callable[..., Any] | None = None  # the op's argument checks, run before anything else
    answer: Callable[..., Any] | None = None  # raises the answer to a call that failed
    out_at: int = -1  # where the op's signature takes out by position (-1: by keyword only)
    values_read_on: tuple[str, ...] = ()  # device types whose tensor values check reads (registry.check_marks)


def op_checks(target: Any) -> RowChecks:
    """The checks a call of the row served by ``target`` runs first, what answers a call that fails, and where
    its op takes ``out`` by position.

    A launcher's RL_CHECKs guard what a wrong pointer would break, not what only the op knows (a negative
    eps; a written tensor sharing memory with another argument, which rotates q twice or leaves the wrong
    residual). So a JIT row runs its op's one set of argument checks, the floor's ``check``
    (rapid_llm.kernels.ops.arguments), as the floor and the Triton rows do: every path gives a bad call the
    floor's answer. Only a call that fails pays for ``answer``; a call like one that passed ``check`` is not
    checked again (the compiled call path remembers those: rapid_llm/kernels/dispatch/fastcall_checked.inc),
    except with a tensor on a device whose values ``check`` reads. Empty where no registered row has
    ``target``, or the op's floor has no check.
    """
    rows = [r for op in _spec.all_ops() for r in _spec.rows_for(op)]
    row = next((r for r in rows if r.target is target), None) or next(  # or the row of the same code, registered anew
        (r for r in rows if isinstance(r.target, JitRow) and isinstance(target, JitRow)
         and (r.target.source, r.target.fn, r.target.out) == (target.source, target.fn, target.out)), None)
    floor_row = None if row is None else _spec.native_row(row.op)
    floor = None if floor_row is None else floor_row.load()
    check = getattr(floor, "check", None)
    if check is None:
        return RowChecks()
    floor_says = floor_answer(floor)
    params = list(inspect.signature(floor).parameters)

    def answer(*args: Any, **kwargs: Any) -> None:
        """A failed call's answer: the floor's, else the row's refusal of a device it does not run on (a meta
        tensor, which the floor computes with, has no memory to launch on); where both pass, the row's error."""
        floor_says(*args, **kwargs)
        for t in (*args, *kwargs.values()):
            if isinstance(t, torch.Tensor) and t.device.type not in row.devices:
                raise ValueError(f"{row.op}: the {row.name} row runs on {' and '.join(row.devices)} tensors, "
                                 f"got {t.device.type}")  # arguments.runs_on's words for a Triton row

    return RowChecks(check, answer, params.index("out") if "out" in params else -1, values_read_on(check))


def floor_answer(floor: Callable[..., Any]) -> Callable[..., None]:
    """``answer(*args, **kwargs)``: raises what ``floor`` called with these arguments raises before it computes
    anything (a wrong argument count in Python's words for its signature, then its ``check``); returns where
    they pass. Every path that answers a bad call in the floor's words calls this (dispatch, torch.ops, rows)."""
    signature = inspect.signature(floor)
    check = getattr(floor, "check", None)

    def answer(*args: Any, **kwargs: Any) -> None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            floor(*args, **kwargs)  # binding failed, so the call raises Python's own TypeError before its body runs
            raise
        if check is not None:
            check(*args, **kwargs)

    return answer


def _bind(launcher: Callable[..., Any], name: str, rule: str, check: Callable[..., Any] | None = None,
          answer: Callable[..., Any] | None = None, out_at: int = -1,
          values_read_on: tuple[str, ...] = ()) -> Callable[..., Any]:
    """``launcher`` behind ``check`` and its out rule: fastcall's OutFirst where the binding builds (which checks
    a call like one that passed once), else the same in Python (which checks every call)."""
    try:
        from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

        return fastcall().OutFirst(launcher, name, OUT_RULES[rule], check, answer, out_at, values_read_on)
    except (ImportError, RuntimeError, OSError):  # no compiler here, or a torch without the exchange API
        pass

    def call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        try:
            if check is not None:
                check(*args, **kwargs)
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - answered as OutFirst answers it
            failed = exc
        if answer is not None:
            answer(*args, **kwargs)
        raise failed

    def in_place(*args: Any, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{name}() works in place and takes no out=")
        launcher(*args)

    def out_first(input: Any, *args: Any, out: Any = None) -> Any:
        if out is None and out_at >= 1 and len(args) == out_at:  # out by position, as the op takes it
            *args, out = args
        if out is None:
            out = make_out(rule, input, name)
        launcher(out, input, *args)
        return out

    run = in_place if rule == "none" else out_first

    def bound(*args: Any, **kwargs: Any) -> Any:
        return call(run, args, kwargs)

    bound.__name__ = bound.__qualname__ = name
    return bound


def read_header(text: str, where: str = "source") -> dict[str, Any] | None:
    """The row a source declares about itself, or None when it declares none."""
    match = _HEADER_RE.search(text)
    return None if match is None else row_line_fields(match[1], _FIELDS, where)


def row_line_fields(raw: str, allowed: Sequence[str], where: str) -> dict[str, Any]:
    """The fields of a ``rapid_llm row:`` line's JSON (a .cu's or a Python module's): name, op and fn required,
    nothing outside ``allowed``; RegistryError naming ``where`` otherwise."""
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise RegistryError(f"{where}: the rapid_llm row line is not valid JSON ({exc})") from None
    unknown = sorted(set(fields) - set(allowed))
    if unknown or not {"name", "op", "fn"} <= set(fields):
        raise RegistryError(f"{where}: the rapid_llm row line needs name, op and fn"
                            + (f"; unknown fields: {', '.join(unknown)}" if unknown else ""))
    return fields


def write_header(text: str, fields: dict[str, Any]) -> str:
    """``text`` with its row line set to ``fields`` (replaced, or added as the first line)."""
    line = HEADER_PREFIX + json.dumps({k: fields[k] for k in _FIELDS if k in fields}, ensure_ascii=True)
    if _HEADER_RE.search(text):
        return _HEADER_RE.sub(line, text, count=1)
    return f"{line}\n{text}"


def row_from_header(fields: dict[str, Any], source: Path) -> KernelSpec:
    return KernelSpec(
        name=fields["name"], op=fields["op"], backend="jit",
        target=JitRow(source, fields["fn"], out=fields.get("out", DEFAULT_OUT)),
        available="rapid_llm.kernels.toolchain.jit:available", dtypes=tuple(fields.get("dtypes", ("bf16", "fp16", "fp32"))),
        devices=("cuda",),
        golden=GoldenRecord.from_json(fields.get("golden") or {}),
        priority=fields.get("priority"), graph_safe=bool(fields.get("graph_safe", True)),
        min_sm=fields.get("min_sm"), description=fields.get("description", f"{source.name}, launcher {fields['fn']}()"),
        layouts=tuple(fields["layouts"]) if "layouts" in fields else None,
    )


def register_cu_rows(root: Path | None = None) -> list[KernelSpec]:
    """Register every row that a .cu file under ``root`` (default: the shipped sources) declares."""
    root = platform.OPS_DIR if root is None else root
    out = []
    for path in sorted(root.glob("*/*/*.cu")):
        fields = read_header(path.read_text(errors="replace"), str(path))
        if fields is None:
            continue
        try:
            _spec.get_decl(fields["op"])
        except RegistryError:  # a row without its op could never be verified, benchmarked or dispatched
            warnings.warn(f"{path}: its row {fields['name']} serves op {fields['op']!r}, which no op group "
                          "declares; the row is not registered (promote() ships a notebook's op with its row)",
                          RuntimeWarning, stacklevel=2)
            continue
        out.append(_spec.register(row_from_header(fields, path), replace=True))
    return out
