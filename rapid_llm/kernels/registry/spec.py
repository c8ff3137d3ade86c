"""KernelSpec rows, op declarations, and the one registry that dispatch, golden and bench read.

A row names an implementation of an op and every fact dispatch needs to decide
whether it may run: its backend, its dtypes and devices, its toolchain probe,
its golden record, its priority, whether CUDA-graph replay is safe, the minimum
SM it needs. Targets and probes are lazy ``"module:attr"`` strings so that
registering a row imports nothing; a callable is accepted too, so a notebook
can register a function it just defined.

The registry finds the shipped ops itself, on the first lookup: every op folder
``rapid_llm.kernels.ops.<group>.<op>`` hands it its ``DECLARATION`` (a
:func:`rapid_llm.kernels.registry.opdecl.define_op` result: plain data, read
again by every fresh registry), then the discoverers run (functions that find
more rows, such as the ``.cu`` files in the op folders; the package
facade adds them from above with :func:`add_discoverer`). There is no central
list of ops, groups or references. Every lookup sees the shipped rows;
:func:`isolated` gives a test a registry of its own.

Changes are said on one bus: :func:`on_change` (rows added, replaced or
re-verified; a policy changed) and :func:`on_declare` (an op declared: the
custom-op registration listens there).

A library op is declared again only by an explicit choice, a shadow
(:func:`add_op` with ``shadow_library=True``): the library's declaration and
every row the op had are set aside, whole, and :func:`restore` brings them
back, so the process stays usable either way and :func:`shadowed_rows` says
what is hidden.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Union

from rapid_llm.kernels.platform import DTYPE_NAMES
from rapid_llm.kernels.registry import op_writes

__all__ = [
    "BACKENDS",
    "DTYPE_NAMES",
    "Availability",
    "GoldenRecord",
    "KernelSpec",
    "RegistryError",
    "register",
    "refuse",
    "unregister",
    "native_row",
    "update_golden",
    "get_row",
    "rows_for",
    "all_ops",
    "registry_version",
    "resolve_ref",
    "isolated",
    "declare",
    "get_decl",
    "is_library_decl",
    "library_declares",
    "restore",
    "shadowed_rows",
    "op_group",
    "on_change",
    "row_stride",
    "layout_of",
]


#: The native floor plus the seed's four paths, and ``gluon``: Triton's Gluon
#: (``triton.experimental.gluon``), a kernel language of its own, so its rows
#: are named and filtered apart from plain Triton's; ``cute``: CUTLASS's CuTe
#: DSL (nvidia-cutlass-dsl), kernels in Python compiled to a cubin and launched
#: through a C launcher (rapid_llm.kernels.toolchain.cute_build). ``aot`` and ``external``
#: exist so an AOT extension or a library (FlashInfer, DeepGEMM) can become a
#: row later without touching dispatch.
BACKENDS = ("native", "triton", "gluon", "cute", "jit", "aot", "external")

DEVICE_TYPES = ("cpu", "cuda")
#: Memory layouts a call can bring, narrowest first: every tensor argument dense and row-major; "rows",
#: every tensor's last dim contiguous and its leading dims one uniform row stride (``x[:, :H]`` of a
#: [T, 2H] buffer), which a row-stride kernel walks as [rows, H]; or any strides. A row that takes
#: "strided" takes "rows" too (see KernelSpec.takes).
LAYOUTS = ("contiguous", "rows", "strided")


def row_stride(t: Any) -> int | None:
    """The distance between the rows of tensor ``t`` viewed as [rows, t.shape[-1]], or None where no one
    stride describes it. A "rows" row's kernel takes this instead of assuming a dense tensor.

    Contiguous: the last dim's size. Otherwise the last dim must be contiguous and the leading dims
    (size-1 ones skipped, as torch's is_contiguous skips them) one uniform stride, with rows not
    overlapping (a slice ``x[:, :H]`` of a [T, 2H] buffer has stride 2H). fastcall_dispatch.inc's
    dl_rows applies the same rule.
    """
    shape, stride = tuple(t.shape), tuple(t.stride())
    if t.is_contiguous():
        return shape[-1] if shape else 1
    if len(shape) < 2 or (shape[-1] != 1 and stride[-1] != 1):
        return None
    row = expected = None
    for size, st in zip(reversed(shape[:-1]), reversed(stride[:-1])):
        if size == 1:
            continue
        if row is None:
            row = st
        elif st != expected:
            return None
        expected = st * size
    return row if row is not None and row >= shape[-1] else None  # None: overlapping rows (a stride-0 expand)


def layout_of(tensors: Any) -> str:
    """The layout class (LAYOUTS) of a call passing these tensors: the widest any of them needs."""
    tensors = list(tensors)
    if all(t.is_contiguous() for t in tensors):
        return "contiguous"
    return "rows" if all(row_stride(t) is not None for t in tensors) else "strided"


_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

Ref = Union[str, Callable[..., Any]]


class RegistryError(ValueError):
    """A row that cannot be registered or an op that cannot be dispatched."""


class Availability:
    """A probe's answer: truthy when the row can run, with the reason when not.

    Probes may return a plain bool; returning ``Availability(False, "nvcc not
    found on PATH")`` lets explain() show the user the exact cause.
    """

    __slots__ = ("ok", "reason")

    def __init__(self, ok: bool, reason: str = "") -> None:
        self.ok = bool(ok)
        self.reason = reason

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"Availability({self.ok}, {self.reason!r})"


@dataclass(frozen=True)
class GoldenRecord:
    """What verification against the baseline row measured.

    ``verified=False`` keeps a row out of default dispatch: a kernel has to be
    checked against its baseline before it may answer calls. ``refused`` names
    a check that refused this build (bench's ``timed_output_wrong: ...``): the
    row stays out of dispatch, whatever a later verify of the same build says,
    until a new build replaces it (:func:`refuse`).
    """

    verified: bool = False
    max_abs_diff: float | None = None
    baseline: str | None = None
    per_dtype: tuple[tuple[str, float], ...] = ()
    refused: str | None = None

    def __post_init__(self) -> None:
        if self.max_abs_diff is not None and not self.max_abs_diff >= 0:
            raise RegistryError(f"GoldenRecord.max_abs_diff must be >= 0, got {self.max_abs_diff!r}")
        if self.refused and self.verified:
            raise RegistryError("GoldenRecord: a refused build is never verified")

    # The one JSON form of a record: a .cu row line, the per-digest verification cache, a verify child's answer.
    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready object (what :meth:`from_json` reads back)."""
        return {"verified": self.verified, "max_abs_diff": self.max_abs_diff, "baseline": self.baseline,
                "per_dtype": [list(p) for p in self.per_dtype], "refused": self.refused}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GoldenRecord:
        """A record from :meth:`to_json`'s object; a missing field takes its default (unverified)."""
        return cls(verified=bool(data.get("verified", False)), max_abs_diff=data.get("max_abs_diff"),
                   baseline=data.get("baseline"), per_dtype=tuple((d, float(v)) for d, v in data.get("per_dtype", ())),
                   refused=data.get("refused"))


def _check_ref(kind: str, name: str, ref: Ref | None) -> None:
    if ref is None and kind == "available":
        return
    if callable(ref):
        return
    if not isinstance(ref, str) or not _TARGET_RE.match(ref):
        raise RegistryError(
            f"row {name!r}: {kind} must be 'package.module:attribute' or a callable, got {ref!r}"
        )


@dataclass(frozen=True)
class KernelSpec:
    """One implementation of an op, and the facts dispatch filters on.

    ``graph_safe``: a kernel that syncs, calls ``.item()`` or assembles host
    state per call is not capture-safe, because CUDA-graph replay bakes the
    host values of the capture call into every replay.

    ``priority``: a static priority, higher wins, or None (no static priority:
    below every number, so it loses ties). A measured latency for the device,
    dtype and size ranks ahead of any priority (see dispatch).

    ``layouts``: what the row accepts, among "contiguous", "rows" (last dim
    contiguous, one row stride) and "strided" (any view). Default: all for the
    native floor, contiguous only for any other row; dispatch sends a call to
    a row that takes its layout, else the floor.

    ``backend`` defaults to the name's prefix and ``op`` to the declaration
    that lists the row (a row registered on its own must name its op).
    """

    name: str
    target: Ref = None
    op: str = ""
    backend: str = ""
    available: Ref | None = None
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    devices: tuple[str, ...] = ("cuda",)
    golden: GoldenRecord = field(default_factory=GoldenRecord)
    priority: float | None = None
    graph_safe: bool = True
    min_sm: int | None = None
    description: str = ""
    layouts: tuple[str, ...] | None = None
    #: a Python (Triton) row's search space: names -> values of its launcher's keyword arguments
    #: (rapid_llm.kernels.registry.tune_space); a JIT row declares its space in its source instead
    tune_space: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" not in self.name:
            raise RegistryError(f"row name must look like 'backend/name', got {self.name!r}")
        if self.target is None:
            raise RegistryError(f"row {self.name!r}: target is required ('package.module:attribute' or a callable)")
        if not self.backend:
            object.__setattr__(self, "backend", self.name.split("/", 1)[0])
        if not isinstance(self.op, str) or not (self.op == "" or self.op.isidentifier()):
            raise RegistryError(f"row {self.name!r}: op must be an identifier, got {self.op!r}")
        if self.backend not in BACKENDS:
            raise RegistryError(
                f"row {self.name!r}: unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}"
            )
        if self.name.split("/", 1)[0] != self.backend:
            raise RegistryError(f"row {self.name!r}: the name's prefix must be its backend, "
                                f"'{self.backend}/{self.name.split('/', 1)[1]}'")
        _check_ref("target", self.name, self.target)
        _check_ref("available", self.name, self.available)
        if isinstance(self.dtypes, str) or not self.dtypes:
            raise RegistryError(f"row {self.name!r}: dtypes must be a non-empty tuple of names")
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        unknown = [d for d in self.dtypes if d not in DTYPE_NAMES]
        if unknown:
            raise RegistryError(
                f"row {self.name!r}: unknown dtype {unknown[0]!r}; expected one of {', '.join(DTYPE_NAMES)}"
            )
        if isinstance(self.devices, str) or not self.devices:
            raise RegistryError(f"row {self.name!r}: devices must be a non-empty tuple")
        object.__setattr__(self, "devices", tuple(self.devices))
        bad = [d for d in self.devices if d not in DEVICE_TYPES]
        if bad:
            raise RegistryError(f"row {self.name!r}: unknown device type {bad[0]!r}")
        if self.priority is not None and (
            isinstance(self.priority, bool) or not isinstance(self.priority, (int, float))
        ):
            raise RegistryError(f"row {self.name!r}: priority must be a number or None (no static priority)")
        if not isinstance(self.golden, GoldenRecord):
            raise RegistryError(f"row {self.name!r}: golden must be a GoldenRecord")
        if self.layouts is None:
            object.__setattr__(self, "layouts", LAYOUTS if self.backend == "native" else ("contiguous",))
        object.__setattr__(self, "layouts", tuple(self.layouts))
        bad_layouts = [x for x in self.layouts if x not in LAYOUTS]
        if bad_layouts or not self.layouts:
            raise RegistryError(f"row {self.name!r}: layouts must be among {', '.join(LAYOUTS)}, got {self.layouts!r}")
        if self.min_sm is not None and (not isinstance(self.min_sm, int) or self.min_sm < 10):
            raise RegistryError(f"row {self.name!r}: min_sm is an SM number such as 90, got {self.min_sm!r}")
        if self.backend == "native" and not self.golden.verified:
            # The floor is the reference everything else is checked against.
            object.__setattr__(self, "golden", dataclasses.replace(self.golden, verified=True))

    @property
    def is_native(self) -> bool:
        return self.backend == "native"

    def takes(self, layout: str) -> bool:
        """Whether a call of this layout may reach the row: a row that takes any view takes a row-strided one."""
        return layout in self.layouts or (layout == "rows" and "strided" in self.layouts)

    def load(self) -> Callable[..., Any]:
        """Import and return the row's function (imports happen here, never at registration); a tunable Python
        row's with the config pinned for this GPU kind bound (rapid_llm.kernels.registry.pins)."""
        fn = resolve_ref(self.target)
        if self.tune_space is None:
            return fn
        from rapid_llm.kernels.registry import pins

        return pins.with_pinned_config(self, fn)

    def call_path(self) -> Callable[..., Any]:
        """What a call of this row runs: :meth:`load`, or the target's ``bound()`` call path where it has one
        (a JIT row: its launcher with ``out`` allocated in C; built on first use). Dispatch and benchmarks use it."""
        fn = self.load()
        bound = getattr(fn, "bound", None)
        return bound() if callable(bound) else fn

    def probe(self, device: Any = None) -> Availability:
        """Whether the row may run here: not when a check refused its build (GoldenRecord.refused), else its
        toolchain probe's answer; cheap by contract (never compiles)."""
        if self.golden.refused:
            return Availability(False, f"refused by {self.golden.refused} (a new build must pass verify again)")
        if self.available is None:
            return Availability(True)
        fn = resolve_ref(self.available)
        answer = fn(device) if _takes_an_argument(fn) else fn()
        if isinstance(answer, Availability):
            return answer
        return Availability(bool(answer), "" if answer else f"probe {self.available!r} returned False")


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    """Whether a probe accepts the device (asked of its signature, so a TypeError inside it propagates)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.VAR_POSITIONAL,) or (p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
               for p in params)


def resolve_ref(ref: Ref) -> Callable[..., Any]:
    """Turn ``"pkg.mod:attr"`` into the object; pass callables through."""
    if callable(ref):
        return ref
    module_name, attr = ref.split(":")
    return getattr(importlib.import_module(module_name), attr)



# ------------------------------------------------------------------ the registry


class _Registry:
    """Rows by name, rows by op, op declarations; one instance is live at a time."""

    def __init__(self, discover: bool) -> None:
        self.rows: dict[str, KernelSpec] = {}
        self.by_op: dict[str, list[str]] = {}
        self.decls: dict[str, Any] = {}
        self.discovered = not discover
        self.shipped: set[str] = set()  # rows the library itself registered (group declarations, .cu rows)
        self.library_decls: dict[str, Any] = {}  # the groups' declarations, by op
        self.hidden: dict[str, list[KernelSpec]] = {}  # a shadowed library op -> the rows it had, in order


_lock = threading.RLock()
_state = _Registry(discover=True)
_version = 0
_listeners: list[Callable[[], None]] = []

#: The package of the op groups; each op is a package inside its group that declares it as ``DECLARATION``.
OPS_PACKAGE = "rapid_llm.kernels.ops"
#: Found rows beyond the groups' (``add_discoverer``), and who hears of each declared op (``on_declare``):
#: lazy references, resolved on use, so that wiring them in imports nothing.
_discoverers: list[Ref] = []
_declare_listeners: list[Ref] = []


def add_discoverer(ref: Ref) -> None:
    """Run ``ref()`` after the groups on every discovery (it registers rows it finds, e.g. shipped .cu files)."""
    if ref not in _discoverers:
        _discoverers.append(ref)


def on_declare(ref: Ref) -> None:
    """Call ``ref(decl)`` for every op declared from now on, and for those already declared."""
    if ref in _declare_listeners:
        return
    _declare_listeners.append(ref)
    for decl in list(_state.decls.values()):
        resolve_ref(ref)(decl)


def _op_declaration(module: Any) -> Any:
    decl = getattr(module, "DECLARATION", None)
    if decl is None or not hasattr(decl, "rows"):
        raise RegistryError(f"op folder {module.__name__} must declare its op as DECLARATION "
                            "(a rapid_llm.kernels.registry.opdecl.define_op result)")
    return decl


def _op_packages() -> Iterator[str]:
    """``rapid_llm.kernels.ops.<group>.<op>`` for every op folder: a package inside a group package."""
    ops = importlib.import_module(OPS_PACKAGE)
    for group in pkgutil.iter_modules(ops.__path__, OPS_PACKAGE + "."):
        if group.ispkg:
            for op in pkgutil.iter_modules(importlib.import_module(group.name).__path__, group.name + "."):
                if op.ispkg:
                    yield op.name


def _discover() -> None:
    """Read every op group's declarations and run the discoverers, once per registry (first lookup)."""
    if _state.discovered:
        return
    with _lock:
        if _state.discovered:
            return
        _state.discovered = True  # before importing: a group's declarations look rows up too
        registered_before = set(_state.rows)  # a notebook may register rows before anything looks one up
        try:
            for folder in importlib.import_module(OPS_PACKAGE).__path__:
                op_writes.recover_before_reading(Path(folder))  # a promote() killed half-way: rolled back
            for name in _op_packages():
                decl = _op_declaration(importlib.import_module(name))
                if decl.name not in _state.decls:  # a notebook's declaration made before this wins
                    _state.library_decls[decl.name] = decl
                    add_op(decl)
            for ref in _discoverers:
                resolve_ref(ref)()
            _state.shipped = set(_state.rows) - registered_before
        except BaseException:
            _state.discovered = False
            raise


@contextlib.contextmanager
def isolated(discover: bool = False) -> Iterator[None]:
    """A registry of its own for the duration (tests): empty, or with the shipped ops if ``discover``."""
    global _state
    with _lock:
        saved, _state = _state, _Registry(discover=discover)
    _changed()
    try:
        yield
    finally:
        with _lock:
            _state = saved
        _changed()


def _changed() -> None:
    global _version
    _version += 1
    for listener in list(_listeners):
        listener()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever rows are added, replaced or re-verified (dispatch clears its cache)."""
    _listeners.append(listener)


def registry_version() -> int:
    return _version


def touch() -> None:
    """Something dispatch filters on changed outside the registry (a policy): re-resolve."""
    _changed()


def register(spec: KernelSpec, *, replace: bool = False) -> KernelSpec:
    """Add a row. Refuses a duplicate name (unless ``replace``) and a second native row for an op."""
    if not isinstance(spec, KernelSpec):
        raise RegistryError(f"register() takes a KernelSpec, got {type(spec).__name__}")
    if not spec.op:
        raise RegistryError(f"row {spec.name!r} names no op: pass op=, or list it in its op's declaration")
    _discover()
    with _lock:
        old = _state.rows.get(spec.name)
        if old is not None and not replace:
            raise RegistryError(
                f"row {spec.name!r} is already registered for op {old.op!r}; "
                "pick another name or pass replace=True"
            )
        if old is not None and old.op != spec.op:
            raise RegistryError(f"row {spec.name!r} belongs to op {old.op!r}, cannot move it to {spec.op!r}")
        if spec.is_native:
            for other in _state.by_op.get(spec.op, ()):
                if other != spec.name and _state.rows[other].is_native:
                    raise RegistryError(
                        f"op {spec.op!r} already has its native row {other!r}; exactly one native row per op"
                    )
        refused = _refusals.get(_build_key(spec))
        if refused and not spec.golden.refused:  # the same build again (a cell re-run unchanged)
            spec = dataclasses.replace(spec, golden=dataclasses.replace(spec.golden, verified=False, refused=refused))
        _state.rows[spec.name] = spec
        names = _state.by_op.setdefault(spec.op, [])
        if spec.name not in names:
            names.append(spec.name)
        _changed()
    return spec


def unregister(name: str) -> None:
    """Remove a row (tests and notebooks that experiment)."""
    _discover()
    with _lock:
        spec = _state.rows.pop(name, None)
        if spec is None:
            raise RegistryError(f"no row named {name!r}")
        _state.by_op[spec.op].remove(name)
        if not _state.by_op[spec.op]:
            del _state.by_op[spec.op]
        _changed()


#: The build (a JIT row's source digest, else the row's name and target) -> the refusal it drew in this process.
_refusals: dict[tuple, str] = {}


def _build_key(spec: KernelSpec) -> tuple:
    digest = getattr(spec.target, "digest", None)
    return ("digest", digest) if digest else ("row", spec.name, spec.target if isinstance(spec.target, str) else
                                              id(spec.target))


def refuse(name: str, why: str) -> KernelSpec:
    """Record that a check refused row ``name``'s build (``why``: "bench: timed_output_wrong: ..."): dispatch
    passes it over and explain names ``why`` until a new build of the row is registered and verified."""
    with _lock:
        spec = get_row(name)
        _refusals[_build_key(spec)] = why
        return update_golden(name, dataclasses.replace(spec.golden, verified=False, refused=why))


def update_golden(name: str, golden: GoldenRecord) -> KernelSpec:
    """Swap a row's golden record (after verification) and let dispatch re-resolve. A refusal of the row's build
    stays: verifying the same build again does not lift it."""
    with _lock:
        spec = get_row(name)
        if spec.golden.refused and not golden.refused:
            golden = dataclasses.replace(golden, verified=False, refused=spec.golden.refused)
        new = dataclasses.replace(spec, golden=golden)
        _state.rows[name] = new
        _changed()
        return new


def get_row(name: str) -> KernelSpec:
    """A row by name (the shipped rows are always registered)."""
    _discover()
    try:
        return _state.rows[name]
    except KeyError:
        raise RegistryError(f"no row named {name!r}; known rows: {', '.join(sorted(_state.rows)) or 'none'}") from None


def rows_for(op: str) -> list[KernelSpec]:
    """The op's rows in registration order."""
    _discover()
    return [_state.rows[n] for n in _state.by_op.get(op, ())]


def native_row(op: str) -> KernelSpec | None:
    """The op's native floor row (its reference implementation in plain torch), None when it has none."""
    return next((r for r in rows_for(op) if r.is_native), None)


def shipped_rows(op: str) -> list[str]:
    """The names of ``op``'s rows that the library registered (not a notebook or a test)."""
    _discover()
    return [n for n in _state.by_op.get(op, ()) if n in _state.shipped]


def all_ops() -> list[str]:
    _discover()
    return sorted(set(_state.by_op) | set(_state.decls))


def declare(decl: Any, *, replace: bool = False) -> None:
    """Store an op's declaration (its reference and benchmark case); see rapid_llm.kernels.registry.opdecl.
    A library op's declaration gives way only to a shadow (:func:`add_op`, ``shadow_library=True``)."""
    _discover()
    library = _state.library_decls.get(decl.name)
    if library is not None and decl is not library:
        raise RegistryError(f"declare({decl.name!r}): the library declares op {decl.name!r}; shadow it with "
                            f"declare_op({decl.name!r}, ..., shadow_library=True)")
    _store_decl(decl, replace)


def _store_decl(decl: Any, replace: bool) -> None:
    with _lock:
        if decl.name in _state.decls and not replace:
            raise RegistryError(f"op {decl.name!r} is already declared; pass replace=True to redeclare it")
        _state.decls[decl.name] = decl
        _changed()


def add_op(decl: Any, *, replace: bool = False, shadow_library: bool = False) -> None:
    """Declare ``decl`` and register its rows; then tell the ``on_declare`` listeners.

    ``replace`` redeclares an op of a notebook or a test (a re-run cell): rows
    others registered for it stay. An op the library declares takes another
    declaration only with ``shadow_library=True``: the first shadow sets the
    library's declaration and every row the op had aside (they were checked
    against the library's reference; :func:`restore` brings them back), and a
    shadow declared again replaces the shadow, as ``replace`` does.
    """
    _discover()
    if decl is _state.library_decls.get(decl.name) and decl.name in _state.hidden:
        restore(decl.name)  # the library's own declaration again: the shadow is undone
        return
    with _lock:
        library = _state.library_decls.get(decl.name)
        if library is None or decl is library:
            if shadow_library:
                raise RegistryError(f"declare_op({decl.name!r}): shadow_library=True, but the library declares no "
                                    f"op {decl.name!r}; leave it out (replace=True lets a cell declare it again)")
        else:
            _check_shadow(decl, library, shadow_library, replace)
            replace = True
        saved = _saved()
        try:
            if library is not None and decl is not library and decl.name not in _state.hidden:
                _set_aside(decl.name)
            _store_decl(decl, replace)
            for row in decl.rows:
                register(row, replace=replace)
        except BaseException:  # a row that cannot be registered: the registry as it was, nothing half-declared
            _put_back(saved)
            raise
    _tell_declared(decl)


def _saved() -> tuple:
    return (dict(_state.rows), {op: list(names) for op, names in _state.by_op.items()}, dict(_state.decls),
            dict(_state.hidden))


def _put_back(saved: tuple) -> None:
    rows, by_op, decls, hidden = saved
    _state.rows, _state.by_op, _state.decls, _state.hidden = rows, by_op, decls, hidden
    _changed()


def _tell_declared(decl: Any) -> None:
    for ref in list(_declare_listeners):
        resolve_ref(ref)(decl)


def _check_shadow(decl: Any, library: Any, shadow_library: bool, replace: bool) -> None:
    """A declaration over a library op: refused unless the caller said so, and then only with the library's
    dispatch argument (K.<op> reads it once per process, as torch keeps the op's schema)."""
    name = decl.name
    if not shadow_library:
        rows = [r.name for r in _state.hidden[name]] if name in _state.hidden else _state.by_op.get(name, [])
        why = ("replace=True re-runs a cell that declares a notebook's own op; it does not hide the library's"
               if replace else "a second declaration would hide them")
        raise RegistryError(
            f"declare_op({name!r}): the library declares op {name!r} (its rows: {', '.join(rows) or 'none'}), and "
            f"{why}. Declare your op under another name, or pass shadow_library=True to hide the library's "
            f"declaration and rows behind yours until restore_op({name!r}) (explain({name!r}) then says the op is "
            "shadowed)")
    if decl.dispatch_arg != library.dispatch_arg:
        raise RegistryError(
            f"declare_op({name!r}): the library's {name!r} dispatches on argument {library.dispatch_arg} "
            f"(dispatch_arg={library.dispatch_arg}) and K.{name} keeps that for the process; a shadow must too: pass "
            f"dispatch_arg={library.dispatch_arg}, or declare your op under another name")


def _set_aside(op: str) -> None:
    """Hide every row of library op ``op`` (they answer to the library's declaration) until :func:`restore`."""
    names = _state.by_op.pop(op, [])
    _state.hidden[op] = [_state.rows.pop(n) for n in names]


def restore(op: str) -> list[str]:
    """Undo a shadow of library op ``op``: its declaration and the rows it had come back as they were.

    The shadow's own rows (its declaration's) go. Rows registered while it was
    live stay, golden-unverified: they were checked against the shadow's
    reference, so dispatch leaves them out until ``verify`` passes against the
    library's. Returns their names. Restoring an op that is not shadowed does
    nothing; a name the library does not declare is an error.
    """
    _discover()
    with _lock:
        library = _state.library_decls.get(op)
        if library is None:
            raise RegistryError(f"restore_op({op!r}): the library declares no op {op!r}, so there is nothing to "
                                "restore (a notebook's own op is declared again with declare_op(..., replace=True))")
        hidden = _state.hidden.pop(op, None)
        if hidden is None:
            return []
        shadow_rows = {r.name for r in _state.decls[op].rows}
        names = {r.name for r in hidden}
        kept = [_unverified(_state.rows[n]) for n in _state.by_op.get(op, ())
                if n not in shadow_rows and n not in names and not _state.rows[n].is_native]
        for n in _state.by_op.pop(op, []):
            del _state.rows[n]
        for row in [*hidden, *kept]:
            _state.rows[row.name] = row
        _state.by_op[op] = [row.name for row in [*hidden, *kept]]
        _state.decls[op] = library
        _changed()
    _tell_declared(library)
    return [row.name for row in kept]


def _unverified(row: KernelSpec) -> KernelSpec:
    if not row.golden.verified:
        return row
    return dataclasses.replace(row, golden=GoldenRecord(baseline=row.golden.baseline))


def shadowed_rows(op: str) -> list[str] | None:
    """The names of the library's rows of ``op`` that a notebook's declaration hides; None when it hides none."""
    _discover()
    hidden = _state.hidden.get(op)
    return None if hidden is None else [row.name for row in hidden]


def get_decl(op: str) -> Any:
    """An op's declaration; RegistryError naming the known ops when there is none."""
    _discover()
    try:
        return _state.decls[op]
    except KeyError:
        known = ", ".join(sorted(_state.decls)) or "none"
        raise RegistryError(f"op {op!r} is not declared (declared ops: {known}); declare it with "
                            "rapid_llm.kernels.declare_op") from None


def library_declares(op: str) -> bool:
    """Whether an op group of the library declares ``op`` (a notebook may shadow the declaration since)."""
    _discover()
    return op in _state.library_decls


def is_library_decl(op: str) -> bool:
    """Whether ``op``'s live declaration is the library's own, not one a notebook or a test made."""
    _discover()
    decl = _state.decls.get(op)
    return decl is not None and _state.library_decls.get(op) is decl


def op_group(op: str) -> str | None:
    """The op group (``rapid_llm.kernels.ops.<group>``) whose rows serve ``op``, or None for a notebook's op."""
    prefix = OPS_PACKAGE + "."
    for row in rows_for(op):
        if row.name in _state.shipped and isinstance(row.target, str) and row.target.startswith(prefix):
            return row.target[len(prefix):].split(".", 1)[0]
    return None
