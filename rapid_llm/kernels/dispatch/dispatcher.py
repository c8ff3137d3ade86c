"""Pick the row that answers a call, and say why every other row does not.

Resolution runs once per (op, dtype, device, size bucket, capture state, and
the call's form for an op that declares forms: OpDecl.forms) and is cached;
the per-call path is one dict lookup and the call. Rows are filtered
(toolchain, dtype, device, golden, graph safety while capturing, arch) and the
survivors ranked:

1. rows with a measured latency for this device, dtype and size bucket, fastest
   first (figures from rapid_llm.kernels.dispatch.measurements, which says where each
   came from: committed for this GPU kind by default), by one of two rules:

   * ``caller``: what an eager caller pays per call, the larger of device and
     host time (a Triton row's launch costs tens of microseconds of Python);
   * ``device``: device time alone, where the host cost is not paid per call:
     while a CUDA graph is being captured (the replay launches no Python), and
     inside a torch.compile'd graph (``torch.ops.rapid_llm.<op>`` resolves by
     this rule). A capture takes the device-time winner only once it has run
     outside a capture in this process at that size (a first call may compile
     and load code, which a capture must not do): the eager call that finds
     the two rules disagree runs the device-time winner once on copies of its
     arguments, so the capture after the usual warm-up call has it;
2. then unmeasured non-native rows by ``priority`` (higher first; None, no
   static priority, ranks below every number, so it loses ties), then by
   backend preference (external, aot, jit, gluon, triton: the more specialised code
   exists because it was meant to beat the general one);
3. the native floor last: it always survives, so an op always has an answer.

Rendering (HTML, widgets) is not here: the notebook extension attaches it.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from rapid_llm.kernels.dispatch import measurements, traced
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import KernelSpec, RegistryError, get_row, rows_for
from rapid_llm.kernels.toolchain.digests import code_digest
from rapid_llm.kernels.toolchain.jit_row import floor_answer

__all__ = ["Op", "get_op", "resolve", "explain", "Explanation", "RowVerdict", "clear_cache", "dtype_name",
           "get_row", "rows_for", "op_status"]

_BACKEND_PREFERENCE = {"external": 0, "aot": 1, "jit": 2, "cute": 3, "gluon": 4, "triton": 5, "native": 9}
#: By how much a row must beat the eager rule's winner on device time for the device rule to leave that winner:
#: the figures' own spread, so a capture does not switch rows over noise.
DEVICE_MARGIN = 0.03
#: The ranking rules (see the module docstring) and how explain names each.
RULES = {"caller": "what an eager caller pays (the larger of device and host time)",
         "device": "device time (host time is not paid per call here)"}
#: The dispatch-cache key suffix of a resolution made while a CUDA graph is being captured.
CAPTURING = "capturing"

_ops: dict[tuple[str, str], Any] = {}  # (op name, rule) -> its dispatching callable


def dtype_name(dtype: Any) -> str:
    """The short name of a dtype (``torch.bfloat16`` -> ``"bf16"``); RegistryError for others."""
    try:
        return platform.dtype_name(dtype)
    except ValueError as exc:
        raise RegistryError(str(exc)) from None


@dataclass(frozen=True)
class Context:
    """What resolution depends on; the dispatch cache key."""

    dtype: str
    device: torch.device
    bucket: int
    capturing: bool = False
    layout: str = "contiguous"
    rule: str = "caller"  # which figure ranks measured rows: RULES
    form: str | None = None  # the op's form (OpDecl.forms), None for the one its bench case times

    @property
    def device_name(self) -> str:
        """The name measurements are stored under (rapid_llm.kernels.platform.device_label)."""
        return platform.device_label(self.device)


@dataclass(frozen=True)
class RowVerdict:
    """One row of an explanation."""

    name: str
    backend: str
    verdict: str  # "chosen" | "outranked" | "filtered"
    reason: str
    priority: str
    measured_us: float | None
    source: str | None = None  # where the measured figure came from
    ignored: str | None = None  # figures of the row's earlier code, passed over (measurements.StaleFigure)

    @property
    def measured_text(self) -> str:
        return "-" if self.measured_us is None else f"{self.measured_us:.2f} us"


def _unverified_reason(golden: Any) -> str:
    """Why an unverified row is filtered: never verified, or a verify that failed (its record kept the diff)."""
    if golden.max_abs_diff is not None and golden.baseline:
        return (f"golden unverified: its last verify failed against {golden.baseline} (max |diff| "
                f"{golden.max_abs_diff:g}); a build that passes verify makes it eligible")
    return "golden unverified (verify it to make it eligible)"


def _filter_reason(row: KernelSpec, ctx: Context) -> str | None:
    """None when the row may run in ``ctx``; otherwise the exact reason it may not."""
    if not row.is_native:
        # The toolchain first: on a machine without CUDA that is the real reason, not the device.
        try:
            avail = row.probe(ctx.device)
        except Exception as exc:  # a broken probe filters its row, loudly
            return f"probe raised {type(exc).__name__}: {exc}"
        if not avail:
            return avail.reason or "toolchain unavailable"
    if ctx.dtype not in row.dtypes:
        return f"{ctx.dtype} not in dtypes ({', '.join(row.dtypes)})"
    if ctx.device.type not in row.devices:
        return f"{ctx.device.type} not in devices ({', '.join(row.devices)})"
    if not row.takes(ctx.layout):
        return (f"takes {' or '.join(_ROW_TAKES[x] for x in row.layouts)} only; "
                f"this call has {_CALL_HAS[ctx.layout]}")
    if row.is_native:
        return None
    if not row.golden.verified:
        return _unverified_reason(row.golden)
    if ctx.capturing and not row.graph_safe:
        return "not graph safe (a CUDA graph is being captured)"
    if row.min_sm is not None and ctx.device.type == "cuda":
        sm = platform.sm_version(ctx.device)
        if sm < row.min_sm:
            return f"needs sm_{row.min_sm}+, device is sm_{sm}"
    if row.backend == "triton" and ctx.device.type == "cpu":
        from rapid_llm.kernels.toolchain import triton_support

        if not triton_support.serves_interpreter():
            return triton_support.INTERPRETER_REASON
    return None


def _measured(row: KernelSpec, ctx: Context) -> measurements.Figure | None:
    """The row's figure for this call: only one that measured the code the row runs now (its digest)."""
    digest = code_digest(row)
    figure = measurements.lookup(measurements.form_key(row.op, ctx.form), row.name, ctx.device_name, ctx.dtype,
                                 ctx.bucket, digest)
    if figure is None and ctx.form is not None:  # a form without figures ranks as the declared one
        figure = measurements.lookup(row.op, row.name, ctx.device_name, ctx.dtype, ctx.bucket, digest)
    return figure


