"""Every declared op is a torch custom op: ``torch.ops.rapid_llm.<op>``, the same op as ``K.<op>``.

``declare_op`` registers the op here (shipped ops when the registry discovers
them, a notebook's at its ``declare_op`` call) through one
``torch.library.Library("rapid_llm", "FRAGMENT")``:

* the schema comes from the declaration (:mod:`rapid_llm.kernels.registry.op_schema`),
  in-place arguments marked written, plus an ``.out`` overload where the native
  row takes ``out=``;
* the real implementation (CPU and CUDA) is the op's dispatcher, so the row is
  chosen from the measured figures as for an eager call, by device time rather
  than what an eager caller pays (a compiled graph's calls; see the dispatcher's RULES);
  on CUDA a C kernel in front of it calls, without Python, the launcher it chose
  before for such calls (rapid_llm.kernels.dispatch.c_kernels);
* the fake implementation follows the op's out rule (like the dispatch
  argument, its last dim halved, or nothing for an in-place op).

Why ``Library.define``/``impl`` and not ``torch.library.custom_op``: custom_op's
wrappers add several microseconds to every call (pytorch issue 177109), and a
C kernel can only be put in front of an op registered this way.
Eager ``K.<op>`` calls never take that path (see rapid_llm.kernels.dispatch.traced):
only compiled graphs call the custom op.

torch cannot redefine an op's schema in a running process. A redeclaration
(``declare_op(..., replace=True)``, or a library op's shadow,
``shadow_library=True``) with the same schema keeps the op: its
implementation dispatches to whatever rows the registry holds now. One with
another schema, or one whose schema cannot be derived, leaves the op stale:
the eager op serves the new rows, a call of the custom op raises a clear
error, and a compile runs ``K.<op>`` eagerly between graphs, its graph break
saying why (restart the process, or declare the op under a new name). A
notebook that shadows a library op with its own signature is that case;
``restore_op`` brings the library's declaration back, and with it the op.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from rapid_llm.kernels.dispatch import c_kernels, dispatcher as dispatch, traced
from rapid_llm.kernels.registry import op_schema
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.op_schema import OpSchema, SchemaError
from rapid_llm.kernels.registry.out_rules import OUT_RULES, make_out
from rapid_llm.kernels.registry.spec import RegistryError

__all__ = ["NAMESPACE", "DISPATCH_KEYS", "register", "register_torch_ops", "schema_for", "torch_op", "registered",
           "why_not", "CheckedPacket"]

NAMESPACE = "rapid_llm"
#: Where the real implementation is registered: the devices rows run on (meta and fake tensors take the fake).
DISPATCH_KEYS = ("CPU", "CUDA")


@dataclass
class _Binding:
    """A registered op: its schema (fixed for the process), its fake rule, and whether it went stale."""

    schema: OpSchema
    fake: str
    stale: str | None = None


_lib: torch.library.Library | None = None
_bindings: dict[str, _Binding] = {}


def _library() -> torch.library.Library:
    global _lib
    if _lib is None:
        _lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _lib


def _native_row(name: str) -> _spec.KernelSpec:
    row = _spec.native_row(name)
    if row is None:
        raise SchemaError(f"op {name!r} has no native row yet (its schema is derived from one)")
    return row


def schema_for(decl: Any) -> OpSchema:
    """The op's schema: ``declare_op(schema=...)`` if given, else derived from its reference and native row."""
    native = _native_row(decl.name)
    fn = native.load()
    explicit = getattr(decl, "schema", None)
    if explicit:
        return op_schema.from_text(decl.name, explicit, has_out=op_schema.takes_out(fn), dispatch_arg=decl.dispatch_arg)
    return op_schema.derive(decl.name, fn, decl.reference.make_inputs, dtypes=native.dtypes,
                            devices=native.devices, dispatch_arg=decl.dispatch_arg)


