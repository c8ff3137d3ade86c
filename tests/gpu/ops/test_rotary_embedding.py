"""rotary_embedding's CUDA row on a GPU: bit for bit the native row over vector and scalar paths, partial rotary and
MQA, strided, unaligned and 3-D layouts, the layouts that leave the lean decode kernel, int32 and out-of-range
positions, the bad inputs raising without a CUDA error left behind, and CUDA-graph capture. The CPU checks, and the
helpers these use, are in tests/ops/test_rotary_embedding.py.
"""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.registry import spec
# R and native through the CPU file: it discovers the shipped ops before it imports the group (see there).
from tests.ops.test_rotary_embedding import DTYPES, R, _bad_inputs, _case, native

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def jit_rope():
    from rapid_llm.kernels.toolchain import jit

    avail = jit.available()
    if not avail:
        pytest.skip(f"JIT toolchain unavailable: {avail.reason}")
    row = spec.get_row("jit/rotary_embedding")
    row.target.launcher()
    return row.load()


CUDA_SHAPES = [  # (tokens, head_size, hq, hk, rot_dim, neox): vector and scalar paths, partial rotary, MQA
    (1, 128, 32, 8, 128, True), (257, 128, 32, 8, 128, False), (33, 64, 4, 1, 32, True), (33, 128, 8, 2, 64, False),
    (17, 80, 3, 1, 40, True), (17, 80, 3, 1, 40, False), (5, 16, 2, 1, 2, True), (4096, 128, 32, 8, 128, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=[str(s) for s in CUDA_SHAPES])
@pytest.mark.parametrize("cache_fp32", [True, False])
def test_jit_equals_native_bit_for_bit(jit_rope, dtype, shape, cache_fp32):
    tokens, hs, hq, hk, rot, neox = shape
    args = _case(tokens, hs, hq, hk, rot, neox, dtype, "cuda", cache_dtype=torch.float32 if cache_fp32 else dtype)
    assert torch.equal(R.call(jit_rope, *args), R.call(native, *args))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("neox", [True, False])
def test_jit_takes_strided_unaligned_and_3d_layouts(jit_rope, dtype, neox):
    positions, _, _, hs, cache, _ = _case(tokens=9, head_size=128, hq=4, hk=2, device="cuda", dtype=dtype)
    qkv = torch.randn(9, 8 * 128, device="cuda").to(dtype)
    layouts = {
        "fused qkv slices": (qkv[:, :512], qkv[:, 512:768]),
        "3-D": (qkv[:, :512].reshape(9, 4, 128), qkv[:, 512:768].reshape(9, 2, 128)),
        "unaligned": (torch.randn(9 * 512 + 1, device="cuda").to(dtype)[1:].view(9, 512),
                      torch.randn(9 * 256 + 1, device="cuda").to(dtype)[1:].view(9, 256)),
        "element stride 2": (torch.randn(9, 1024, device="cuda").to(dtype)[:, ::2],
                             torch.randn(9, 512, device="cuda").to(dtype)[:, ::2]),
    }
    for label, (q, k) in layouts.items():
        want = R.call(native, positions, q, k, hs, cache, neox)
        assert torch.equal(R.call(jit_rope, positions, q, k, hs, cache, neox), want), label


@pytest.mark.parametrize("cache_fp32", [True, False])
@pytest.mark.parametrize("tokens", [9, 3000])
def test_jit_layouts_the_lean_decode_kernel_leaves(jit_rope, tokens, cache_fp32):
    """The one-head decode grid runs a lean kernel for contiguous positions and cache rows with q's and k's heads
    alike apart, and the general decode kernel for the rest: each layout that leaves the lean kernel, at a decode
    size and past it."""
    dtype = torch.bfloat16
    positions, q, k, hs, cache, neox = _case(tokens=tokens, head_size=128, hq=4, hk=2, device="cuda", dtype=dtype,
                                             cache_dtype=torch.float32 if cache_fp32 else dtype)
    padded = torch.zeros(cache.shape[0], cache.shape[1] + 8, device="cuda", dtype=cache.dtype)  # 16-byte runs kept
    padded[:, : cache.shape[1]] = cache
    spread = torch.zeros(2 * tokens, device="cuda", dtype=positions.dtype)
    spread[::2] = positions
    q_far = torch.randn(tokens, 4, 256, device="cuda").to(dtype)[:, :, :128]  # q's heads 256 apart, k's 128
    cases = {
        "strided positions": (spread[::2], q, k, hs, cache, neox),
        "padded cache rows": (positions, q, k, hs, padded[:, : cache.shape[1]], neox),
        "q and k heads apart differently": (positions, q_far, k.view(tokens, 2, 128), hs, cache, neox),
    }
    for label, args in cases.items():
        assert torch.equal(R.call(jit_rope, *args), R.call(native, *args)), label


def test_jit_int32_positions_and_out_of_range_tokens(jit_rope):
    positions, q, k, hs, cache, neox = _case(tokens=4, device="cuda", dtype=torch.bfloat16)
    as_int32 = positions.to(torch.int32)
    assert torch.equal(R.call(jit_rope, as_int32, q, k, hs, cache, neox), R.call(native, positions, q, k, hs, cache, neox))
    bad = torch.tensor([1, -1, cache.shape[0], 2], device="cuda")
    q0, k0 = q.clone(), k.clone()
    jit_rope(bad, q, k, hs, cache, neox)
    torch.cuda.synchronize()
    assert torch.equal(q[1:3], q0[1:3]) and torch.equal(k[1:3], k0[1:3]) and not torch.equal(q[0], q0[0])


@pytest.mark.parametrize("hq, hk", [(32, 8), (4, 2)])
def test_jit_leaves_out_of_range_tokens_past_the_decode_sizes(jit_rope, hq, hk):
    """The wide grid (three heads a thread past the decode sizes) leaves a token whose position is outside the
    cache as it was, and rotates every other token as the native row does."""
    positions, q, k, hs, cache, neox = _case(tokens=3000, head_size=128, hq=hq, hk=hk, device="cuda",
                                             dtype=torch.bfloat16)
    bad = torch.zeros(3000, dtype=torch.bool, device="cuda")
    bad[::7] = True
    wild = positions.clone()
    wild[::14] = -1
    wild[7::14] = cache.shape[0]
    q0, k0 = q.clone(), k.clone()
    want_q, want_k = q.clone(), k.clone()
    native(positions, want_q, want_k, hs, cache, neox)
    jit_rope(wild, q, k, hs, cache, neox)
    assert torch.equal(q[bad], q0[bad]) and torch.equal(k[bad], k0[bad])
    assert torch.equal(q[~bad], want_q[~bad]) and torch.equal(k[~bad], want_k[~bad])


@pytest.mark.parametrize("label, args, match", _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_jit_bad_inputs_raise_naming_the_op(jit_rope, label, args, match):
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(ValueError, match=f"^rotary_embedding: .*{match.replace('is not supported', 'not supported')}"):
        jit_rope(*args)
    torch.cuda.synchronize()  # no sticky CUDA error was left behind


def test_jit_graph_capture_replays(jit_rope):
    positions, q, k, hs, cache, neox = _case(tokens=64, head_size=128, hq=8, hk=2, device="cuda", dtype=torch.bfloat16)
    q_in, k_in = q.clone(), k.clone()
    jit_rope(positions, q, k, hs, cache, neox)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        jit_rope(positions, q, k, hs, cache, neox)
    q.copy_(q_in)
    k.copy_(k_in)
    graph.replay()
    torch.cuda.synchronize()
    want = R.call(native, positions, q_in, k_in, hs, cache, neox)
    assert torch.equal(torch.cat([q.flatten(), k.flatten()]), want)
