"""The false-rejection corpus: correct kernels of transcendental and composite ops that verify must pass.

Each :class:`CorpusOp` is an op a kernel author would declare in a notebook: a float64 oracle, the
native floor (torch's own function on the fp32 upcast, rounded once, as every shipped floor does),
a ``magnitude`` where the oracle's terms cancel or where it amplifies the rounding of an
intermediate, an input law that reaches the op's hard regions (saturation, cancellation, large
arguments), and the CUDA launchers that compute it with the usual device functions
(``activations.cu`` and ``gated.cu`` beside this file). :func:`declare` declares the op and
registers its rows; the tests run verify over them (tests/unit/verification/test_false_rejections.py
on CPU, tests/gpu/unit/verification/test_false_rejections.py on a GPU).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.verification.defects import output_like

__all__ = ["CORPUS", "CorpusOp", "SOURCES", "HALF_ONLY", "declare", "row_dtypes", "SOFTCAP"]

HERE = Path(__file__).resolve().parent
#: The CUDA sources of the corpus: one module each, a launcher per row.
SOURCES = (HERE / "activations.cu", HERE / "gated.cu")
#: Gemma-2's final-logit softcap.
SOFTCAP = 30.0
#: Rows built on __expf, whose error grows with |x|: they declare the half types only (activations.cu says why).
HALF_ONLY = frozenset({"sigmoid_fast", "silu_fast", "silu_mul_fast"})
GELU_K = math.sqrt(2 / math.pi)
QUICK_GELU = 1.702

Law = Callable[[tuple[int, ...], torch.Generator], tuple]


@dataclass(frozen=True)
class CorpusOp:
    """One op of the corpus: its oracle and floor over float64 / fp32 tensors, and its CUDA launchers."""

    name: str
    oracle: Callable[..., torch.Tensor]        # float64 in, float64 out
    floor: Callable[..., torch.Tensor]         # fp32 in, fp32 out: what native/<op> computes before rounding
    law: Law                                   # (shape, generator) -> float64 tensors and scalars
    launchers: tuple[str, ...]                 # the CUDA rows' launchers in the op's source
    source: Path
    magnitude: Callable[..., torch.Tensor] | None = None

    @property
    def op(self) -> str:
        return f"corpus_{self.name}"


def _normal(scale: float) -> Law:
    return lambda shape, gen: (torch.randn(shape, generator=gen, dtype=torch.float64) * scale,)


def _uniform(lo: float, hi: float) -> Law:
    return lambda shape, gen: (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo,)


def _lognormal(sigma: float) -> Law:
    return lambda shape, gen: (torch.exp(torch.randn(shape, generator=gen, dtype=torch.float64) * sigma),)


def _pair(first: Law, second: Law) -> Law:
    return lambda shape, gen: first(shape, gen) + second(shape, gen)


def _with(law: Law, *scalars: float) -> Law:
    return lambda shape, gen: law(shape, gen) + scalars


# ---------------------------------------------------------------- oracles (float64) and magnitudes


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(GELU_K * (x + 0.044715 * x ** 3)))


def _gelu_tanh_terms(x):
    """|0.5 x| + |0.5 x tanh(u)|: 1 + tanh(u) cancels for negative x."""
    return (0.5 * x).abs() * (1 + torch.tanh(GELU_K * (x + 0.044715 * x ** 3)).abs())


def _gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _gelu_erf_terms(x):
    return (0.5 * x).abs() * (1 + torch.erf(x / math.sqrt(2)).abs())


def _sigmoid(x):
    return 1 / (1 + torch.exp(-x))


def _softplus(x):
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))


def _quick_gelu(x):
    return x * _sigmoid(QUICK_GELU * x)


def _quick_gelu_terms(x):
    """|exact| x (1 + |z| (1 - sigmoid(z))), z = 1.702 x: the rounding of z (and of 1.702 in fp32) moves
    sigmoid(z) by its condition number |z| (1 - sigmoid(z)) times that relative error."""
    z = QUICK_GELU * x
    return _quick_gelu(x).abs() * (1 + z.abs() * (1 - _sigmoid(z)))


def _exp_sub(a, b):
    return torch.exp(a - b)


def _exp_sub_terms(a, b):
    """exp(a - b) x (1 + |a - b|): a - b rounded in fp32 moves exp by |a - b| times its relative error."""
    return torch.exp(a - b) * (1 + (a - b).abs())


def _softcap(x, cap):
    return cap * torch.tanh(x / cap)


def _gated(act):
    return lambda a, b: act(a) * b


def _gated_terms(terms):
    return lambda a, b: terms(a) * b.abs()


# ---------------------------------------------------------------- the floors' fp32 recipes (torch functions)


def _f_softcap(x, cap):
    return cap * torch.tanh(x / cap)


def _f_quick_gelu(x):
    return x * torch.sigmoid(QUICK_GELU * x)


CORPUS: tuple[CorpusOp, ...] = (
    # one input: activations.cu
    CorpusOp("gelu_tanh", _gelu_tanh, lambda x: F.gelu(x, approximate="tanh"), _normal(3.0), ("gelu_tanh",),
             SOURCES[0], _gelu_tanh_terms),
    CorpusOp("gelu_erf", _gelu_erf, F.gelu, _normal(3.0), ("gelu_erf",), SOURCES[0], _gelu_erf_terms),
    CorpusOp("sigmoid", _sigmoid, torch.sigmoid, _normal(4.0), ("sigmoid", "sigmoid_fast"), SOURCES[0]),
    CorpusOp("silu", lambda x: x * _sigmoid(x), F.silu, _normal(4.0), ("silu", "silu_fast"), SOURCES[0]),
    CorpusOp("softplus", _softplus, F.softplus, _normal(6.0), ("softplus",), SOURCES[0]),
    CorpusOp("mish", lambda x: x * torch.tanh(_softplus(x)), F.mish, _normal(4.0), ("mish",), SOURCES[0]),
    CorpusOp("quick_gelu", _quick_gelu, _f_quick_gelu, _normal(4.0), ("quick_gelu",), SOURCES[0],
             _quick_gelu_terms),
    CorpusOp("elu", lambda x: torch.where(x > 0, x, torch.expm1(x)), F.elu, _normal(3.0), ("elu",), SOURCES[0]),
    CorpusOp("log_sigmoid", lambda x: -_softplus(-x), F.logsigmoid, _normal(6.0), ("log_sigmoid",), SOURCES[0]),
    CorpusOp("tanh", torch.tanh, torch.tanh, _normal(2.0), ("tanh",), SOURCES[0]),
    CorpusOp("erf", torch.erf, torch.erf, _normal(1.5), ("erf",), SOURCES[0]),
    CorpusOp("exp", torch.exp, torch.exp, _normal(3.0), ("exp",), SOURCES[0]),
    CorpusOp("log1p", torch.log1p, torch.log1p, _uniform(-0.95, 8.0), ("log1p",), SOURCES[0]),
    CorpusOp("rsqrt", torch.rsqrt, torch.rsqrt, _lognormal(3.0), ("rsqrt",), SOURCES[0]),
    CorpusOp("softcap", _softcap, _f_softcap, _with(_normal(40.0), SOFTCAP), ("softcap",), SOURCES[0]),
    # two inputs: gated.cu
    CorpusOp("tanh_mul", _gated(torch.tanh), _gated(torch.tanh), _pair(_normal(2.0), _normal(1.0)), ("tanh_mul",),
             SOURCES[1]),
    CorpusOp("silu_mul", _gated(lambda a: a * _sigmoid(a)), _gated(F.silu), _pair(_normal(4.0), _normal(1.0)),
             ("silu_mul", "silu_mul_fast"), SOURCES[1]),
    CorpusOp("gelu_tanh_mul", _gated(_gelu_tanh), _gated(lambda a: F.gelu(a, approximate="tanh")),
             _pair(_normal(3.0), _normal(1.0)), ("gelu_tanh_mul",), SOURCES[1], _gated_terms(_gelu_tanh_terms)),
    CorpusOp("gelu_erf_mul", _gated(_gelu_erf), _gated(F.gelu), _pair(_normal(3.0), _normal(1.0)),
             ("gelu_erf_mul",), SOURCES[1], _gated_terms(_gelu_erf_terms)),
    CorpusOp("sigmoid_gate", lambda a, b: a * _sigmoid(b), lambda a, b: a * torch.sigmoid(b),
             _pair(_normal(1.0), _normal(4.0)), ("sigmoid_gate",), SOURCES[1]),
    CorpusOp("exp_sub", _exp_sub, lambda a, b: torch.exp(a - b), _pair(_normal(2.0), _normal(2.0)),
             ("exp_sub", "exp_sub_fast"), SOURCES[1], _exp_sub_terms),
    CorpusOp("rsqrt_mul", lambda a, b: a * torch.rsqrt(b), lambda a, b: a * torch.rsqrt(b),
             _pair(_normal(1.0), _lognormal(2.0)), ("rsqrt_mul",), SOURCES[1]),
    CorpusOp("softplus_mul", _gated(_softplus), _gated(F.softplus), _pair(_normal(6.0), _normal(1.0)),
             ("softplus_mul",), SOURCES[1]),
)


# ---------------------------------------------------------------- declaring an op and its rows


def _reference(c: CorpusOp) -> Reference:
    def make_inputs(shape, dtype, device, gen):
        return tuple(a.to(device=device, dtype=dtype) if isinstance(a, torch.Tensor) else a
                     for a in c.law(tuple(shape), gen))

    def call(fn, *args):
        """Through a poisoned ``out=`` (verification.defects.output_like): an unwritten element shows."""
        out = output_like(args[0])
        fn(*args, out=out)
        return out

    magnitude = None
    if c.magnitude is not None:
        magnitude = lambda *args: c.magnitude(*args)  # noqa: E731  (float64 args, as verify passes them)
    return Reference(make_inputs=make_inputs, oracle=lambda *args: c.oracle(*args), call=call, magnitude=magnitude)


def _native(c: CorpusOp) -> Callable[..., torch.Tensor]:
    def native(*args, out: torch.Tensor | None = None) -> torch.Tensor:
        """The floor: torch's function on the fp32 upcast, rounded once to the input's dtype."""
        first = args[0]
        result = c.floor(*(a.float() if isinstance(a, torch.Tensor) else a for a in args)).to(first.dtype)
        return result if out is None else out.copy_(result)

    native.__name__ = c.op
    return native


def _bench(c: CorpusOp) -> Callable[[int, torch.dtype, torch.device], CaseArgs]:
    def bench(numel, dtype, device):
        args = _reference(c).make_inputs((numel,), dtype, device, torch.Generator().manual_seed(0))
        n_tensors = sum(isinstance(a, torch.Tensor) for a in args)
        return CaseArgs(args, bytes_moved=(n_tensors + 1) * numel * torch.empty((), dtype=dtype).element_size())

    return bench


def row_dtypes(fn: str) -> tuple[str, ...]:
    """The dtypes launcher ``fn``'s row declares."""
    return ("bf16", "fp16") if fn in HALF_ONLY else ("bf16", "fp16", "fp32")


def declare(c: CorpusOp) -> list[str]:
    """Declare ``c``'s op with its native floor and register its CUDA rows (golden unverified); the row names,
    the floor first."""
    declare_op(c.op, reference=_reference(c), bench=_bench(c), native=_native(c),
               doc=f"{c.name}: the false-rejection corpus", replace=True)
    rows = [f"native/{c.op}"]
    for fn in c.launchers:
        name = f"jit/corpus_{fn}"
        spec.register(KernelSpec(name=name, op=c.op, backend="jit", target=JitRow(c.source, fn),
                                 available="rapid_llm.kernels.toolchain.jit:available",
                                 dtypes=row_dtypes(fn), devices=("cuda",),
                                 golden=GoldenRecord(baseline=f"native/{c.op}")), replace=True)
        rows.append(name)
    return rows
