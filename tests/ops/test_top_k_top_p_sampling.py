"""top_k_top_p_sampling: the rows' shared integers, the statistical sampling mode and its defect classes, the
refusals, the custom op under torch.compile, and the CUDA row's status (on CPU: the floor and the Triton row in
the interpreter; the CUDA row compiles here and runs in tests/gpu/ops/test_top_k_top_p_sampling.py).

That every row passes verify in the sampling mode and holds its record is tests/contract/test_rows.py's. Here:
the rows draw the same ids for one seed_offset (bit for bit from probabilities) and the float64 oracle's token
for the same random number; the tie rule at the k-th token and the p boundary; the defect rows the mode must
name (tests/unit/verification/defects/sampling_defects.py); the mode's pooling and tail; the errors a bad call
gets.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import counter_rng, native
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling import reference as R
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.sampling_mode import NONDETERMINISTIC, SamplingOutput, chi_square, tail
from tests.reference import exact_distribution

OP = "top_k_top_p_sampling"
DEFECTS = "tests.unit.verification.defects.sampling_defects"
CPU_ROWS = ["native/top_k_top_p_sampling", "triton/top_k_top_p_sampling"]
SO = torch.tensor([20261206, 7])


def row(name: str):
    if name.startswith("triton/"):
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("Triton rows run on CPU tensors under TRITON_INTERPRET=1")
    return spec.get_row(name).load()


def mixed_rows(batch: int, vocab: int, dtype: torch.dtype, logits: bool, seed: int = 0) -> tuple:
    """``batch`` rows with their own k (off, 1, a cut), p (off, 0.5, 0.9) and temperature."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, vocab, generator=g) * 2.0
    if not logits:
        x = x.softmax(-1)
    k = torch.tensor([0, 1, 3, vocab, -1, 7])[torch.arange(batch) % 6].to(torch.int32)
    p = torch.tensor([1.0, 0.5, 0.9, 0.9, 0.3, 0.75])[torch.arange(batch) % 6]
    t = torch.tensor([1.0, 0.7, 1.3, 0.0, 2.0, 0.5])[torch.arange(batch) % 6] if logits else None
    return R.sampling_args(x.to(dtype), k, p, SO, t, logits)