def _stale(row: KernelSpec, ctx: Context) -> measurements.StaleFigure | None:
    """A figure of the row that _measured passed over because the row's code changed since it was measured."""
    digest = code_digest(row)
    for key in dict.fromkeys((measurements.form_key(row.op, ctx.form), row.op)):
        found = measurements.stale(key, row.name, ctx.device_name, ctx.dtype, ctx.bucket, digest)
        if found is not None:
            return found
    return None


def _figure(measured: measurements.Figure | None, rule: str) -> float | None:
    """The figure ``rule`` ranks by."""
    if measured is None:
        return None
    return measured.device_us if rule == "device" else measured.caller_us


def _rank_key(row: KernelSpec, measured: measurements.Figure | None, order: int, rule: str = "caller") -> tuple:
    if measured is not None:
        return (0, _figure(measured, rule), 0, 0, order)
    if row.is_native:
        return (2, 0.0, 0, 0, order)
    prio = -math.inf if row.priority is None else float(row.priority)
    return (1, 0.0, -prio, _BACKEND_PREFERENCE[row.backend], order)


def _priority_text(row: KernelSpec) -> str:
    return "-" if row.priority is None else f"{row.priority:g}"


def _evaluate(op: str, ctx: Context) -> list[tuple[KernelSpec, str | None, measurements.Figure | None]]:
    rows = _spec.rows_for(op)
    if not rows:
        raise RegistryError(f"unknown op {op!r}; known ops: {', '.join(_spec.all_ops()) or 'none'}")
    if not any(r.is_native for r in rows):
        raise RegistryError(
            f"op {op!r} has no native row: register a plain-torch floor (backend='native') before dispatching it"
        )
    out = []
    for row in rows:
        reason = _filter_reason(row, ctx)
        measured = _measured(row, ctx) if reason is None else None
        out.append((row, reason, measured))
    return out


#: (row name, dtype, device, size bucket, layout) of rows that have run outside a capture in this process.
_warm: set[tuple] = set()
#: The same key -> why the row failed when run ahead of a capture (captures pass it over).
_unfit: dict[tuple, str] = {}


def _warm_key(row: KernelSpec, ctx: Context) -> tuple:
    return (row.name, ctx.dtype, str(ctx.device), ctx.bucket, ctx.layout)


