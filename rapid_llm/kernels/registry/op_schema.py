"""An op's torch schema, derived from its declaration: what torch.library needs to make it a custom op.

torch needs a schema (argument types, which arguments are written, what comes
back) and a fake implementation (output shapes without running a kernel). The
declaration already holds both, implicitly: the reference's ``make_inputs``
gives example arguments (their Python types are the argument types), the
native row's signature names them, and one call of the native row on those
examples shows which tensors it writes (their version counters move), what it
returns, and how the output relates to the argument that picks the row: the
out rules the JIT rows use (rapid_llm.kernels.registry.out_rules): like
that argument, like it with the last dim halved, or nothing (in place). An
output that follows neither rule gets the fake "native": the native row run on
fake tensors. A native row with an ``out`` parameter gets an ``.out`` overload.

``declare_op(..., schema="(Tensor x, float eps) -> Tensor")`` states the
schema instead, for an op whose example cannot be run here.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.registry.out_rules import OUT_RULES, rule_of

__all__ = ["OpSchema", "SchemaError", "derive", "from_text", "takes_out", "EXAMPLE_NUMEL", "FAKE_RULES"]

#: The size the example arguments are made at: small, and divisible enough for any op's shape rule.
EXAMPLE_NUMEL = 4096
#: Fake rules: the out rules (registry.out_rules), plus "native" (the native row run on fake tensors).
FAKE_RULES = (*OUT_RULES, "native")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class SchemaError(ValueError):
    """The declaration does not say enough to make the op a torch custom op."""


@dataclass(frozen=True)
class OpSchema:
    """The schema of ``torch.ops.rapid_llm.<name>`` and how its fake makes outputs.

    ``args``: the functional overload's arguments, schema text each (``"Tensor(a!) x"``); ``fake``: one of
    :data:`FAKE_RULES`; ``has_out``: an ``.out`` overload exists (``*, Tensor(z!) out``, returning nothing).
    """

    name: str
    args: tuple[str, ...]
    returns: str
    fake: str
    has_out: bool = False
    dispatch_arg: int = 0

    @property
    def text(self) -> str:
        """The functional overload's schema, as torch.library.Library.define takes it."""
        return f"{self.name}({', '.join(self.args)}) -> {self.returns}"

    @property
    def out_text(self) -> str | None:
        """The ``.out`` overload's schema (out written, nothing returned), or None."""
        if not self.has_out:
            return None
        star = "" if "*" in self.args else "*, "
        return f"{self.name}.out({', '.join(self.args)}, {star}Tensor(z!) out) -> ()"

    @property
    def n_args(self) -> int:
        """How many arguments may be passed by position."""
        return self.args.index("*") if "*" in self.args else len(self.args)

    @property
    def mutated(self) -> tuple[str, ...]:
        """The arguments the op writes (in place)."""
        return tuple(a.rsplit(" ", 1)[-1].split("=")[0] for a in self.args if "!)" in a.split(" ", 1)[0])


# ------------------------------------------------------------------ from text


def from_text(name: str, text: str, *, fake: str | None = None, has_out: bool = False,
              dispatch_arg: int = 0) -> OpSchema:
    """An explicit schema, ``"(Tensor x, float eps) -> Tensor"`` (the name may lead), checked by torch's parser."""
    body = text.strip()
    if body.startswith(name + "("):
        body = body[len(name):]
    if not body.startswith("("):
        raise SchemaError(f"{name}: schema must look like '(Tensor x, float eps) -> Tensor', got {text!r}")
    try:
        parsed = torch._C.parse_schema(f"rapid_llm::{name}{body}")
    except RuntimeError as exc:
        raise SchemaError(f"{name}: torch cannot parse schema {text!r}: {str(exc).splitlines()[0]}") from None
    args = _split_args(str(parsed))  # the parser's text: aliases and defaults normalised
    returns = _returns_text(parsed)
    if fake is None:
        fake = "none" if returns == "()" else "native"
    return OpSchema(name, args, returns, fake, has_out, dispatch_arg)


def _split_args(text: str) -> tuple[str, ...]:
    """The arguments of ``ns::name(a, b) -> R`` as texts (commas inside brackets belong to their argument)."""
    inner = text[text.index("(") + 1:text.rindex(") ->")]
    args, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if ch == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    if inner.strip():
        args.append(inner[start:].strip())
    return tuple(args)


def _returns_text(parsed: Any) -> str:
    rets = [str(r.type) for r in parsed.returns]
    if not rets:
        return "()"
    return rets[0] if len(rets) == 1 else f"({', '.join(rets)})"


# ------------------------------------------------------------------ derived


def _type_of(value: Any, annotation: Any = inspect.Parameter.empty) -> str:
    """The schema type of an example value (bool before int: a bool is an int in Python)."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, torch.dtype):
        return "ScalarType"
    if isinstance(value, (list, tuple)) and value:
        inner = {_type_of(v) for v in value}
        if len(inner) == 1 and inner <= {"Tensor", "int", "float", "bool"}:
            return f"{inner.pop()}[]"
    if value is None and annotation is not inspect.Parameter.empty:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        for word, typ in (("Tensor", "Tensor"), ("bool", "bool"), ("int", "int"), ("float", "float")):
            if word in text:
                return f"{typ}?"
    raise SchemaError(f"cannot type an argument from its example value {type(value).__name__} "
                      f"{value!r:.40}: give declare_op(schema=...)")


def _default_text(value: Any) -> str | None:
    """A default as schema text, or None when the schema cannot carry it."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    return None