# ------------------------------------------------------------------ the rows agree, and with the oracle


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("batch", "vocab"), [(0, 16), (1, 1), (1, 4097), (12, 33)])
def test_the_rows_draw_the_same_ids_and_the_oracles_token(batch, vocab, dtype):
    fast = dtype == torch.float32 or vocab == 4097  # every dtype at the tail; fp32 elsewhere
    if not fast:
        pytest.skip("bf16 / fp16 run at the 4097 tail only (the interpreter's time)")
    for logits in (False, True):
        args = mixed_rows(batch, vocab, dtype, logits, seed=vocab)
        ids = {name: row(name)(*args) for name in CPU_ROWS}
        floor = ids["native/top_k_top_p_sampling"]
        assert floor.shape == (batch,) and floor.dtype == torch.int64
        assert torch.equal(ids["triton/top_k_top_p_sampling"], floor)
        exact = R.oracle(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
        assert torch.equal(floor.double(), exact)  # no boundary within rounding in these rows


def test_a_draw_depends_on_the_row_seed_and_offset_only():
    args = mixed_rows(6, 50, torch.float32, True)
    ids = K.top_k_top_p_sampling(*args)
    assert torch.equal(K.top_k_top_p_sampling(*args), ids)  # the same seed and offset: the same ids
    x, k, p, so, t, logits = args
    head = K.top_k_top_p_sampling(x[:3], k[:3], p[:3], so, t[:3], logits)
    assert torch.equal(head, ids[:3])  # a row's draw does not depend on the rows after it
    other = [K.top_k_top_p_sampling(x, k, p, so + torch.tensor([0, n]), t, logits) for n in range(1, 6)]
    assert any(not torch.equal(o, ids) for o in other)  # advancing the offset draws anew


def test_the_random_numbers_are_the_stated_hash():
    bits = counter_rng.bits53(torch.tensor([3, 5]), torch.arange(4))
    key = counter_rng.mix32(torch.tensor(0) ^ counter_rng.SEED_SALT)
    for word in (3, 0, 5):
        key = counter_rng.mix32(key ^ word)
    key = counter_rng.mix32(key ^ 2)
    hi = counter_rng.mix32(key ^ counter_rng.DRAW_SALT_HI)
    want = (hi << 21) | (counter_rng.mix32(key ^ counter_rng.DRAW_SALT_LO) >> 11)
    assert int(bits[2]) == int(want) and bool((bits < 2 ** 53).all()) and bool((bits >= 0).all())


@pytest.mark.parametrize("name", CPU_ROWS)
def test_the_tie_rule_at_the_k_th_token_and_the_p_boundary(name):
    fn = row(name)
    tied = torch.tensor([[0.1, 0.3, 0.3, 0.3]] * 64)  # k = 2 among three equal: ids 1 and 2, never 3
    ids = fn(tied, torch.full((64,), 2), None, SO)
    assert set(ids.tolist()) == {1, 2}
    at_p = torch.tensor([[0.125, 0.5, 0.25, 0.125]] * 64)  # running sum before id 2 is 0.5; p = 0.75 keeps ids 1, 2
    assert set(fn(at_p, None, torch.full((64,), 0.75), SO).tolist()) == {1, 2}
    assert set(fn(at_p, None, torch.full((64,), 0.5), SO).tolist()) == {1}  # 0.5 < 0.5 is false: id 1 alone
    greedy = torch.tensor([[0.0, 2.0, 2.0, 1.0]] * 4)  # temperature 0: the first of the equal largest logits
    assert fn(greedy, None, None, SO, torch.zeros(4), True).tolist() == [1] * 4


def test_the_rule_is_stated_where_the_floor_is():
    doc = " ".join(native.__doc__.split())
    assert "w descending, ties to the lower token id" in doc and "top-k first, then top-p" in doc
    assert "not a torch.Generator" in doc


# ------------------------------------------------------------------ the sampling mode and its defects


def defect_row(fn: str) -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op=OP, backend="external", target=f"{DEFECTS}:{fn}", dtypes=("fp32",),
                             devices=("cpu",)), replace=True)
    return name


@pytest.mark.parametrize(("fn", "named"), [
    ("sampling_nucleus_off_by_one", "nucleus_off_by_one"),
    ("sampling_p_before_k", "p_before_k"),
    ("sampling_ignores_temperature", "temperature_ignored"),
    ("sampling_fixed", None),
])
def test_the_sampling_mode_names_each_defect(fn, named):
    name = defect_row(fn)
    try:
        # The edge cases name each defect; the sizes' cases add time, not classes (one size: n = 1).
        report = verify(name, dtypes=["fp32"], sizes=[1], device="cpu", record=False)
    finally:
        spec.unregister(name)
    text = str(report)
    assert "rule: sampling:" in text
    if named is None:  # the honest twin
        assert report.passed and not report.defects, text
        return
    assert not report.passed, text
    assert {d.kind for d in report.defects} == {named}, text  # the verdict names the class, and nothing else


def _judge(draws: list[int], args: tuple) -> tuple[dict, list]:
    mode = R.REFERENCE.compare
    got = torch.tensor(draws, dtype=torch.float64)
    exact = R.oracle(*args)
    counts: dict = {}
    errs = mode.errors(got, exact, args, counts)
    counts["bad"] = int((errs.diff > errs.allowed).sum())
    return counts, [kind for kind, _ in mode.defects(got, exact, args)]