def _within_margin(lead: measurements.Figure | None, kept: measurements.Figure | None) -> bool:
    """Whether ``lead`` is not measured clearly faster on the device than ``kept`` (DEVICE_MARGIN)."""
    return lead is not None and kept is not None and lead.device_us > (1 - DEVICE_MARGIN) * kept.device_us


def _ranked(survivors: list[tuple[int, KernelSpec, measurements.Figure | None]],
            rule: str) -> list[tuple[KernelSpec, measurements.Figure | None]]:
    return [(row, m) for _, row, m in sorted(survivors, key=lambda t: _rank_key(t[1], t[2], t[0], rule))]


def _choose(evaluated: list[tuple[KernelSpec, str | None, measurements.Figure | None]],
            ctx: Context) -> tuple[list[tuple[KernelSpec, measurements.Figure | None]], list[str]]:
    """The survivors ranked by ``ctx.rule``, the one that runs first; and, while capturing, the rows that rank
    above it by device time but are passed over because they have not run outside a capture here yet."""
    survivors = [(i, row, m) for i, (row, reason, m) in enumerate(evaluated) if reason is None]
    if not survivors:
        # Only possible when the native row itself does not cover this dtype or device.
        why = "; ".join(f"{row.name}: {reason}" for row, reason, _ in evaluated)
        raise RegistryError(f"op {evaluated[0][0].op!r} has no row for {ctx.dtype} on {ctx.device.type}: {why}")
    ranked = _ranked(survivors, ctx.rule)
    if ctx.rule != "device":
        return ranked, []
    # The eager rule's winner: kept unless another row is measured clearly faster on the device, and, while
    # capturing, what ran before the capture, so safe to capture as it always was.
    fallback, fallback_m = _ranked(survivors, "caller")[0]
    if _within_margin(ranked[0][1], fallback_m) and ranked[0][0] is not fallback:
        ranked = [(fallback, fallback_m), *[t for t in ranked if t[0] is not fallback]]
    if not ctx.capturing:
        return ranked, []
    cold = []
    for row, _ in ranked:
        key = _warm_key(row, ctx)
        if row is fallback or row.is_native or (key in _warm and key not in _unfit):
            break
        cold.append(row.name)
    first = len(cold)
    return [ranked[first], *ranked[:first], *ranked[first + 1:]], cold


#: How explain names what a row takes and what a call brings (spec.LAYOUTS).
_ROW_TAKES = {"contiguous": "contiguous tensors", "rows": "row-strided views (contiguous last dim, one row stride)",
              "strided": "any view"}
_CALL_HAS = {"contiguous": "contiguous tensors", "rows": "a row-strided view",
             "strided": "a strided view (its last dim or leading dims are not one row stride)"}


def _layout(tensors: Iterable[Any]) -> str:
    return _spec.layout_of(t for t in tensors if isinstance(t, torch.Tensor))


def _form_labels(op: str) -> tuple[str | None, ...]:
    """The op's forms by the id both call paths key on: 0 is the declared form (None)."""
    try:
        decl = _spec.get_decl(op)
    except RegistryError:
        return (None,)
    return (None, *decl.forms)


def _form_id(op: str) -> Callable[..., int] | None:
    """What the dispatcher calls on each call to key on its form, for an op that declares forms."""
    try:
        decl = _spec.get_decl(op)
    except RegistryError:
        return None
    if decl.form_of is None:
        return None
    ids = {label: i for i, label in enumerate(_form_labels(op))}
    form_of = decl.form_of

    def form_id(*args: Any, **kwargs: Any) -> int:
        return ids.get(form_of(*args, **kwargs), 0)

    return form_id


#: ``_context``'s form when the call's arguments say it (resolve and explain with ``form=None``).
_FROM_CALL = "<the call's>"


def _call_form(op: str, tensors: tuple, form: str | None) -> str | None:
    labels = _form_labels(op)
    if form != _FROM_CALL:
        if form not in labels:
            known = ", ".join(repr(f) for f in labels[1:]) or "none"
            raise RegistryError(f"{op}: no form {form!r}; its other forms are {known}")
        return form
    decl_form_of = _spec.get_decl(op).form_of if len(labels) > 1 else None
    if decl_form_of is None or not tensors:
        return None
    try:
        label = decl_form_of(*tensors)
    except (TypeError, IndexError, AttributeError) as exc:
        raise RegistryError(f"{op}: its form depends on the call's arguments: give them all, or form= "
                            f"({type(exc).__name__}: {exc})") from None
    return label if label in labels else None


