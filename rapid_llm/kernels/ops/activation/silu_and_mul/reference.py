"""silu_and_mul's float64 reference (inputs, oracle, edge cases) and its benchmark case.

x is [..., 2I]; the op returns silu(x[..., :I]) * x[..., I:], shaped [..., I].
The sizes catch the usual kernel bugs (one token, many short rows, a large
vector-aligned row); the edge cases catch the rest: a row that is not a
multiple of the 16-byte vector width, a view that starts mid-vector, the
benchmark's row at T=1, leading dims, special values in both halves, and
row-strided views (``x = randn(T, 2*2I)[:, :2I]``, how vLLM tests it).
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.verification.defects import output_like
from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference

#: The benchmark's intermediate size (Llama-3-8B / Mixtral MLP): x is [T, 2 * 14336].
BENCH_INNER = 14336
BENCH_TOKEN_NUMEL = 2 * BENCH_INNER
#: Reference rows by size: a short odd row for small inputs (many tokens, no vector path),
#: a 16-byte-aligned row for large ones (the vector path, its chunks and its tails).
SMALL_INNER = 13
MEDIUM_INNER = 1024
LARGE_NUMEL = 1 << 20


def _gate_up(tokens: int, inner: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """[tokens, 2 * inner]: the gate half spread over silu's bend and both tails, the up half around 1."""
    gate = torch.randn((tokens, inner), generator=gen, dtype=torch.float32) * 4
    up = torch.randn((tokens, inner), generator=gen, dtype=torch.float32) * 2
    return torch.cat([gate, up], dim=-1).to(dtype=dtype, device=device)


def _inner_for(numel: int) -> int:
    if numel >= LARGE_NUMEL:
        return BENCH_INNER
    return MEDIUM_INNER if numel >= 2 * MEDIUM_INNER * 8 else SMALL_INNER


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> tuple:
    """About ``numel`` elements as [T, 2I]; numel 0 gives [0, 2I] (an empty result [0, I])."""
    (numel,) = shape
    inner = _inner_for(numel)
    tokens = 0 if numel == 0 else max(1, numel // (2 * inner))
    if numel == 1:
        inner = 1  # a single output element: x is [1, 2]
    return (_gate_up(tokens, inner, dtype, device, gen),)


def _specials(dtype: torch.dtype) -> list[float]:
    info = torch.finfo(dtype)
    return [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), info.max, -info.max,
            info.tiny, -info.tiny, info.tiny * info.eps, 20.0, -20.0, 88.5, -88.5, 100.0, -100.0, 1e-3, -1e-3]


def _special_rows(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Three tokens: special gates times 1.5, 2.0 times special ups, and each special times itself.

    Not a subnormal gate times a huge up: silu(a) ~ a / 2 underflows there in fp32 (in every row,
    torch's too), and b ~ 1e38 would magnify that underflow far past the output's tiny.
    """
    s = torch.tensor(_specials(dtype), dtype=torch.float64)
    rows = [torch.cat([s, torch.full_like(s, 1.5)]),
            torch.cat([torch.full_like(s, 2.0), s]),
            torch.cat([s, s])]
    return torch.stack(rows).to(dtype=dtype, device=device)


def _row_strided(x: torch.Tensor, width: int, gen: torch.Generator) -> torch.Tensor:
    """``x`` as the first ``x.shape[-1]`` columns of a [..., width] buffer of other values: one row stride."""
    buf = torch.randn((*x.shape[:-1], width), generator=gen, dtype=torch.float32).to(dtype=x.dtype, device=x.device)
    view = buf[..., :x.shape[-1]]
    view.copy_(x)
    return view


def edge_cases(dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list[tuple[str, tuple]]:
    unaligned = _gate_up(1, 2 * 256 + 1, dtype, device, gen).flatten()[1:1 + 2 * 512].view(2, 2 * 256)
    return [
        ("T=1, I=4097 (a row off the vector width)", (_gate_up(1, 4097, dtype, device, gen),)),
        ("T=3, I=1001", (_gate_up(3, 1001, dtype, device, gen),)),
        ("T=2, I=1028 (fp32 vectors, not 16-bit ones)", (_gate_up(2, 1028, dtype, device, gen),)),
        ("T=1, I=14336 (the benchmark row)", (_gate_up(1, BENCH_INNER, dtype, device, gen),)),
        ("unaligned start (storage offset 1), [2, 512]", (unaligned,)),
        ("leading dims [2, 3, 2*136]", (_gate_up(6, 136, dtype, device, gen).view(2, 3, 272),)),
        ("special values", (_special_rows(dtype, device),)),
        ("T=3, I=1024, row stride 4I (x = randn(T, 2*2I)[:, :2I], vLLM's strided case)",
         (_row_strided(_gate_up(3, 1024, dtype, device, gen), 4 * 1024, gen),)),
        ("T=4, I=1024, row stride 2*2I + 1 (rows off the 16-byte grid)",
         (_row_strided(_gate_up(4, 1024, dtype, device, gen), 2 * 1024 + 1, gen),)),
        ("leading dims [2, 3, 2*136], rows of [2, 3, 4*136]",
         (_row_strided(_gate_up(6, 136, dtype, device, gen).view(2, 3, 272), 4 * 136, gen),)),
    ]


def oracle(x: torch.Tensor) -> torch.Tensor:
    """silu(a) * b = a / (1 + exp(-a)) * b, in float64 (an infinite gate follows IEEE: -inf gives NaN)."""
    inner = x.shape[-1] // 2
    a, b = x[..., :inner].to(torch.float64), x[..., inner:].to(torch.float64)
    return a / (1 + torch.exp(-a)) * b


def call(fn, x: torch.Tensor) -> torch.Tensor:
    """Call through a poisoned ``out=`` (rapid_llm.kernels.verification.defects.output_like): an unwritten element shows."""
    out = output_like(x, (*x.shape[:-1], x.shape[-1] // 2))
    fn(x, out=out)
    return out


def bench_case(numel: int, dtype: torch.dtype, device: torch.device) -> CaseArgs:
    """x [T, 2 * 14336] with T = max(1, numel // 28672); an ideal kernel reads x once and writes out once."""
    tokens = max(1, numel // BENCH_TOKEN_NUMEL)
    x = torch.empty((tokens, BENCH_TOKEN_NUMEL), dtype=dtype, device=device).uniform_(-4, 4)
    out = torch.empty((tokens, BENCH_INNER), dtype=dtype, device=device)
    return CaseArgs((x,), {"out": out}, bytes_moved=3 * tokens * BENCH_INNER * x.element_size())


REFERENCE = Reference(make_inputs=make_inputs, oracle=oracle, call=call, edge_cases=edge_cases)