def register(decl: Any) -> str | None:
    """Make ``decl``'s op ``torch.ops.rapid_llm.<name>`` (idempotent); None, or why it is not (also recorded)."""
    name = decl.name
    c_kernels.forget()  # what the C kernels learned may name the op's old rows
    try:
        schema = schema_for(decl)
    except Exception as exc:  # a declaration never fails for want of a schema: the op stays eager under compile
        if name not in _bindings:
            return _unbound(name, f"op {name!r} is not a torch custom op: {exc}")
        # Declared again with a signature nobody can read: the first schema must not pass the new rows arguments
        # they never took (a shadow of rms_norm without eps would get eps as its out=).
        why = (f"op {name!r} was declared again and its schema cannot be derived ({exc}), so "
               f"torch.ops.{NAMESPACE}.{name} may no longer fit it: give declare_op schema=, {_way_back(name)}")
        _bindings[name].stale = why
        return _unbound(name, why)
    binding = _bindings.get(name)
    if binding is not None:
        if (binding.schema.text, binding.schema.out_text) != (schema.text, schema.out_text):
            why = (f"op {name!r} was declared again with schema {schema.text!r}, but torch.ops.{NAMESPACE}.{name} "
                   f"keeps its first one, {binding.schema.text!r} (torch cannot redefine a schema in a running "
                   f"process): {_way_back(name)}")
            binding.stale = why  # said where it matters: a compile of K.<name>, a call of the custom op
            return _unbound(name, why)
        binding.stale, binding.fake = None, schema.fake
        _bind(name, schema)
        return None
    try:
        _define(schema, forms=getattr(decl, "form_of", None) is not None)
    except RuntimeError as exc:
        return _unbound(name, f"torch.ops.{NAMESPACE}.{name} could not be defined: {str(exc).splitlines()[0]}")
    _bindings[name] = _Binding(schema, schema.fake)
    _bind(name, schema)
    return None


def _way_back(name: str) -> str:
    """How the op becomes a custom op again: the library's declaration back, or a restart."""
    if _spec.shadowed_rows(name) is not None:
        return f"restore_op({name!r}) brings the library's declaration back, or declare yours under a new name"
    return "restart it, or declare the op under a new name"


def _unbound(name: str, why: str) -> str:
    _live_ops.pop(name, None)
    traced.unbind(name, why)
    return why


class CheckedPacket(torch._ops.OpOverloadPacket):
    """``torch.ops.rapid_llm.<op>``: torch's packet, whose call runs the op's argument checks first, so a bad
    call raises what ``K.<op>`` and the floor raise (torch's schema matching would answer a wrong argument
    type or count in its own words, over several lines). The overloads (``.default``, ``.out``), which
    compiled graphs call, are torch's own."""

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        floor = _checked_floor(self.__name__)
        if floor is not None:
            dispatch.answer_bad_call(self.__name__, floor, args, kwargs)
            if "out" in kwargs or len(args) > _bindings[self.__name__].schema.n_args:
                # out= as the floor takes it (by position too, None for none): the schema's .out overload
                bound = inspect.signature(floor).bind(*args, **kwargs)
                out = bound.arguments.pop("out", None)
                args, kwargs = tuple(bound.arguments.values()), ({} if out is None else {"out": out})
        return super().__call__(*args, **kwargs)


def _checked_floor(name: str) -> Callable[..., Any] | None:
    """The op's floor, whose ``check`` every path runs (None while the op is stale or has none)."""
    binding = _bindings.get(name)
    if binding is None or binding.stale is not None:
        return None
    row = _spec.native_row(name)
    return None if row is None else row.load()


def _bind(name: str, schema: OpSchema) -> None:
    packet = getattr(getattr(torch.ops, NAMESPACE), name)
    if type(packet) is torch._ops.OpOverloadPacket:
        packet.__class__ = CheckedPacket
    traced.bind(name, packet.default, packet.out if schema.has_out else None, schema.n_args)


def _define(schema: OpSchema, forms: bool) -> None:
    lib, name = _library(), schema.name
    tags = (torch.Tag.pt2_compliant_tag,)
    lib.define(schema.text, tags=tags)
    if schema.out_text:
        lib.define(schema.out_text, tags=tags)
    returns = schema.returns
    impl = _impl_none(name) if returns == "()" else _impl_tensor(name) if returns == "Tensor" else _impl_tensors(name)
    in_c = c_kernels.attach(lib, schema, impl, lambda: _live(name), forms=forms)
    for key in DISPATCH_KEYS:
        if key not in in_c:
            lib.impl(name, impl, key)
        if schema.out_text:
            lib.impl(f"{name}.out", _impl_out(name), key)
    torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(name), lib=lib)
    if schema.out_text:
        torch.library.register_fake(f"{NAMESPACE}::{name}.out", _fake_out, lib=lib)


