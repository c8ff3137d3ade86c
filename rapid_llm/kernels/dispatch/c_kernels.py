"""The C kernel of a custom op: what a call of ``torch.ops.rapid_llm.<op>`` runs on CUDA.

A compiled graph calls the ops through torch's dispatcher, and a kernel written in Python makes that call
cost the GIL taken back, the arguments boxed into Python objects and a Python frame: on an H200, 2.6-4.5 us
more than ``K.<op>`` costs an eager caller, where the C kernel costs 1.1-3.2 us more. That is torch's boundary:
a C kernel of the same schema doing no work costs 2.3-3.4 us a call through ``torch.ops``, and the C kernel
costs that plus about what its row costs called directly (benchmarks/kernels/bench_custom_op_overhead.py). The C kernel
(``fastcall_torch.inc``) runs, with no Python, the launcher that the op's Python kernel chose for an
earlier call of the same dtype, device, size class and layout. Python still decides: the op's Python
kernel, registered under its own name (:func:`python_op_name`), serves every call the C kernel has not
learned (the first of each kind; rows that are not JIT launchers, or not graph safe), teaches it, and
raises. Through the C kernel an error reaches Python as RuntimeError, its text starting with the
Python error's type ("ValueError: rms_norm(): ..."): torch's dispatcher passes nothing else through.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["KEYS", "attach", "forget", "learned", "python_op_name", "torch_shim_library", "why_not"]

#: Where a custom op gets a C kernel (the devices JIT launchers run on) when torch can reach one.
KEYS: tuple[str, ...] = ("CUDA",)
#: Schema types by the launcher kind each one is; an op with any other argument keeps its Python kernel.
_KINDS = {"Tensor": "t", "float": "f", "int": "i", "bool": "b"}

_index: dict[str, int] = {}  # op -> its C kernel
_fast: Any = None  # the fastcall module the C kernels live in (asked once; forget and learned reuse it)
_why_not: dict[str, str] = {}  # op -> why it has none


def torch_shim_library() -> str:
    """The shared library that holds torch's stable C shim (``aoti_torch_*``), which C kernels register through."""
    return str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")


def python_op_name(name: str) -> str:
    """The op the Python kernel of ``name`` is registered as, for its C kernel to call."""
    return f"_{name}_python"


def kinds(args: tuple[str, ...]) -> str | None:
    """The launcher kinds of schema arguments (``"Tensor(a!) x"`` -> t), or None if one has no kind."""
    out = []
    for arg in args:
        type_ = arg.split(" ", 1)[0]
        kind = None if arg == "*" or "?" in type_ else _KINDS.get(type_.split("(", 1)[0])
        if kind is None:
            return None
        out.append(kind)
    return "".join(out)


def attach(lib: torch.library.Library, schema: Any, impl: Callable[..., Any], dispatcher: Callable[[], Any],
           forms: bool) -> tuple[str, ...]:
    """Give ``schema``'s op its C kernel where :data:`KEYS` says; the keys it serves (the caller registers
    ``impl`` for the others). ``dispatcher()`` is the op's device-time dispatcher, whose choices it learns."""
    name = schema.name
    keys = tuple(k for k in KEYS if k != "CUDA" or torch.cuda.is_available())
    why = _why(schema, forms) if keys else "no CUDA here"
    if not why:
        try:
            from rapid_llm.kernels.toolchain.fastpath.binding import fastcall

            fast = fastcall()
            fast.torch_shim(torch_shim_library())
        except Exception as exc:  # no compiler, an older torch: the Python kernel serves, as it always could
            why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    if why:
        _why_not[name] = why
        return ()
    python = python_op_name(name)
    lib.define(schema.text.replace(f"{name}(", f"{python}(", 1))
    returns_tensor = schema.returns == "Tensor"
    global _fast
    _fast = fast
    served = []
    for key in keys:
        index = fast.torch_kernel(lib.ns, name, python, kinds(schema.args), schema.dispatch_arg, returns_tensor, key)
        served.append(key)
        lib.impl(python, _python_kernel(fast, index, impl, dispatcher, returns_tensor), key)
        _index[name] = index
    return tuple(served)


def _why(schema: Any, forms: bool) -> str:
    if schema.returns not in ("Tensor", "()"):
        return f"it returns {schema.returns} (a C kernel returns one tensor or nothing)"
    if kinds(schema.args) is None:
        return "an argument is not a Tensor, float, int or bool"
    if forms:
        return "it has forms, which the C kernel's key cannot tell apart"
    return ""


def _python_kernel(fast: Any, index: int, impl: Callable[..., Any], dispatcher: Callable[[], Any],
                   returns_tensor: bool) -> Callable[..., Any]:
    """The op's Python kernel as its C kernel calls it: it runs the call, teaches the C kernel, and hands back
    what it raised as text (an exception raised through the shim would be lost)."""

    def kernel(*args: Any) -> Any:
        try:
            result = impl(*args)
            fast.torch_learn(index, dispatcher(), *args)
        except Exception as exc:
            fast.torch_stash(f"{type(exc).__name__}: {exc}")
            return torch.empty(0) if returns_tensor else None
        return result

    return kernel


def forget() -> None:
    """Every C kernel forgets what it learned (rows, figures or an op changed)."""
    if _index:
        _fast.torch_forget()


def learned(name: str) -> list[tuple[int, str | None]]:
    """What op ``name``'s C kernel has learned: (key, the launcher's name, or None where Python serves)."""
    if name not in _index:
        return []
    return _fast.torch_learned(_index[name])


def why_not(name: str) -> str:
    """Why op ``name`` has no C kernel ('' when it has one)."""
    return "" if name in _index else _why_not.get(name, f"op {name!r} is not a registered custom op")
