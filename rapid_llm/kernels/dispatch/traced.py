"""What ``K.<op>(...)`` is while Dynamo traces it: a call of ``torch.ops.rapid_llm.<op>``.

Eager calls never come here: an op is the compiled dispatcher (or the
portable Python one), one dict lookup and the row's call, with nothing added
for tracing. Dynamo cannot trace the C call (nor should it trace the Python
one's row choice), so it is told what the call means instead: each op's id
goes into Dynamo's set of polyfilled callables, which makes Dynamo trace the
op's ``__python_implementation__`` (:func:`call`) in place of calling it
(torch 2.11 and 2.13 both read that set; where it is missing, the public
``torch.compiler.substitute_in_graph`` of the dispatcher type's ``__call__``
does it). :func:`call` traces into one node of the custom op; an op that is
no custom op (no declaration, no schema) runs eagerly behind
``torch.compiler.disable``: a graph break that says why, never a wrong trace.

Importing ``torch._dynamo`` costs seconds and imports triton, so ops are
marked when something else imports Dynamo (torch.compile does): right away
if it is loaded, else by a one-shot import hook.

This module is a leaf: dispatch and custom_ops import it, it imports neither.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any, Callable

__all__ = ["call", "bind", "unbind", "bound", "why_not", "register"]

#: op name -> (functional overload, .out overload or None, positional arguments of the functional one)
_TORCH_OPS: dict[str, tuple[Any, Any, int]] = {}
#: op name -> why it is not a torch custom op (shown when a compile graph-breaks on it)
_WHY_NOT: dict[str, str] = {}
_DYNAMO = "torch._dynamo"


def bind(name: str, functional: Any, out: Any, n_args: int) -> None:
    """``K.<name>`` traces as ``functional`` (and ``out`` when called with ``out=``)."""
    _TORCH_OPS[name] = (functional, out, n_args)
    _WHY_NOT.pop(name, None)
    _EAGER.pop(name, None)


def unbind(name: str, why: str) -> None:
    """``K.<name>`` has no custom op to trace as (``why``): a compile runs it eagerly, between graphs."""
    _TORCH_OPS.pop(name, None)
    _WHY_NOT[name] = why
    if _installed:
        _EAGER[name] = _disabled(why)


def bound(name: str) -> bool:
    return name in _TORCH_OPS


def why_not(name: str) -> str:
    """Why ``K.<name>`` is not traced as a custom op ('' when it is)."""
    if name in _TORCH_OPS:
        return ""
    return _WHY_NOT.get(name, f"op {name!r} is not declared (rapid_llm.kernels.declare_op makes it a custom op)")


def call(name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``K.<name>(*args, **kwargs)`` as Dynamo should see it: the custom op, ``out=`` through ``.out``."""
    entry = _TORCH_OPS.get(name)
    if entry is None:
        return _EAGER.get(name, _eager)(name, args, kwargs)
    functional, out_op, n_args = entry
    out = kwargs.get("out") if kwargs else None
    if out is None and len(args) > n_args and out_op is not None:
        out, args = args[n_args], args[:n_args]
    if out is not None:
        if out_op is None:
            return _EAGER.get(name, _eager)(name, args, kwargs)
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        out_op(*args, out=out, **rest)
        return out
    if kwargs and "out" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    return functional(*args, **kwargs)