def _context(op: str, tensors: Iterable[Any], dtype: Any, device: Any, numel: int | None, capturing: bool | None,
             layout: str | None = None, rule: str | None = None, form: str | None = _FROM_CALL) -> Context:
    if not _spec.rows_for(op):
        raise RegistryError(f"unknown op {op!r}; known ops: {', '.join(_spec.all_ops()) or 'none'}")
    tensors = tuple(tensors)
    arg = _dispatch_arg(op)
    first = tensors[arg] if len(tensors) > arg and isinstance(tensors[arg], torch.Tensor) else None
    first = first if first is not None else next((t for t in tensors if isinstance(t, torch.Tensor)), None)
    if first is not None:
        dtype = first.dtype if dtype is None else dtype
        device = first.device if device is None else device
        numel = first.numel() if numel is None else numel
    if dtype is None:
        raise RegistryError(f"{op}: give an example tensor or dtype= to resolve a row")
    if layout is None:
        layout = _layout(tensors)
    elif layout not in _spec.LAYOUTS:
        raise RegistryError(f"{op}: layout must be one of {', '.join(_spec.LAYOUTS)}, got {layout!r}")
    dtype_short = dtype_name(dtype)
    device = torch.device(device if device is not None else "cpu")
    if capturing is None:
        capturing = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    if rule is None:
        rule = "device" if capturing else "caller"
    elif rule not in RULES:
        raise RegistryError(f"{op}: rule must be one of {', '.join(RULES)}, got {rule!r}")
    return Context(dtype_short, device, platform.size_bucket(numel if numel is not None else 1), bool(capturing),
                   layout, rule, _call_form(op, tensors, form))


def resolve(op: str, *tensors: Any, dtype: Any = None, device: Any = None, numel: int | None = None,
            capturing: bool | None = None, layout: str | None = None, rule: str | None = None,
            form: str | None = None) -> KernelSpec:
    """The row that a call of ``op`` with these arguments would run (``rule``: see RULES; by default
    ``device`` while capturing, else ``caller``; ``form``: one of the op's forms, else the call's)."""
    ctx = _context(op, tensors, dtype, device, numel, capturing, layout, rule, _FROM_CALL if form is None else form)
    return _choose(_evaluate(op, ctx), ctx)[0][0][0]


def _dispatch_arg(op: str) -> int:
    try:
        return _spec.get_decl(op).dispatch_arg
    except RegistryError:  # rows registered without a declaration (tests, a notebook's first cell)
        return 0


