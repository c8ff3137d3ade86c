"""moe_topk_gate: the tie rule, the options, the routing verify mode and its defect classes, the refusals.

The rows' check against the float64 oracle is tests/contract/test_rows.py; here is what is particular to
the op: the stated tie rule (lower expert id, lower group id), DeepSeek-V3's grouped choice, the defect
rows the routing mode must name (tie_broken_differently, not_renormalised), its custom op under
torch.compile, and the CUDA row's status.
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
from rapid_llm.kernels.ops.moe.moe_topk_gate import native, reference
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.routing_mode import RoutingOutput

OP = "moe_topk_gate"
DEFECTS = "tests.unit.verification.defects.moe_gate_defects"
CPU_ROWS = ["native/moe_topk_gate", "triton/moe_topk_gate"]


#: Where a row runs its cases: the Triton row compiled on a GPU (the interpreter is off there), the floor on CPU.
GPU = torch.device("cuda") if torch.cuda.is_available() else None


def row(name: str):
    return spec.get_row(name).load()


def on(name: str) -> torch.device:
    return GPU if GPU is not None and name.startswith("triton/") else torch.device("cpu")


def dsv3(tokens: int, seed: int = 0, device: torch.device = torch.device("cpu")) -> tuple:
    return reference.dsv3(tokens, torch.float32, device, torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ the tie rule and the options


@pytest.mark.parametrize("name", CPU_ROWS)
def test_equal_scores_go_to_the_lower_expert_id(name):
    flat = torch.zeros(3, 16, device=on(name))
    flat[1] = 2.5
    for scoring in ("softmax", "sigmoid"):
        weights, ids = row(name)(flat, 4, scoring)
        assert ids.tolist() == [[0, 1, 2, 3]] * 3
        assert torch.allclose(weights.cpu(), torch.full((3, 4), 0.25))
    logits = torch.tensor([[1.0, 3.0, 1.0, 3.0, 2.0, 3.0]], device=on(name))
    assert row(name)(logits, 4)[1].tolist() == [[1, 3, 5, 4]]  # three tied at 3.0 in id order, then 2.0


@pytest.mark.parametrize("name", CPU_ROWS)
def test_equal_group_scores_go_to_the_lower_group_id(name):
    logits = torch.zeros(1, 16, device=on(name))
    logits[0, 12:14] = 1.0  # group 3 is best; groups 0..2 tie below it
    weights, ids = row(name)(logits, 4, "sigmoid", True, None, 4, 2)
    assert ids.tolist() == [[12, 13, 0, 1]]  # group 3, then group 0 (the lower id among the tied)
    assert abs(float(weights.sum()) - 1.0) < 1e-6


def grouped_topk(logits: torch.Tensor, k: int, bias: torch.Tensor, groups: int, keep: int) -> torch.Tensor:
    """DeepSeek-V3's gate as vLLM's grouped_topk writes it (torch.topk: right where no two scores tie)."""
    scores = logits.float().sigmoid()
    choice = scores + bias
    t, e = choice.shape
    group = choice.view(t, groups, -1).topk(2, dim=-1).values.sum(-1)
    kept = group.topk(keep, dim=-1).indices
    mask = torch.zeros_like(group).scatter_(1, kept, 1).unsqueeze(-1).expand(t, groups, e // groups).reshape(t, e)
    ids = choice.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1).indices
    w = scores.gather(1, ids)
    return ids, w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("name", CPU_ROWS)
def test_deepseek_v3_gate_matches_the_grouped_topk_it_implements(name):
    logits, k, scoring, renormalize, bias, groups, keep = dsv3(24, seed=3, device=on(name))
    weights, ids = row(name)(logits, k, scoring, renormalize, bias, groups, keep)
    logits, bias, weights, ids = logits.cpu(), bias.cpu(), weights.cpu(), ids.cpu()
    want_ids, want_w = grouped_topk(logits, k, bias, groups, keep)
    assert torch.equal(ids.long(), want_ids)
    torch.testing.assert_close(weights, want_w, rtol=2e-6, atol=1e-7)
    # the weights are the unbiased scores: the choice used the bias, the weights do not
    assert torch.allclose(weights.sum(-1), torch.ones(24))


def test_softmax_weights_without_renormalize_are_the_softmax_probabilities():
    logits = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    weights, ids = K.moe_topk_gate(logits, 2, "softmax", False)
    probs = logits.softmax(-1)
    torch.testing.assert_close(weights, probs.gather(1, ids.long()))
    assert bool((weights.sum(-1) < 1).all())


@pytest.mark.parametrize("name", CPU_ROWS)
def test_out_tensors_are_written_and_returned(name):
    logits = torch.randn(6, 32, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(2)).to(on(name))
    out_w = torch.full((6, 3), float("nan"), device=on(name))
    out_i = torch.full((6, 3), -1, dtype=torch.int32, device=on(name))
    weights, ids = row(name)(logits, 3, "sigmoid", out_weights=out_w, out_ids=out_i)
    assert weights.data_ptr() == out_w.data_ptr() and ids.data_ptr() == out_i.data_ptr()
    want_w, want_i = native.moe_topk_gate(logits.cpu(), 3, "sigmoid")
    assert torch.equal(out_i.cpu(), want_i) and torch.allclose(out_w.cpu(), want_w)


@pytest.mark.parametrize("name", CPU_ROWS)
def test_no_tokens_and_k_equal_to_e(name):
    dev = on(name)
    weights, ids = row(name)(torch.empty(0, 256, device=dev), 8, "sigmoid", True, torch.zeros(256, device=dev), 8, 4)
    assert weights.shape == (0, 8) and ids.shape == (0, 8) and ids.dtype == torch.int32
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(4))
    weights, ids = row(name)(logits.to(dev), 8)
    assert sorted(ids[0].tolist()) == list(range(8))
    assert torch.equal(ids.long().cpu(), logits.argsort(dim=-1, descending=True, stable=True))


@pytest.mark.parametrize(("call", "words"), [
    (lambda x: K.moe_topk_gate(x, 0), "k must be >= 1"),
    (lambda x: K.moe_topk_gate(x, 9), "k must be at most 8"),
    (lambda x: K.moe_topk_gate(x[:, :4], 5), "k must be at most 8 and at most the 4 experts"),
    (lambda x: K.moe_topk_gate(x, 2, "relu"), "scoring must be 'softmax' or 'sigmoid'"),
    (lambda x: K.moe_topk_gate(x, 2, "sigmoid", True, None, 3), "num_groups must divide the 16 experts"),
    (lambda x: K.moe_topk_gate(x, 2, "sigmoid", True, None, 16), "groups need 2 experts"),
    (lambda x: K.moe_topk_gate(x, 2, "sigmoid", True, None, 4, 5), "topk_groups must be at most num_groups"),
    (lambda x: K.moe_topk_gate(x, 8, "sigmoid", True, None, 4, 1), "k = 8 is more than the 4 experts"),
    (lambda x: K.moe_topk_gate(x, 2, bias=torch.zeros(16, dtype=torch.bfloat16)), "bias must be [16] fp32"),
    (lambda x: K.moe_topk_gate(x, 2, bias=torch.zeros(15)), "bias must be [16] fp32"),
    (lambda x: K.moe_topk_gate(x.int(), 2), "logits must be bf16, fp16, fp32"),
    (lambda x: K.moe_topk_gate(x[0], 2), "logits must be [tokens, experts]"),
    (lambda x: K.moe_topk_gate(x, 2, out_ids=torch.zeros(4, 2)), "out_ids must be [4, 2] int32"),
    (lambda x: K.moe_topk_gate(x, 2, out_weights=torch.zeros(4, 3)), "out_weights must be [4, 2] fp32"),
    (lambda x: K.moe_topk_gate(x, 2, renormalize=1), "renormalize must be a bool"),
])
def test_bad_calls_name_the_op_and_the_argument(call, words):
    with pytest.raises((ValueError, TypeError)) as caught:
        call(torch.randn(4, 16))
    text = str(caught.value)
    assert text.startswith(f"{OP}: ") and words in text and "\n" not in text


def test_the_tie_rule_is_stated_where_the_floor_is():
    doc = " ".join(native.__doc__.split())
    assert "among equal values the lower expert id wins, and among equal group scores the lower group id" in doc


# ------------------------------------------------------------------ the routing mode and its defects


def defect_row(fn: str, backend: str = "external") -> str:
    name = f"{backend}/{fn}"
    spec.register(KernelSpec(name=name, op=OP, backend=backend, target=f"{DEFECTS}:{fn}", dtypes=("fp32",),
                             devices=("cpu",) if backend == "external" else ("cuda", "cpu"),
                             available=("rapid_llm.kernels.toolchain.triton_support:available"
                                        if backend == "triton" else None)),
                  replace=True)
    return name


@pytest.mark.parametrize(("fn", "backend", "named", "clean"), [
    ("gate_higher_id_wins", "external", "tie_broken_differently", "wrong_experts 0"),
    ("gate_higher_id_wins_triton", "triton", "tie_broken_differently", "wrong_experts 0"),
    ("gate_drops_renormalisation", "external", "not_renormalised", "tie_broken_differently 0"),
])
def test_the_routing_mode_names_each_defect(fn, backend, named, clean):
    if backend == "triton":
        pytest.importorskip("triton")
    name = defect_row(fn, backend)
    try:
        report = verify(name, dtypes=["fp32"], device=on(name), record=False)
    finally:
        spec.unregister(name)
    text = str(report)
    assert not report.passed, text
    assert f"routing: {named}: [T=" in text, text  # the first such row, with its case's shape
    assert clean in text, text  # and only that class
    assert "rule: routing:" in text
    assert named in {d.kind for d in report.defects}, text  # the verdict's defects name the class
    assert {d.kind for d in report.defects} == {named}, text  # and nothing else


def test_the_report_names_the_mode_and_passes_the_floor():
    report = verify("native/moe_topk_gate", dtypes=["fp32"], device="cpu", record=False)
    assert report.passed, str(report)
    assert report["fp32"].rule == RoutingOutput(view=reference.view).rule
    assert "tie_broken_differently 0" in str(report) and "not_renormalised 0" in str(report)


def _judge(got_w, got_i, args) -> dict:
    exact = reference.oracle(*args)
    got = torch.cat([torch.tensor(got_w, dtype=torch.float64).flatten(),
                     torch.tensor(got_i, dtype=torch.float64).flatten()])
    counts: dict = {}
    errs = RoutingOutput(view=reference.view).errors(got, exact, args, counts)
    counts["bad"] = int((errs.diff > errs.allowed).sum())
    return counts


def test_the_mode_tells_a_broken_tie_from_wrong_experts_and_a_missing_renormalisation():
    args = (torch.tensor([[1.0, 1.0, 0.0, 0.0]]).double(), 1, "softmax", True, None, 1, 1)
    assert _judge([[1.0]], [[0]], args) == {"rows": 1, "renormalised rows": 1, "wrong_experts": 0,
                                            "tie_broken_differently": 0, "not_renormalised": 0, "near ties": 0,
                                            "bad": 0}
    tie = _judge([[1.0]], [[1]], args)
    assert tie["tie_broken_differently"] == 1 and tie["wrong_experts"] == 0 and tie["bad"] == 1
    wrong = _judge([[1.0]], [[2]], args)
    assert wrong["wrong_experts"] == 1 and wrong["bad"] >= 1
    twice = _judge([[0.5, 0.5]], [[0, 0]], (args[0], 2, *args[2:]))
    assert twice["wrong_experts"] == 1
    out_of_range = _judge([[1.0]], [[7]], args)
    assert out_of_range["wrong_experts"] == 1
    unnormalised = _judge([[0.4223187, 0.4223187]], [[0, 1]], (args[0], 2, *args[2:]))
    assert unnormalised["not_renormalised"] == 1 and unnormalised["bad"] == 2



def test_a_near_tie_within_fp32_rounding_is_allowed_either_way_and_counted():
    """Scores 1e-9 apart: an fp32 row cannot tell them apart (fp32 ulp of 0.5: 6e-8), so either order passes;
    10 ulps apart is a real order, and the other one is wrong_experts."""
    near = (torch.tensor([[0.0, 2e-9, -5.0]], dtype=torch.float64), 1, "sigmoid", False, None, 1, 1)
    taken = _judge([[0.5]], [[0]], near)
    assert taken["near ties"] == 1 and taken["bad"] == 0 and taken["wrong_experts"] == 0
    apart = (torch.tensor([[0.0, 2.4e-6, -5.0]], dtype=torch.float64), 1, "sigmoid", False, None, 1, 1)
    wrong = _judge([[0.5]], [[0]], apart)
    assert wrong["wrong_experts"] == 1 and wrong["bad"] >= 1


# ------------------------------------------------------------------ the custom op and torch.compile


def test_the_custom_op_is_functional_and_matches_k():
    logits, k, scoring, renormalize, bias, groups, keep = dsv3(5, seed=6)
    K.register_torch_ops()  # torch.ops.rapid_llm.<op> resolves after this (or after any K call)
    op = torch.ops.rapid_llm.moe_topk_gate
    assert "Tensor? bias=None" in str(op.default._schema) and "-> (Tensor, Tensor)" in str(op.default._schema)
    w, i = op(logits, k, scoring, renormalize, bias, groups, keep)
    want_w, want_i = K.moe_topk_gate(logits, k, scoring, renormalize, bias, groups, keep)
    assert torch.equal(i, want_i) and torch.equal(w, want_w)
    with pytest.raises(ValueError, match=r"^moe_topk_gate: k must be at most 8"):
        op(logits, 9, scoring)


def test_fullgraph_compile_of_a_function_calling_the_gate():
    torch._dynamo.reset()

    def route(logits: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w, ids = K.moe_topk_gate(logits, 8, "sigmoid", True, bias, 8, 4)
        return w * 2.0, ids

    logits, _, _, _, bias, _, _ = dsv3(7, seed=8)
    compiled = torch.compile(route, fullgraph=True, backend="eager")
    w, ids = compiled(logits, bias)
    want_w, want_ids = route(logits, bias)
    assert torch.equal(ids, want_ids) and torch.equal(w, want_w)


# ------------------------------------------------------------------ the CUDA row


CU = Path(native.__file__).with_name("moe_topk_gate.cu")


def test_the_cuda_row_is_declared_verified_and_says_so_on_its_first_line():
    row_spec = spec.get_row("jit/moe_topk_gate")
    assert row_spec.golden.verified is True and row_spec.devices == ("cuda",)  # verified on a GPU
    first = CU.read_text().splitlines()[0]
    assert "jit/moe_topk_gate" in first and "verified on an H100" in first
    from rapid_llm.kernels.toolchain.jit_row import read_header

    assert read_header(CU.read_text(), str(CU)) is None  # not a self-declared row: no out rule fits two outputs
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^moe_topk_gate: the CUDA row runs on cuda tensors, got cpu$"):
            row("jit/moe_topk_gate")(torch.randn(2, 8), 2)


# ------------------------------------------------------------------ forms and dispatch


def test_a_mixtral_call_is_its_own_form_and_explain_names_it():
    mixtral = torch.randn(4, 8)
    assert reference.form_of(mixtral, 2) == reference.MIXTRAL_FORM
    assert reference.form_of(*dsv3(2)) is None  # DeepSeek-V3's gate: the bench case's form
    assert reference.form_of("not a tensor", 2) is None  # never raises on a call it cannot read
    text = str(K.explain(OP, mixtral, 2))
    assert reference.MIXTRAL_FORM in text and "jit/moe_topk_gate" in text
    case = spec.get_decl(OP).forms[reference.MIXTRAL_FORM](4096, torch.float32, torch.device("cpu"))
    assert case.args[0].shape == (16, 8) and case.bytes_moved == 16 * 8 * 4 + 16 * 2 * 8


# ------------------------------------------------------------------ the Triton row compiled for a GPU


#: The Triton kernel compiled for sm_90 (no GPU needed): DeepSeek-V3's grouped path in one view, the loop over
#: groups, and Mixtral's ungrouped softmax; the interpreter runs none of Triton's GPU lowering.
_COMPILE_FOR_SM90 = textwrap.dedent("""
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from rapid_llm.kernels.ops.moe.moe_topk_gate.triton import _gate_kernel