def _parameters(native: Callable[..., Any]) -> tuple[list[inspect.Parameter | None], bool]:
    """The native row's positional parameters (``out`` aside) and whether it takes ``out``."""
    try:
        params = list(inspect.signature(native).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: names made up (arg0, arg1, ...)
        return [None], False  # type: ignore[list-item]
    has_out = any(p.name == "out" and p.kind != p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.name != "out" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        positional.append(None)  # type: ignore[arg-type]  # *args: names made up past the named ones
    return positional, has_out


def takes_out(native: Callable[..., Any]) -> bool:
    """Whether the native row takes ``out=`` (the op then gets an ``.out`` overload)."""
    return _parameters(native)[1]


def _names(params: list[inspect.Parameter | None], n: int) -> list[tuple[str, Any]]:
    """(name, annotation) for the first ``n`` positional arguments."""
    named = [p for p in params if p is not None]
    open_ended = len(named) < len(params)
    if n > len(named) and not open_ended:
        raise SchemaError(f"make_inputs gives {n} arguments, the native row takes {len(named)}")
    out = [(p.name, p.annotation) for p in named[:n]]
    out += [(f"arg{i}", inspect.Parameter.empty) for i in range(len(out), n)]
    return out


def _example_device(devices: Sequence[str]) -> torch.device:
    if "cpu" in devices:
        return torch.device("cpu")
    if "cuda" in devices and torch.cuda.is_available():
        return torch.device("cuda")
    raise SchemaError(f"the native row runs on {', '.join(devices)} only, none of them here: "
                      "give declare_op(schema=...)")


def _fake_rule(result: Any, x: Any) -> str:
    return rule_of(result, x) or "native"


def _returns(result: Any, inputs: Sequence[Any]) -> str:
    outs = result if isinstance(result, (tuple, list)) else (result,)
    if result is None:
        return "()"
    if not all(isinstance(t, torch.Tensor) for t in outs):
        raise SchemaError(f"the native row returns {type(result).__name__}, not None, a tensor or tensors")
    storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.numel()}
    for t in outs:
        if t.numel() and t.untyped_storage().data_ptr() in storages:
            raise SchemaError("the native row returns (a view of) one of its inputs; a custom op returns new "
                              "tensors (write into an argument and return None, or return a copy)")
    return "Tensor" if len(outs) == 1 and not isinstance(result, (tuple, list)) else \
        f"({', '.join('Tensor' for _ in outs)})"


#: Schemas derived in this process, by everything a derivation reads. Each registry made afresh (spec.isolated: every
#: test gets one) registers every shipped op again, and deriving ran its native row on the example each time:
#: rotary_embedding's builds a float64 cos/sin cache of 4096 positions, 40 ms a test on CI's CPU.
_derived: dict[tuple, OpSchema] = {}


def derive(name: str, native: Callable[..., Any], make_inputs: Callable[..., tuple], *,
           dtypes: Sequence[str], devices: Sequence[str], dispatch_arg: int = 0) -> OpSchema:
    """The schema of op ``name``, from one call of its native row on the reference's example arguments (once per
    native function and example in a process; a failure is not remembered)."""
    key = (name, native, make_inputs, tuple(dtypes), tuple(devices), dispatch_arg, torch.cuda.is_available())
    try:
        return _derived[key]
    except KeyError:
        pass
    except TypeError:  # a callable that cannot be a key: derived every time
        return _derive(name, native, make_inputs, dtypes=dtypes, devices=devices, dispatch_arg=dispatch_arg)
    schema = _derived[key] = _derive(name, native, make_inputs, dtypes=dtypes, devices=devices,
                                     dispatch_arg=dispatch_arg)
    return schema


def _derive(name: str, native: Callable[..., Any], make_inputs: Callable[..., tuple], *,
            dtypes: Sequence[str], devices: Sequence[str], dispatch_arg: int = 0) -> OpSchema:
    params, has_out = _parameters(native)
    dtype = platform.torch_dtype("fp32" if "fp32" in dtypes else dtypes[0])
    device = _example_device(devices)
    try:
        args = tuple(make_inputs((EXAMPLE_NUMEL,), dtype, device, torch.Generator().manual_seed(0)))
    except Exception as exc:
        raise SchemaError(f"make_inputs raised {type(exc).__name__}: {exc}") from None
    if not args:
        raise SchemaError("make_inputs gives no example arguments")
    names = _names(params, len(args))
    types = [_type_of(v, ann) for v, (_, ann) in zip(args, names)]
    before = [a._version if isinstance(a, torch.Tensor) else None for a in args]
    try:
        result = native(*args)
    except Exception as exc:
        raise SchemaError(f"the native row raised {type(exc).__name__} on the example: {exc}") from None
    written = [v is not None and a._version != v for a, v in zip(args, before)]
    letters = iter(_LETTERS)
    texts = [f"{t}({next(letters)}!) {n}" if w else f"{t} {n}" for t, (n, _), w in zip(types, names, written)]
    for p in params[len(args):]:  # parameters past the example, with a default the schema can carry
        if p is None or p.default is inspect.Parameter.empty:
            break
        default = _default_text(p.default)
        try:
            typ = _type_of(p.default, p.annotation)
        except SchemaError:
            break
        if default is None:
            break
        texts.append(f"{typ} {p.name}={default}")
    returns = _returns(result, args)
    x = args[dispatch_arg] if dispatch_arg < len(args) else None
    fake = _fake_rule(result, x) if returns in ("()", "Tensor") else "native"
    schema = OpSchema(name, tuple(texts), returns, fake, has_out and returns == "Tensor", dispatch_arg)
    try:
        torch._C.parse_schema(f"rapid_llm::{schema.text}")
    except RuntimeError as exc:
        raise SchemaError(f"the derived schema {schema.text!r} does not parse: {str(exc).splitlines()[0]}") from None
    return schema