class _OpMethods:
    """What both call paths share: resolving a miss, and what an op says about itself."""

    __slots__ = ()
    #: The ranking rule outside a capture (RULES): K.<op> is "caller"; the custom op's implementation,
    #: which compiled graphs call, is "device".
    rule = "caller"

    def _entry(self, x: torch.Tensor, layout: bool | str, capturing: bool,
               has_out: bool = False, form: int = 0) -> tuple[Callable[..., Any], bool]:
        """The callable for tensors like ``x``, and whether a capture would run the same (True: no need to
        ask whether one is under way; the flag both call paths keep as "graph safe").

        ``layout``: True (contiguous), False (strided) or a name from spec.LAYOUTS ("rows"): both
        call paths key on it as they computed it, so a contiguous call costs no name lookup.
        A row's function may offer ``specialize(x, has_out)``: a cheaper callable that computes the
        same for such calls (the floor of scale is ``torch.mul`` itself on CUDA without ``out=``).
        ``form``: the call's form by id (``_form_id``; 0 for an op without forms).
        """
        if isinstance(layout, bool):
            layout = "contiguous" if layout else "strided"
        ctx = _context(self.name, (x,), None, None, None, capturing, layout, "device" if capturing else self.rule,
                       _form_labels(self.name)[form])
        row = _choose(_evaluate(self.name, ctx), ctx)[0][0][0]
        fn = row.call_path()
        specialize = getattr(fn, "specialize", None)
        fn = (specialize(x, has_out) or fn) if specialize is not None else fn
        if capturing or not _capturable(x):
            return fn, row.graph_safe
        _warm.add(_warm_key(row, ctx))  # it runs now, outside a capture
        capture = dataclasses.replace(ctx, capturing=True, rule="device")
        ranked, cold = _choose(_evaluate(self.name, capture), capture)
        if cold and _warm_key(_spec.get_row(cold[0]), capture) not in _unfit:
            # the capture's device-time winner has not run here yet: run it once now, on copies
            return _warming(self, fn, _spec.get_row(cold[0]), capture), False
        return fn, row.graph_safe and ranked[0][0] is row

    def rows(self) -> list[KernelSpec]:
        return rows_for(self.name)

    def _failed(self, exc: BaseException | None, args: tuple, kwargs: dict) -> Any:
        """Where a call failed, or its arguments are not of the kinds the op takes (``exc`` None): the op's
        argument checks answer in its own words (what the floor called directly says), a call on meta tensors
        gets the floor's result (shapes and dtypes), and anything else raises as it was raised."""
        floor = _floor(self.name)
        if floor is not None:
            if getattr(floor, "check", None) is not None:  # a notebook's floor may have none: its rows check
                answer_bad_call(self.name, floor, args, kwargs)
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if tensors and all(t.is_meta for t in tensors):
                return floor(*args, **kwargs)
        if exc is not None:
            raise exc
        return _resolved_call(self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"<rapid_llm op {self.name!r}>"


def _floor(op: str) -> Callable[..., Any] | None:
    """The op's native floor function, or None."""
    row = _spec.native_row(op)
    return None if row is None else row.load()


def answer_bad_call(op: str, floor: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Raise what the floor called with these arguments raises before it computes anything: a wrong argument
    count in Python's words for its signature, then the op's checks (``floor.check``, the declaration's one
    set of argument checks; rapid_llm.kernels.ops.arguments). Returns where the arguments pass. The rule is
    jit_row.floor_answer's, which a JIT row's call runs where its op's checks refuse a call."""
    floor_answer(floor)(*args, **kwargs)


def _resolved_call(op: str, args: tuple, kwargs: dict) -> Any:
    """The call through the row resolution picks (the slow path, for calls the fast one could not key)."""
    tensors = (*args, *(v for v in kwargs.values() if isinstance(v, torch.Tensor)))
    return _spec.get_row(resolve(op, *tensors).name).call_path()(*args, **kwargs)


#: Python types of the argument kinds (``arg_kinds``): t tensor, f float (an int too), i int, b bool.
_KIND_TYPES = {"t": (torch.Tensor,), "f": (float, int), "i": (int,), "b": (bool,)}
_ANNOTATION_KINDS = {"torch.Tensor": "t", "Tensor": "t", "float": "f", "int": "i", "bool": "b"}


def arg_kinds(op: str) -> str | None:
    """The kinds of the floor's positional parameters, from its annotations (``"tfT"``: a tensor, a float, an
    optional tensor; upper case optional, ``*`` any): what both call paths check before keying a call, so a
    float where a tensor goes reaches the op's checks, not a row. None where the floor says nothing usable."""
    floor = _floor(op)
    if floor is None:
        return None
    try:
        params = list(inspect.signature(floor).parameters.values())
    except (TypeError, ValueError):
        return None
    kinds = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return None
        text = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        optional = text.endswith("| None") or p.default is not p.empty
        kind = _ANNOTATION_KINDS.get(text.removesuffix("| None").strip(), "*")
        kinds.append(kind.upper() if optional else kind)
    return "".join(kinds)


def args_fit(kinds: str | None, args: tuple, kwargs: dict) -> bool:
    """Whether positional ``args`` are of ``kinds`` (fastcall_dispatch.inc's args_fit, the same rule)."""
    if kinds is None:
        return True
    if len(args) > len(kinds) or (len(args) < len(kinds) and kinds[len(args)].islower() and not kwargs):
        return False
    for a, k in zip(args, kinds):
        lower = k.lower()
        if k == "*" or (a is None and k != lower):
            continue
        if isinstance(a, bool) and lower != "b":
            return False
        if not isinstance(a, _KIND_TYPES.get(lower, object)):
            return False
    out = kwargs.get("out")
    return out is None or isinstance(out, torch.Tensor)


def _capturable(x: torch.Tensor) -> bool:
    """Whether a call with ``x`` could be captured into a CUDA graph."""
    return x.is_cuda


def _warming(op: Any, fn: Callable[..., Any], row: KernelSpec, ctx: Context) -> Callable[..., Any]:
    """``fn`` for this one call, after which ``row`` runs once on copies of the call's arguments (so a later
    capture may take it: see the module docstring) and the op resolves again."""

    def first_call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        kw = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        try:
            row.call_path()(*copies, **kw)
        except Exception as exc:  # the caller's own call succeeded: say it, and captures keep the eager row
            why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            _unfit[_warm_key(row, ctx)] = why
            warnings.warn(f"{row.name} failed when run once ahead of a capture, so captures keep "
                          f"the row eager calls run: {why}", RuntimeWarning, stacklevel=2)
        else:
            _warm.add(_warm_key(row, ctx))
        op.clear_cache()
        return result

    return first_call


class Op(_OpMethods):
    """A dispatching op: ``rapid_llm.kernels.scale(x, 2.0)`` is one of these.

    The tensor at ``dispatch_arg`` decides the row. The hot path reads its
    dtype, device, numel and the layout of the call's tensors, looks the key
    up, and calls. Capture state is only checked when the cached row is not
    graph safe or a capture would rank another row first (``_entry``), so
    other calls pay nothing for it. This is the portable
    path; :func:`get_op` uses the same logic compiled into the fast-path
    binding (``fastcall_dispatch.inc``) wherever that binding builds. Under
    torch.compile either one traces as ``torch.ops.rapid_llm.<op>``
    (rapid_llm.kernels.dispatch.traced), at no cost to an eager call.
    """

    #: __python_implementation__: what Dynamo traces instead of a call (rapid_llm.kernels.dispatch.traced.register).
    __slots__ = ("name", "dispatch_arg", "_cache", "form", "kinds", "__python_implementation__")

    def __init__(self, name: str, arg: int = 0) -> None:
        self.name = name
        self.dispatch_arg = arg
        self.form: Callable[..., int] | None = None  # the call's form id (_form_id), for an op with forms
        self.kinds: str | None = None  # the floor's argument kinds (arg_kinds), checked before keying a call
        self._cache: dict[tuple, tuple[Callable[..., Any], bool]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args_fit(self.kinds, args, kwargs):
            return self._failed(None, args, kwargs)
        try:
            return self._call(args, kwargs)
        except Exception as exc:  # the op's checks say what was wrong, in its words (_failed)
            return self._failed(exc, args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        try:
            x = args[self.dispatch_arg]
            contiguous = all(a.is_contiguous() for a in args if isinstance(a, torch.Tensor))
            out = kwargs.get("out")
            if isinstance(out, torch.Tensor):
                contiguous = contiguous and out.is_contiguous()
            if not contiguous:  # True, "rows" or False: what _entry takes (fastcall_dispatch.inc passes the same)
                tensors = (*args, out) if isinstance(out, torch.Tensor) else args
                contiguous = "rows" if _layout(tensors) == "rows" else False
            has_out = out is not None
            form = 0 if self.form is None else self.form(*args, **kwargs)
            key = (x.dtype, x.get_device(), x.numel().bit_length(), contiguous, has_out, form)  # ints hash fast
        except (AttributeError, IndexError):
            got = type(args[self.dispatch_arg]).__name__ if len(args) > self.dispatch_arg else "nothing"
            raise TypeError(f"{self.name}(): argument {self.dispatch_arg + 1} must be a torch.Tensor, "
                            f"got {got}") from None
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._entry(x, contiguous, False, has_out, form)
        fn, safe = entry
        if not safe and x.is_cuda and torch.cuda.is_current_stream_capturing():
            ckey = key + (CAPTURING,)
            entry = self._cache.get(ckey)
            if entry is None:
                entry = self._cache[ckey] = self._entry(x, contiguous, True, has_out, form)
            fn = entry[0]
        return fn(*args, **kwargs) if kwargs else fn(*args)

    def clear_cache(self) -> None:
        self._cache.clear()

    def cached_entries(self) -> int:
        return len(self._cache)


#: Why ops use the portable Python path here, or None when they use the compiled one.
portable_reason: str | None = None


def _fast_op_type() -> type | None:
    global portable_reason, _FastOp
    if _FastOp is not None or portable_reason is not None:
        return _FastOp
    try:
        from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

        base = fastcall().Dispatcher
    except Exception as exc:  # no compiler, or a torch without the DLPack exchange API: same answers, slower
        portable_reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None
    _FastOp = type("Op", (_OpMethods, base), {"__slots__": (), "__doc__": Op.__doc__, "__module__": __name__})
    return _FastOp


_FastOp: type | None = None


def get_op(name: str, rule: str = "caller") -> Any:
    """The dispatching callable for ``name`` (created once, shared); compiled where the binding builds.

    ``rule="device"`` is the one the custom op's implementation calls (compiled graphs): it ranks
    measured rows by device time (RULES)."""
    op = _ops.get((name, rule))
    if op is None:
        if rule not in RULES:
            raise RegistryError(f"{name}: rule must be one of {', '.join(RULES)}, got {rule!r}")
        fast = _fast_op_type()
        kind = (fast or Op) if rule == "caller" else _device_type(fast or Op)
        op = _ops[(name, rule)] = kind(name, _dispatch_arg(name))
        op.form = _form_id(name)
        op.kinds = arg_kinds(name)
        if rule == "caller":
            traced.register(op)  # under torch.compile: torch.ops.rapid_llm.<name>
    return op


_device_types: dict[type, type] = {}


def _device_type(base: type) -> type:
    kind = _device_types.get(base)
    if kind is None:
        kind = _device_types[base] = type("DeviceTimeOp", (base,), {"__slots__": (), "rule": "device",
                                                                     "__module__": __name__})
    return kind


def clear_cache() -> None:
    """Forget every resolution: rows changed, were re-verified, or new figures were measured. What had run
    outside a capture is forgotten too (a row replaced by a new build has not)."""
    _warm.clear()
    _unfit.clear()
    for (name, _), op in _ops.items():
        op.clear_cache()
        op.form = _form_id(name)  # a redeclared op may have other forms
        op.kinds = arg_kinds(name)


_spec.on_change(clear_cache)  # the one change bus: rows, golden records, policies, measured figures


@dataclass(frozen=True)
class Explanation:
    """Every row of an op with its verdict; prints as a table (the notebook extension renders it)."""

    op: str
    context: Context
    rows: tuple[RowVerdict, ...]
    #: What the op is besides its rows, when that is not the plain case: a notebook's shadow of a library op.
    status: str = ""

    @property
    def chosen(self) -> RowVerdict:
        return next(r for r in self.rows if r.verdict == "chosen")

    def verdict(self, name: str) -> RowVerdict:
        """One row's verdict by name."""
        return next(r for r in self.rows if r.name == name)

    def _header(self) -> str:
        c = self.context
        cap = ", capturing a CUDA graph" if c.capturing else ""
        cap += {"contiguous": "", "rows": ", row-strided", "strided": ", strided"}[c.layout]
        cap += f", form {c.form!r}" if c.form else ""
        size = "empty" if c.bucket == 0 else f"numel in [2^{c.bucket - 1}, 2^{c.bucket})"
        head = f"explain({self.op!r}) for {c.dtype} on {c.device}, {size}{cap}"
        head += f"\n{self.status}" if self.status else ""
        # An eager call's rule goes without saying; the other is named where a measured figure is ranked by it.
        if c.rule == "caller" or all(r.measured_us is None for r in self.rows):
            return head
        return f"{head}\nmeasured rows ranked by {RULES[c.rule]}"

    def __str__(self) -> str:
        cols = [("row", "name"), ("backend", "backend"), ("verdict", "verdict"), ("priority", "priority"),
                ("measured", "measured_us"), ("why", "reason")]
        table = [[h for h, _ in cols]]
        for r in self.rows:
            table.append([r.name, r.backend, r.verdict, r.priority, r.measured_text, r.reason])
        widths = [max(len(row[i]) for row in table[:]) for i in range(len(cols) - 1)]
        lines = [self._header()]
        for row in table:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
        sources = sorted({r.source for r in self.rows if r.source})
        if sources:
            lines.append("measured figures from: " + "; ".join(sources))
        lines += [f"{r.name}: {r.ignored}" for r in self.rows if r.ignored]
        return "\n".join(line.rstrip() for line in lines)

    def __repr__(self) -> str:
        return str(self)


def explain(op: str, *tensors: Any, dtype: Any = None, device: Any = None, numel: int | None = None,
            capturing: bool | None = None, layout: str | None = None, rule: str | None = None,
            form: str | None = None) -> Explanation:
    """Every row of ``op`` with its verdict for a call with these arguments (or dtype=/device=/numel=/layout=);
    ``rule`` and ``form`` as for :func:`resolve` (``rule="device"`` shows what a compiled graph's call picks)."""
    ctx = _context(op, tensors, dtype, device, numel, capturing, layout, rule, _FROM_CALL if form is None else form)
    evaluated = _evaluate(op, ctx)
    ranked, cold = _choose(evaluated, ctx)
    winner, winner_m = ranked[0]
    winner_us = _figure(winner_m, ctx.rule)
    verdicts = []
    for row, reason, measured in evaluated:
        prio = _priority_text(row)
        us = _figure(measured, ctx.rule)
        source = measured.source if measured is not None else None
        if reason is not None:
            verdicts.append(RowVerdict(row.name, row.backend, "filtered", reason, prio, None))
        elif row.name == winner.name:
            why = _why_chosen(row, us, len(ranked), ctx.rule)
            if cold:
                why = f"the fastest by device time that has run outside a capture here ({_us_text(us)})"
            elif us is not None and any(m is not None and _figure(m, ctx.rule) < us for _, m in ranked):
                why = (f"{us:.2f} us by device time: the row an eager call runs, which no row beats by "
                       f"{100 * DEVICE_MARGIN:.0f}%")
            verdicts.append(RowVerdict(row.name, row.backend, "chosen", why, prio, us, source))
        elif row.name in cold and _warm_key(row, ctx) in _unfit:
            why = (f"faster by device time ({_us_text(us)}) but it failed when run once ahead of a capture: "
                   f"{_unfit[_warm_key(row, ctx)]}")
            verdicts.append(RowVerdict(row.name, row.backend, "outranked", why, prio, us, source))
        elif row.name in cold:
            why = (f"faster by device time ({_us_text(us)}) but it has not run outside a capture in this process "
                   "at this size (a first call may compile or load code): an eager call of the op runs it once")
            verdicts.append(RowVerdict(row.name, row.backend, "outranked", why, prio, us, source))
        elif ctx.rule == "device" and us is not None and winner_us is not None and us < winner_us:
            why = (f"faster by device time ({us:.2f} us vs {winner_us:.2f} us), but by less than the "
                   f"{100 * DEVICE_MARGIN:.0f}% it takes to leave the row an eager call runs ({winner.name})")
            verdicts.append(RowVerdict(row.name, row.backend, "outranked", why, prio, us, source))
        else:
            verdicts.append(RowVerdict(row.name, row.backend, "outranked",
                                       _why_outranked(row, us, winner, winner_us), prio, us, source))
    verdicts = [dataclasses.replace(v, ignored=str(stale)) if reason is None and (stale := _stale(row, ctx)) else v
                for v, (row, reason, _) in zip(verdicts, evaluated)]
    verdicts = [dataclasses.replace(v, reason=f"{v.reason}; tuned: {pin.describe()}")
                if reason is None and (pin := _pin(row)) else v for v, (row, reason, _) in zip(verdicts, evaluated)]
    return Explanation(op, ctx, tuple(verdicts), op_status(op))


def _pin(row: KernelSpec) -> Any:
    """The config pinned for a tunable row on this GPU kind (rapid_llm.kernels.registry.pins), or None."""
    target = row.target
    if callable(getattr(target, "pin", None)):  # a JIT row whose source declares a space
        return target.pin()
    if row.tune_space is not None:
        try:
            return getattr(row.load(), "pin", None)
        except Exception:  # a row that cannot load says so in its own verdict
            return None
    return None


def op_status(op: str) -> str:
    """One line on what ``op`` is when a notebook's declaration hides the library's ("" otherwise): the rows a
    reader of the table would otherwise look for, and the way back."""
    hidden = _spec.shadowed_rows(op)
    if hidden is None:
        return ""
    n = len(hidden)
    return (f"op {op!r}: shadowed by a notebook declaration (the library's {n} row{'s' if n != 1 else ''} "
            f"{'are' if n != 1 else 'is'} hidden: {', '.join(hidden) or 'none'}; restore_op({op!r}) brings "
            f"{'them' if n != 1 else 'it'} back)")


def _us_text(us: float | None) -> str:
    return "unmeasured" if us is None else f"{us:.2f} us"


def _why_chosen(row: KernelSpec, measured: float | None, n: int, rule: str = "caller") -> str:
    if n == 1:
        return "the native floor: no other row survives the filters" if row.is_native else "the only surviving row"
    if measured is not None:
        return f"fastest measured ({measured:.2f} us{', device time' if rule == 'device' else ''})"
    if row.priority is None:
        return f"unmeasured, no static priority: backend {row.backend} preferred"
    return f"highest priority among unmeasured rows ({_priority_text(row)}, backend {row.backend})"


def _why_outranked(row: KernelSpec, measured: float | None, winner: KernelSpec, winner_m: float | None) -> str:
    by = f"outranked by {winner.name}"
    if winner_m is not None and measured is not None:
        return f"{by}: {winner_m:.2f} us vs {measured:.2f} us measured ({measured / winner_m:.2f}x slower)"
    if winner_m is not None:
        return f"{by}: {winner.name} is measured ({winner_m:.2f} us), this row is not"
    if row.is_native:
        return f"{by}: the native floor answers only when no faster row survives"
    if row.priority != winner.priority:
        return f"{by}: priority {_priority_text(winner)} > {_priority_text(row)}"
    return f"{by}: same priority, backend {winner.backend} preferred over {row.backend}"
