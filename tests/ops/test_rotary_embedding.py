"""rotary_embedding: the numerics contract, the layouts, the parameters and the errors of each row.

tests/contract/test_rows.py verifies every row on the declared reference; this file checks what is
particular to rope: the exact recipe (fp32 products rounded before the sum), in-place semantics
(elements past rot_dim untouched, None returned), GQA / MQA head counts, neox vs GPT-J pairing, 2-D
and 3-D q/k, strided q/k, int32 positions, out-of-range positions, and the errors. Triton runs on CPU
in its interpreter (kept to a few small cases: it costs about 20 ms a token there); the CUDA row's
tests are in tests/gpu/ops/test_rotary_embedding.py.
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification.comparison import to64

# Discover the shipped ops before importing a group's module: a group first imported outside
# discovery declares its op outside the record that every test's fresh registry is built from.
spec.all_ops()

from rapid_llm.kernels.ops.rope.rotary_embedding import reference as R  # noqa: E402
from rapid_llm.kernels.ops.rope.rotary_embedding.native import rotary_embedding as native  # noqa: E402
from tests.reference import assert_close_to_ref, oracle  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PYTHON_ROWS = ["native/rotary_embedding", "triton/rotary_embedding"]


def _row(name: str, device: torch.device):
    row = spec.get_row(name)
    avail = row.probe(device)
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")
    return row.load()


def _case(tokens=5, head_size=64, hq=4, hk=2, rot_dim=None, neox=True, dtype=torch.float32, device="cpu",
          seed=0, **kw) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    return R.make_case(tokens, head_size, hq, hk, rot_dim or head_size, neox, dtype, torch.device(device), gen, **kw)


def _recipe(positions, q, k, head_size, cache, is_neox) -> torch.Tensor:
    """The contract written out pair by pair: fp32 products, each rounded, then the sum, rounded once."""
    out = []
    half = cache.shape[1] // 2
    for t in (q.clone(), k.clone()):
        heads = t.reshape(t.shape[0], -1, head_size)
        for i in range(half):
            xi, yi = (i, i + half) if is_neox else (2 * i, 2 * i + 1)
            c = cache[positions.long(), i].float()[:, None]
            s = cache[positions.long(), half + i].float()[:, None]
            x, y = heads[..., xi].float(), heads[..., yi].float()
            x_new, y_new = (x * c) - (y * s), (y * c) + (x * s)
            heads[..., xi], heads[..., yi] = x_new.to(t.dtype), y_new.to(t.dtype)
        out.append(heads.flatten())
    return torch.cat(out)


def _check_against_oracle(got: torch.Tensor, args: tuple) -> None:
    """Within 2 eps of |x cos| + |y sin| of the float64 answer, element by element."""
    args64 = to64(args)
    assert_close_to_ref(got, oracle("rotary_embedding")(*args64), "rotary_embedding", ulps=2,
                        magnitude=R.magnitude(*args64))


# ------------------------------------------------------------------ native: the contract, everywhere


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot_dim", [64, 32, 2])
def test_native_is_the_recipe_bit_for_bit(dtype, neox, rot_dim):
    args = _case(tokens=6, rot_dim=rot_dim, neox=neox, dtype=dtype, seed=rot_dim)
    got = R.call(native, *args)
    assert torch.equal(got, _recipe(*args))
    _check_against_oracle(got, args)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [0, 1, 4097 // 256])
def test_native_matches_the_oracle_at_reference_sizes(dtype, tokens):
    args = _case(tokens=tokens, head_size=128, hq=8, hk=1, dtype=dtype, cache_dtype=dtype)
    got = R.call(native, *args)
    assert got.dtype == dtype and got.numel() == tokens * 9 * 128
    _check_against_oracle(got, args)


def test_elements_past_rot_dim_are_untouched_and_none_is_returned():
    positions, q, k, hs, cache, neox = _case(tokens=4, head_size=128, rot_dim=32, dtype=torch.bfloat16)
    q0, k0 = q.clone(), k.clone()
    assert native(positions, q, k, hs, cache, neox) is None
    for new, old in ((q, q0), (k, k0)):
        new, old = new.view(4, -1, 128), old.view(4, -1, 128)
        assert torch.equal(new[..., 32:], old[..., 32:])
        assert not torch.equal(new[..., :32], old[..., :32])


def test_position_zero_is_the_identity():
    positions, q, k, hs, cache, neox = _case(tokens=3, neox=False, positions=torch.zeros(3, dtype=torch.int64))
    q0, k0 = q.clone(), k.clone()
    native(positions, q, k, hs, cache, neox)
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_gptj_and_neox_pair_different_elements():
    args = _case(tokens=2, neox=True, seed=3)
    neox_out = R.call(native, *args)
    gptj_out = R.call(native, *args[:5], False)
    assert not torch.equal(neox_out, gptj_out)
    _check_against_oracle(gptj_out, (*args[:5], False))


def test_3d_and_2d_q_k_give_the_same_result():
    positions, q, k, hs, cache, neox = _case(tokens=5, hq=3, hk=1)
    flat = R.call(native, positions, q, k, hs, cache, neox)
    heads = R.call(native, positions, q.view(5, 3, hs), k.view(5, 1, hs), hs, cache, neox)
    assert torch.equal(flat, heads)


def test_strided_q_k_from_a_fused_qkv_are_rotated_in_place():
    positions, _, _, hs, cache, neox = _case(tokens=4, head_size=64)
    qkv = torch.randn(4, (4 + 2 * 2) * 64)
    q, k, v = qkv[:, :256], qkv[:, 256:384], qkv[:, 384:]
    want = R.call(native, positions, q.contiguous(), k.contiguous(), hs, cache, neox)
    v0 = v.clone()
    native(positions, q, k, hs, cache, neox)
    assert torch.equal(torch.cat([q.flatten(), k.flatten()]), want)
    assert torch.equal(v, v0)


def test_int32_positions_equal_int64():
    args = _case(tokens=5)
    as_int32 = (args[0].to(torch.int32), *args[1:])
    assert torch.equal(R.call(native, *args), R.call(native, *as_int32))


def test_native_out_of_range_position_raises_on_cpu():
    positions, q, k, hs, cache, neox = _case(tokens=2)
    with pytest.raises(IndexError):
        native(torch.tensor([0, cache.shape[0]]), q, k, hs, cache, neox)


# ------------------------------------------------------------------ errors, every Python row


def _bad_inputs() -> list[tuple[str, tuple, str]]:
    positions, q, k, hs, cache, neox = _case(tokens=3, head_size=64, hq=2, hk=1)
    return [
        ("head_size does not divide q", (positions, q, k, 48, cache[:, :32], neox), "head_size 48 does not divide q"),
        ("3-D q with another head_size", (positions, q.view(3, 4, 32), k, hs, cache, neox), "does not match q's last dim"),
        ("odd rot_dim", (positions, q, k, hs, cache[:, :31], neox), "positive even number, got 31"),
        ("rot_dim > head_size", (positions, q, k, 32, torch.ones(8, 64), neox), "rot_dim 64 exceeds head_size 32"),
        ("float positions", (positions.float(), q, k, hs, cache, neox), "positions must be an int64 or int32"),
        ("q/k dtype mismatch", (positions, q, k.half(), hs, cache, neox), "q and k dtypes differ"),
        ("T mismatch", (positions[:2], q, k, hs, cache, neox), "positions has 2 tokens but q has 3"),
        ("k T mismatch", (positions, q, k[:2], hs, cache, neox), "positions has 3 tokens but k has 2"),
        ("fp16 cache for fp32 q", (positions, q, k, hs, cache.half(), neox), "cos_sin_cache must be fp32 or q's dtype"),
        ("1-D cache", (positions, q, k, hs, cache.flatten(), neox), r"cos_sin_cache must be \[max_pos, rot_dim\]"),
        ("fp64 q", (positions, q.double(), k.double(), hs, cache.double(), neox), "is not supported"),
        ("2-D positions", (positions[:, None], q, k, hs, cache, neox), "positions must be 1-D"),
        ("1-D q", (positions, q.flatten(), k, hs, cache, neox), "q must be"),
    ]


@pytest.mark.parametrize("name", PYTHON_ROWS)
@pytest.mark.parametrize("label, args, match", _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_inputs_raise_value_error_naming_the_op(name, label, args, match):
    fn = _row(name, torch.device("cpu"))
    with pytest.raises(ValueError, match=f"^rotary_embedding: .*{match}"):
        fn(*args)


# ------------------------------------------------------------------ triton: on CPU, in its interpreter


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("neox, rot_dim, heads_3d", [(True, 64, False), (False, 32, True)])
def test_triton_equals_native_bit_for_bit(dtype, neox, rot_dim, heads_3d):
    """fp32 and fp16 only on CPU: the interpreter truncates to bf16 (on a GPU bf16 is checked too)."""
    fn = _row("triton/rotary_embedding", torch.device("cpu"))
    args = _case(tokens=3, head_size=64, hq=3, hk=1, rot_dim=rot_dim, neox=neox, dtype=dtype, heads_3d=heads_3d)
    assert torch.equal(R.call(fn, *args), R.call(native, *args))


def test_triton_takes_strided_q_k_and_leaves_what_is_between_them():
    fn = _row("triton/rotary_embedding", torch.device("cpu"))
    positions, _, _, hs, cache, neox = _case(tokens=2, head_size=64)
    qkv = torch.randn(2, 8 * 64)
    q, k, v = qkv[:, :256], qkv[:, 256:384], qkv[:, 384:]
    want = R.call(native, positions, q.contiguous(), k.contiguous(), hs, cache, neox)
    v0 = v.clone()
    assert fn(positions, q, k, hs, cache, neox) is None
    assert torch.equal(torch.cat([q.flatten(), k.flatten()]), want) and torch.equal(v, v0)


def test_triton_leaves_a_token_with_an_out_of_range_position_unchanged():
    fn = _row("triton/rotary_embedding", torch.device("cpu"))
    positions, q, k, hs, cache, neox = _case(tokens=3, head_size=32, hq=1, hk=1)
    positions = torch.tensor([5, cache.shape[0], -1])
    q0, k0 = q.clone(), k.clone()
    fn(positions, q, k, hs, cache, neox)
    assert not torch.equal(q[0], q0[0])
    assert torch.equal(q[1:], q0[1:]) and torch.equal(k[1:], k0[1:])


# ------------------------------------------------------------------ declaration, dispatch, bench case


def test_dispatch_reads_the_query_and_runs_in_place():
    positions, q, k, hs, cache, neox = _case(tokens=4, dtype=torch.bfloat16)
    want = R.call(native, positions, q, k, hs, cache, neox)
    assert K.rotary_embedding(positions, q, k, hs, cache, neox) is None
    assert torch.equal(torch.cat([q.flatten(), k.flatten()]), want)
    assert spec.get_decl("rotary_embedding").dispatch_arg == 1


@pytest.mark.parametrize("numel, tokens", [(1, 1), (4096, 1), (4096 * 300 + 5, 300)])
def test_bench_case_maps_numel_to_tokens_and_counts_bytes(numel, tokens):
    case = R.bench_case(numel, torch.bfloat16, torch.device("cpu"))
    positions, q, k, hs, cache, neox = case.args
    assert q.shape == (tokens, 32 * 128) and k.shape == (tokens, 8 * 128) and neox and hs == 128
    assert torch.equal(positions, torch.arange(tokens))
    assert case.bytes_moved == 2 * (q.numel() + k.numel()) * 2 + tokens * 8 + tokens * 128 * 4
    assert spec.get_decl("rotary_embedding").token_numel == 32 * 128


@pytest.mark.parametrize("n, tokens", [(0, 0), (1, 1), (4097, 16), (65536, 32), (1 << 24, 4096)])
def test_reference_sizes_map_to_tokens(n, tokens):
    positions, q, k, hs, cache, neox = R.make_inputs((n,), torch.float32, torch.device("meta") if n > 65536 else
                                                     torch.device("cpu"), torch.Generator().manual_seed(0))
    assert positions.shape == (tokens,) and q.shape[0] == tokens and k.shape[0] == tokens
    assert q.shape[1] // hs != k.shape[1] // hs  # grouped-query attention: fewer k heads
