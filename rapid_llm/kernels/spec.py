"""KernelSpec rows and the registry that dispatch reads.

A row names an implementation of an op and every fact dispatch needs to decide
whether it may run: its backend, its dtypes and devices, its toolchain probe,
its golden record, its priority, whether CUDA-graph replay is safe, the minimum
SM it needs. Targets and probes are lazy ``"module:attr"`` strings so that
registering a row imports nothing; a callable is accepted too, so a notebook
can register a function it just defined.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Union

__all__ = [
    "UNMEASURED",
    "BACKENDS",
    "DTYPE_NAMES",
    "Availability",
    "GoldenRecord",
    "KernelSpec",
    "RegistryError",
    "register",
    "unregister",
    "update_golden",
    "get_row",
    "rows_for",
    "all_ops",
    "registry_version",
    "resolve_ref",
]


class _Unmeasured:
    """Sentinel priority: ranks below every number, so an unmeasured row loses ties."""

    _instance: "_Unmeasured | None" = None

    def __new__(cls) -> "_Unmeasured":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNMEASURED"

    def __reduce__(self) -> str:
        return "UNMEASURED"


UNMEASURED = _Unmeasured()

#: The native floor plus the seed's four paths. ``aot`` and ``external`` exist
#: so an AOT extension or a library (FlashInfer, DeepGEMM) can become a row
#: later without touching dispatch.
BACKENDS = ("native", "triton", "jit", "aot", "external")

#: Short dtype names used in rows, mapped to torch attribute names. Kept as
#: strings so this module does not import torch.
DTYPE_NAMES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "fp8e4m3": "float8_e4m3fn",
    "fp8e5m2": "float8_e5m2",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}

DEVICE_TYPES = ("cpu", "cuda")

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
    checked against its baseline before it may answer calls.
    """

    verified: bool = False
    max_abs_diff: float | None = None
    baseline: str | None = None
    per_dtype: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.max_abs_diff is not None and not self.max_abs_diff >= 0:
            raise RegistryError(f"GoldenRecord.max_abs_diff must be >= 0, got {self.max_abs_diff!r}")


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

    ``priority``: a number, higher wins, or UNMEASURED (below every number,
    so it loses ties). Measured latency from the benchmark store, when there
    is one for the current device, ranks ahead of it (see dispatch).
    """

    name: str
    op: str
    backend: str
    target: Ref
    available: Ref | None = None
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    devices: tuple[str, ...] = ("cuda",)
    golden: GoldenRecord = field(default_factory=GoldenRecord)
    priority: Any = UNMEASURED
    graph_safe: bool = True
    min_sm: int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" not in self.name:
            raise RegistryError(f"row name must look like 'backend/name', got {self.name!r}")
        if not isinstance(self.op, str) or not self.op.isidentifier():
            raise RegistryError(f"row {self.name!r}: op must be an identifier, got {self.op!r}")
        if self.backend not in BACKENDS:
            raise RegistryError(
                f"row {self.name!r}: unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}"
            )
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
        if self.priority is not UNMEASURED and (
            isinstance(self.priority, bool) or not isinstance(self.priority, (int, float))
        ):
            raise RegistryError(f"row {self.name!r}: priority must be a number or UNMEASURED")
        if not isinstance(self.golden, GoldenRecord):
            raise RegistryError(f"row {self.name!r}: golden must be a GoldenRecord")
        if self.min_sm is not None and (not isinstance(self.min_sm, int) or self.min_sm < 10):
            raise RegistryError(f"row {self.name!r}: min_sm is an SM number such as 90, got {self.min_sm!r}")
        if self.backend == "native" and not self.golden.verified:
            # The floor is the reference everything else is checked against.
            object.__setattr__(self, "golden", dataclasses.replace(self.golden, verified=True))

    @property
    def is_native(self) -> bool:
        return self.backend == "native"

    def load(self) -> Callable[..., Any]:
        """Import and return the row's function (imports happen here, never at registration)."""
        return resolve_ref(self.target)

    def probe(self, device: Any = None) -> Availability:
        """Run the row's toolchain probe; cheap by contract (never compiles)."""
        if self.available is None:
            return Availability(True)
        fn = resolve_ref(self.available)
        try:
            answer = fn(device)
        except TypeError:
            answer = fn()
        if isinstance(answer, Availability):
            return answer
        return Availability(bool(answer), "" if answer else f"probe {self.available!r} returned False")


def resolve_ref(ref: Ref) -> Callable[..., Any]:
    """Turn ``"pkg.mod:attr"`` into the object; pass callables through."""
    if callable(ref):
        return ref
    module_name, attr = ref.split(":")
    return getattr(importlib.import_module(module_name), attr)


_lock = threading.RLock()
_rows: dict[str, KernelSpec] = {}
_by_op: dict[str, list[str]] = {}
_version = 0
_listeners: list[Callable[[], None]] = []


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


def register(spec: KernelSpec, *, replace: bool = False) -> KernelSpec:
    """Add a row. Refuses a duplicate name (unless ``replace``) and a second native row for an op."""
    if not isinstance(spec, KernelSpec):
        raise RegistryError(f"register() takes a KernelSpec, got {type(spec).__name__}")
    with _lock:
        old = _rows.get(spec.name)
        if old is not None and not replace:
            raise RegistryError(
                f"row {spec.name!r} is already registered for op {old.op!r}; "
                "pick another name or pass replace=True"
            )
        if old is not None and old.op != spec.op:
            raise RegistryError(f"row {spec.name!r} belongs to op {old.op!r}, cannot move it to {spec.op!r}")
        if spec.is_native:
            for other in _by_op.get(spec.op, ()):
                if other != spec.name and _rows[other].is_native:
                    raise RegistryError(
                        f"op {spec.op!r} already has its native row {other!r}; exactly one native row per op"
                    )
        _rows[spec.name] = spec
        names = _by_op.setdefault(spec.op, [])
        if spec.name not in names:
            names.append(spec.name)
        _changed()
    return spec


def unregister(name: str) -> None:
    """Remove a row (tests and notebooks that experiment)."""
    with _lock:
        spec = _rows.pop(name, None)
        if spec is None:
            raise RegistryError(f"no row named {name!r}")
        _by_op[spec.op].remove(name)
        if not _by_op[spec.op]:
            del _by_op[spec.op]
        _changed()


def update_golden(name: str, golden: GoldenRecord) -> KernelSpec:
    """Swap a row's golden record (after verification) and let dispatch re-resolve."""
    with _lock:
        spec = get_row(name)
        new = dataclasses.replace(spec, golden=golden)
        _rows[name] = new
        _changed()
        return new


def get_row(name: str) -> KernelSpec:
    try:
        return _rows[name]
    except KeyError:
        raise RegistryError(f"no row named {name!r}; known rows: {', '.join(sorted(_rows)) or 'none'}") from None


def rows_for(op: str) -> list[KernelSpec]:
    """The op's rows in registration order."""
    return [_rows[n] for n in _by_op.get(op, ())]


def all_ops() -> list[str]:
    return sorted(_by_op)