def _eager_call(name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    return _BY_NAME[name](*args, **kwargs)


#: The eager call, behind torch.compiler.disable once Dynamo is loaded: a graph break, never a wrong trace;
#: per op where it is known why the op is no custom op (the graph break says so).
_eager: Callable[..., Any] = _eager_call
_EAGER: dict[str, Callable[..., Any]] = {}
_installed = False


def _disabled(reason: str) -> Callable[..., Any]:
    import torch

    try:
        return torch.compiler.disable(_eager_call, reason=reason)
    except TypeError:  # a torch whose disable() takes no reason
        return torch.compiler.disable(_eager_call)


# ------------------------------------------------------------------ Dynamo


#: Every op made traceable (kept alive: Dynamo knows them by id, which must never pass to another object).
_registered: list[Any] = []
_marked: set[int] = set()  # ids of the ops marked for Dynamo
_prepared: set[int] = set()  # ids of the op types (and call slots) prepared for it
#: The op each name calls now (the eager fallback's target).
_BY_NAME: dict[str, Any] = {}


def register(op: Any) -> None:
    """Dynamo traces calls of ``op`` as its ``__python_implementation__`` (once Dynamo is loaded).

    That is the hook Dynamo's polyfills read: an object whose id is among the polyfilled callables is
    traced through that attribute, a plain function, instead of being called: here :func:`call` for
    the op's name.
    """
    name = op.name

    def traced_call(*args: Any, **kwargs: Any) -> Any:
        return call(name, args, kwargs)

    traced_call.__name__ = traced_call.__qualname__ = name
    op.__python_implementation__ = traced_call
    _BY_NAME[name] = op
    _registered.append(op)
    if _dynamo_loaded():
        _install()
    else:
        _AfterImport.arm(_DYNAMO, _install)


def _dynamo_loaded() -> bool:
    module = sys.modules.get(_DYNAMO)
    return module is not None and getattr(module, "trace_rules", None) is not None


def _install() -> None:
    """Mark every registered op for Dynamo; the first time, make the eager fallbacks graph breaks."""
    global _eager, _installed
    if not _installed:
        _installed = True
        _eager = _disabled("this rapid_llm op is not declared, so it is not a torch custom op")
        for name, why in _WHY_NOT.items():
            _EAGER[name] = _disabled(why)
    from torch._dynamo import trace_rules

    ids = getattr(trace_rules, "_polyfilled_function_ids", None)
    for op in _registered:
        if id(op) in _marked:
            continue
        _marked.add(id(op))
        _skip_methods(type(op))
        if ids is not None and hasattr(ids, "add"):
            ids.add(id(op))
        else:
            _substitute_call(type(op))


def _skip_methods(cls: type) -> None:
    """Dynamo never compiles the dispatcher's own frames: when a graph break runs an op eagerly (an op that
    is no custom op), its Python dispatch runs as in eager mode, not as a frame to trace (where the op,
    a polyfilled object to Dynamo, has no methods)."""
    if id(cls) in _prepared:
        return
    _prepared.add(id(cls))
    try:
        from torch._dynamo.decorators import skip
    except ImportError:
        return
    for klass in cls.__mro__:
        if not klass.__module__.startswith("rapid_llm."):
            continue
        for attr in vars(klass).values():
            fn = getattr(attr, "__func__", attr)
            if isinstance(fn, types.FunctionType):
                skip(fn)


def _substitute_call(cls: type) -> None:
    """Where Dynamo keeps no id set: the public polyfill of the C type's ``__call__`` (Dynamo 2.13 reads it)."""
    import torch

    call_slot = next((k.__dict__["__call__"] for k in cls.__mro__ if "__call__" in k.__dict__), None)
    if call_slot is not None and id(call_slot) in _prepared:
        return
    if call_slot is None or not isinstance(call_slot, type(object.__init__)):
        warnings.warn(f"rapid_llm: {cls.__name__} calls will not trace as custom ops under this torch",
                      RuntimeWarning, stacklevel=3)
        return
    _prepared.add(id(call_slot))
    torch.compiler.substitute_in_graph(call_slot, skip_signature_check=True)(_polyfill)


def _polyfill(self: Any, *args: Any, **kwargs: Any) -> Any:
    return call(self.name, args, kwargs)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run ``then`` right after module ``name`` is imported (once), by wrapping its loader."""

    _armed: dict[str, "_AfterImport"] = {}

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self.then = then

    @classmethod
    def arm(cls, name: str, then: Callable[[], None]) -> None:
        if name not in cls._armed:
            cls._armed[name] = hook = cls(name, then)
            sys.meta_path.insert(0, hook)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, then = loader.exec_module, self.then

        def exec_then(module: Any) -> None:
            exec_module(module)
            try:
                then()
            except Exception as exc:  # never break the import it follows
                warnings.warn(f"rapid_llm: ops will not trace under torch.compile: {type(exc).__name__}: {exc}",
                              RuntimeWarning, stacklevel=2)

        loader.exec_module = exec_then
        return spec