def test_the_mode_tells_outside_draws_a_wrong_distribution_and_a_changed_draw():
    x = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).double().repeat(400, 1)
    args = R.sampling_args(x, torch.full((400,), 2), None, SO)
    right = R.oracle(*args).long().tolist()
    counts, kinds = _judge(right, args)
    assert counts["bad"] == 0 and kinds == [] and counts["sampled_outside_set"] == 0
    outside = right[:-1] + [2]  # token 2 is third: outside k = 2
    counts, kinds = _judge(outside, args)
    assert counts["sampled_outside_set"] == 1 and counts["bad"] == 1 and kinds == ["sampled_outside_set"]
    counts, kinds = _judge([0] * 400, args)  # always the first: the wrong distribution, inside the set
    assert counts["cases failing"] == 1 and kinds == ["wrong_distribution"] and counts["bad"] > 0
    counts, kinds = _judge(right[:-1] + [7], args)  # no such token
    assert kinds == ["sampled_outside_set"]
    changed = [float(i) for i in right]
    changed[3] = NONDETERMINISTIC
    counts, kinds = _judge(changed, args)
    assert counts["nondeterministic"] == 1 and kinds == ["nondeterministic"]


def test_a_near_tie_at_the_k_th_token_is_allowed_either_way():
    near = torch.tensor([[0.4, 0.3, 0.3 * (1 - 1e-7), 0.0]]).double().repeat(8, 1)
    args = R.sampling_args(near, torch.full((8,), 2), None, SO)
    counts, kinds = _judge([0, 1, 2, 0, 1, 2, 0, 2], args)  # id 2 is within fp32 rounding of id 1
    assert counts["sampled_outside_set"] == 0 and "sampled_outside_set" not in kinds


def test_chi_square_pools_small_bins_and_its_tail_is_the_chi_square_tail():
    probs = torch.tensor([0.5, 0.3, 0.17, 0.02, 0.01], dtype=torch.float64)
    counts = torch.tensor([50.0, 30.0, 17.0, 2.0, 1.0])
    assert chi_square(counts, probs, 100, 5.0) == (0.0, 2)  # 2 + 1 expected pooled into the 17's bin
    assert chi_square(counts + torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0]), probs, 100, 5.0)[1] == 2
    assert abs(tail(3.841458820694124, 1) - 0.05) < 1e-9 and tail(0.0, 0) == 1.0


def test_the_report_names_the_mode_and_the_floor_passes():
    report = verify("native/top_k_top_p_sampling", dtypes=["fp32"], device="cpu", record=False)
    assert report.passed, str(report)
    assert report["fp32"].rule == SamplingOutput(view=R.view).rule
    assert "sampled_outside_set 0, nondeterministic 0" in str(report)


def test_the_oracle_distribution_is_renormalised_over_the_kept_set():
    x = torch.tensor([[0.4, 0.3, 0.1, 0.1, 0.1]], dtype=torch.float64)
    dist = exact_distribution(OP, R.sampling_args(x, torch.tensor([3]), torch.tensor([0.75]), SO))
    assert torch.allclose(dist, torch.tensor([[0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0, 0.0]], dtype=torch.float64))


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(("call", "words"), [
    (lambda x: K.top_k_top_p_sampling(x.int(), None, None, SO), "x must be bf16, fp16, fp32"),
    (lambda x: K.top_k_top_p_sampling(x[0], None, None, SO), "x must be [batch, vocab]"),
    (lambda x: K.top_k_top_p_sampling(x[:, :0], None, None, SO), "x must have 1 to 2097152 tokens per row"),
    (lambda x: K.top_k_top_p_sampling(x, torch.zeros(4), None, SO), "top_k must be [4] int32 or int64"),
    (lambda x: K.top_k_top_p_sampling(x, torch.zeros(3, dtype=torch.int32), None, SO), "top_k must be [4]"),
    (lambda x: K.top_k_top_p_sampling(x, None, torch.zeros(4, dtype=torch.float64), SO), "top_p must be [4] fp32"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, torch.tensor([1, 2, 3])), "seed_offset must be [2] int64"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, 5), "seed_offset must be a tensor"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, SO, torch.ones(4)), "temperature applies to logits only"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, SO, torch.ones(2), True), "temperature must be [4] fp32"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, SO, None, 1), "from_logits must be a bool"),
    (lambda x: K.top_k_top_p_sampling(x, None, None, SO, out=torch.zeros(4, dtype=torch.int32)),
     "out must be [4] int64"),
])
def test_bad_calls_name_the_op_and_the_argument(call, words):
    with pytest.raises((ValueError, TypeError)) as caught:
        call(torch.rand(4, 16))
    text = str(caught.value)
    assert text.startswith(f"{OP}: ") and words in text and "\n" not in text