target = GPUTarget("cuda", 90, 32)
names = ("logits_ptr", "bias_ptr", "w_ptr", "ids_ptr", "tokens", "experts", "stride_lt", "stride_le", "stride_wt",
         "stride_wk", "stride_it", "stride_ik")
for dt, k, sigmoid, bias, groups, keep, dense, block_e in (("bf16", 8, True, True, 8, 4, True, 256),
                                                          ("fp16", 6, True, False, 4, 2, False, 64),
                                                          ("fp32", 2, False, False, 1, 1, False, 8)):
    sig = dict(zip(names, ("*" + dt, "*fp32", "*fp32", "*i32", "i64", "i32", "i64", "i64", "i64", "i64", "i64",
                           "i64")))
    consts = {"K": k, "SIGMOID": sigmoid, "RENORMALIZE": True, "HAS_BIAS": bias, "GROUPS": groups,
              "TOPK_GROUPS": keep, "DENSE_GROUPS": dense, "BLOCK_T": 16, "BLOCK_E": block_e,
              "BLOCK_G": max(1, groups), "BLOCK_K": 8 if k > 4 else (2 if k <= 2 else 4)}
    sig.update({n: "constexpr" for n in consts})
    compile(ASTSource(_gate_kernel, sig, constexprs=consts), target=target)
print("ok")
""")


def test_the_triton_kernel_compiles_for_sm90_in_each_path():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    out = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]