# ------------------------------------------------------------------ implementations


#: op name -> its dispatcher, while the op is not stale (a compiled graph's call is one lookup here).
_live_ops: dict[str, Any] = {}


def _live(name: str) -> Callable[..., Any]:
    """The op's dispatcher now (raises if the op went stale): the row choice happens inside it, by device
    time, since compiled graphs are what call the custom op (rapid_llm.kernels.dispatch.dispatcher.RULES)."""
    op = _live_ops.get(name)
    if op is not None:
        return op
    stale = _bindings[name].stale
    if stale is not None:
        raise RuntimeError(stale)
    op = _live_ops[name] = dispatch.get_op(name, rule="device")
    return op


def _impl_none(name: str) -> Callable[..., None]:
    def impl(*args: Any, **kwargs: Any) -> None:
        (_live_ops.get(name) or _live(name))(*args, **kwargs)

    return impl


def _impl_tensor(name: str) -> Callable[..., torch.Tensor]:
    def impl(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = (_live_ops.get(name) or _live(name))(*args, **kwargs)
        # The fake says contiguous: a strided call's floor may return another layout.
        return out if out.is_contiguous() else out.contiguous()

    return impl


def _impl_tensors(name: str) -> Callable[..., tuple]:
    def impl(*args: Any, **kwargs: Any) -> tuple:
        return tuple(t.contiguous() for t in (_live_ops.get(name) or _live(name))(*args, **kwargs))

    return impl


def _impl_out(name: str) -> Callable[..., None]:
    def impl(*args: Any, out: torch.Tensor, **kwargs: Any) -> None:
        (_live_ops.get(name) or _live(name))(*args, out=out, **kwargs)

    return impl


def _fake(name: str) -> Callable[..., Any]:
    """Outputs by the op's out rule, read at call time (a redeclaration may change the rule, not the schema)."""

    def fake(*args: Any, **kwargs: Any) -> Any:
        binding = _bindings[name]
        floor = _checked_floor(name)
        if floor is not None:  # the same answer to a bad call under torch.compile as in eager mode
            dispatch.answer_bad_call(name, floor, args, kwargs)
        rule = binding.fake
        if rule in OUT_RULES:
            return make_out(rule, args[binding.schema.dispatch_arg], name)
        result = _native_row(name).load()(*args, **kwargs)  # "native": plain torch runs on fake tensors
        if isinstance(result, torch.Tensor):
            return result.contiguous()
        return None if result is None else tuple(t.contiguous() for t in result)

    return fake


def _fake_out(*args: Any, out: torch.Tensor, **kwargs: Any) -> None:
    return None


_spec.on_change(c_kernels.forget)


# ------------------------------------------------------------------ lookups


def torch_op(name: str) -> Any:
    """``torch.ops.rapid_llm.<name>`` (the op's OpOverloadPacket); RegistryError saying why when there is none."""
    _spec.get_decl(name)  # discovers the shipped ops, which registers them; names the known ops otherwise
    why = why_not(name)
    if why:
        raise RegistryError(why)
    return getattr(getattr(torch.ops, NAMESPACE), name)


def register_torch_ops() -> list[str]:
    """Make every declared op ``torch.ops.rapid_llm.<op>`` now; the ops registered.

    ``import rapid_llm.kernels`` imports neither torch nor the op folders (deriving the shipped ops' schemas
    costs about 0.2 s on a CPU), so code written against ``torch.ops.rapid_llm`` makes this one call first;
    any use of the registry (``K.<op>``, ``all_ops()``) does the same."""
    _spec.all_ops()  # discovering the shipped ops declares each, which registers it here
    return registered()


def registered() -> list[str]:
    """The ops registered as custom ops in this process (not stale)."""
    return sorted(n for n, b in _bindings.items() if b.stale is None)


def why_not(name: str) -> str:
    """Why op ``name`` is not a usable torch custom op ('' when it is)."""
    binding = _bindings.get(name)
    if binding is not None and binding.stale is None:
        return ""
    return traced.why_not(name)