def test_out_is_written_and_returned():
    args = mixed_rows(5, 20, torch.float32, True)
    out = torch.full((5,), -1, dtype=torch.int64)
    ids = K.top_k_top_p_sampling(*args, out=out)
    assert ids.data_ptr() == out.data_ptr() and torch.equal(out, native.top_k_top_p_sampling(*args))


# ------------------------------------------------------------------ the custom op and torch.compile


def test_fullgraph_compile_of_a_sampling_step_has_no_graph_break():
    torch._dynamo.reset()

    def step(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor, so: torch.Tensor, t: torch.Tensor):
        return K.top_k_top_p_sampling(logits * 1.0, k, p, so, t, True) + 0

    x, k, p, so, t, _ = mixed_rows(6, 40, torch.float32, True)
    explained = torch._dynamo.explain(step)(x, k, p, so, t)
    assert explained.graph_break_count == 0
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, k, p, so, t), step(x, k, p, so, t))
    schema = str(torch.ops.rapid_llm.top_k_top_p_sampling.default._schema)
    assert "Tensor seed_offset" in schema and "Tensor? temperature=None" in schema


# ------------------------------------------------------------------ the CUDA row


CU = Path(native.__file__).with_name("top_k_top_p_sampling.cu")


def test_the_cuda_row_is_declared_verified_and_says_so_on_its_first_line():
    row_spec = spec.get_row("jit/top_k_top_p_sampling")
    assert row_spec.golden.verified is True and row_spec.devices == ("cuda",)
    first = CU.read_text().splitlines()[0]
    assert "jit/top_k_top_p_sampling" in first and "verified on an H100" in first
    assert CU.read_text().isascii()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^top_k_top_p_sampling: the CUDA row runs on cuda tensors, got cpu$"):
            spec.get_row("jit/top_k_top_p_sampling").load()(torch.rand(2, 8), None, None, SO)


# ------------------------------------------------------------------ the Triton row compiled for a GPU


#: The Triton kernel compiled for sm_90 (no GPU needed): the chunked path from logits (bf16, int32 k), the one-chunk
#: path from probabilities (fp32, int64 k) and from logits (fp16); the interpreter runs none of Triton's GPU lowering.
_COMPILE_FOR_SM90 = textwrap.dedent("""
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from rapid_llm.kernels.ops.sampling.top_k_top_p_sampling.triton import _sample_kernel

target = GPUTarget("cuda", 90, 32)
names = ("x_ptr", "k_ptr", "p_ptr", "t_ptr", "so_ptr", "out_ptr", "batch", "vocab", "stride_b", "stride_v", "stride_k",
         "stride_p", "stride_t", "stride_o")
for dt, kdt, logits, single, block_r, block_v in (("bf16", "i32", True, False, 1, 512),
                                                  ("fp32", "i64", False, True, 4, 128),
                                                  ("fp16", "i32", True, True, 1, 512)):
    sig = dict(zip(names, ("*" + dt, "*" + kdt, "*fp32", "*fp32", "*i64", "*i64", "i32", "i32", "i64", "i64", "i64",
                           "i64", "i64", "i64")))
    consts = {"HAS_K": True, "HAS_P": True, "HAS_T": logits, "FROM_LOGITS": logits, "SINGLE": single,
              "BLOCK_R": block_r, "BLOCK_V": block_v}
    sig.update({n: "constexpr" for n in consts})
    compile(ASTSource(_sample_kernel, sig, constexprs=consts), target=target)
print("ok")
""")


def test_the_triton_kernel_compiles_for_sm90_in_each_path():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    out = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]
