"""reshape_and_cache_flash: what is particular to a paged-cache write, on CPU (the floor and the Triton row in
the interpreter; the CUDA row compiles here, tests/unit/toolchain/test_cu_compile.py, and runs in
tests/gpu/ops/test_reshape_and_cache_flash.py).

That every row passes verify in the scatter mode and holds its record is tests/contract/test_rows.py's. Here: a
hand-checked write (the slots named, padding skipped, nothing else touched), the Triton row's integer e4m3
rounding against torch's own cast, the scatter mode's rule element by element, the defect rows it must name
(tests/unit/verification/defects/cache_defects.py), the errors a bad call gets from every path, and the write
kept by torch.compile(fullgraph=True).
"""
from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash import reference as R
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.native import FP8
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import KernelSpec
from rapid_llm.kernels.verification.golden import verify
from rapid_llm.kernels.verification.scatter_mode import ScatterTarget, ScatterWrite
from tests.reference import assert_by_compare_mode
from tests.rows import runnable_rows

OP = "reshape_and_cache_flash"
DEFECTS = "tests.unit.verification.defects.cache_defects"

# A kernel storing the Triton row's e4m3 bits of each fp32 value, at module level: Triton finds a kernel's helpers
# among its module's globals.
try:
    import triton
    import triton.language as tl

    from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.triton import _e4m3_bits

    @triton.jit
    def _encode(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, _e4m3_bits(tl.load(x_ptr + offs, mask=mask)).to(tl.uint8), mask=mask)
except ImportError:
    _encode = None


def cpu_rows() -> dict[str, object]:
    return {row.name: row.load() for row in runnable_rows(OP, "cpu")}


def scales(k: float = 1.0, v: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([k]), torch.tensor([v])


# ------------------------------------------------------------------ the write itself


@pytest.mark.parametrize("name", sorted(cpu_rows()))
def test_a_write_lands_in_the_named_slots_and_nowhere_else(name):
    fn = cpu_rows()[name]
    key = torch.arange(3 * 2 * 4, dtype=torch.float32).view(3, 2, 4) + 1
    value = -key
    key_cache, value_cache = torch.full((3, 4, 2, 4), 7.0), torch.full((3, 4, 2, 4), 9.0)
    slots = torch.tensor([11, -1, 2])  # block 2 offset 3; padding; block 0 offset 2
    fn(key, value, key_cache, value_cache, slots, *scales())
    want_k, want_v = torch.full_like(key_cache, 7.0), torch.full_like(value_cache, 9.0)
    want_k[2, 3], want_k[0, 2] = key[0], key[2]
    want_v[2, 3], want_v[0, 2] = value[0], value[2]
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v)


@pytest.mark.parametrize("name", sorted(cpu_rows()))
def test_all_padding_and_an_empty_cache_write_nothing(name):
    fn = cpu_rows()[name]
    key, value = torch.randn(3, 2, 8, dtype=torch.bfloat16), torch.randn(3, 2, 8, dtype=torch.bfloat16)
    for blocks in (0, 2):
        kc, vc = torch.randn(blocks, 4, 2, 8).to(torch.bfloat16), torch.randn(blocks, 4, 2, 8).to(torch.bfloat16)
        before = kc.clone(), vc.clone()
        assert fn(key, value, kc, vc, torch.full((3,), -1), *scales()) is None
        assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rows_agree_with_the_oracle_on_an_fp8_cache_with_saturation(dtype):
    gen = torch.Generator().manual_seed(3)
    slots = torch.tensor([5, -1, 0, 11, 3, -1, 7, 2, 9])
    args = R.make_case(9, 2, 16, 4, 3, dtype, torch.device("cpu"), gen, fp8=True, spread=30.0, scales=(0.05, 0.5),
                       slots=slots)
    args[0][0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)  # NaN kept, +-448
    for name, fn in cpu_rows().items():
        counts = assert_by_compare_mode(OP, fn, args, what=name)
        assert counts["slots written"] == 2 * int((args[4] >= 0).sum()), counts


def test_the_triton_rows_e4m3_rounding_is_torchs_cast_bit_for_bit():
    """Every fp32 value on the e4m3 grid, every midpoint between neighbours (ties to even), a hair either side of
    each, subnormals, zeros, 448 and past it, infinities and NaN: the integer rounding equals torch's cast."""
    if _encode is None:
        pytest.skip("Triton is not installed")
    import triton

    encode = _encode
    grid = torch.arange(256, dtype=torch.uint8).view(FP8).float()
    grid = grid[torch.isfinite(grid)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    near = torch.cat([torch.nextafter(mids, torch.full_like(mids, -1e9)), torch.nextafter(mids, torch.full_like(mids, 1e9))])
    extra = torch.tensor([0.0, -0.0, 448.0, 449.0, 464.0, 1e6, -1e6, float("inf"), -float("inf"), float("nan"),
                          2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -12, 1e-30])
    x = torch.cat([grid, mids, near, extra, -extra]).contiguous()
    on = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # compiled on a GPU, else the interpreter
    out = torch.empty(x.numel(), dtype=torch.uint8, device=on)
    encode[(triton.cdiv(x.numel(), 1024),)](x.to(on), out, x.numel(), BLOCK=1024)
    out = out.cpu()
    want = x.clamp(-448.0, 448.0).to(FP8).view(torch.uint8)
    nan = torch.isnan(x)
    assert torch.equal(out[~nan], want[~nan])
    assert bool(((out[nan] & 0x7F) == 0x7F).all())


_COMPILES_FOR_SM90 = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from rapid_llm.kernels.ops.cache.reshape_and_cache_flash.triton import _cache_kernel

for dt in ("bf16", "fp16", "fp32"):
    for fp8 in (False, True):
        p, c = "*" + dt, ("*u8" if fp8 else "*" + dt)
        sig = {"key_ptr": p, "value_ptr": p, "kc_ptr": c, "vc_ptr": c, "slot_ptr": "*i64", "ks_ptr": "*fp32",
               "vs_ptr": "*fp32"}
        sig.update({n: "i64" for n in ("heads", "head_size", "block_size", "num_slots", "k_t", "k_h", "k_d", "v_t",
                                       "v_h", "v_d", "kc_b", "kc_o", "kc_h", "kc_d", "vc_b", "vc_o", "vc_h", "vc_d")})
        sig.update({n: "constexpr" for n in ("FP8", "BLOCK_H", "BLOCK_D")})
        ptx = compile(ASTSource(_cache_kernel, sig, constexprs={"FP8": fp8, "BLOCK_H": 8, "BLOCK_D": 128}),
                      target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": True}).asm["ptx"]
        assert not fp8 or ("div.rn.f32" in ptx and "div.full" not in ptx), "x / scale must be IEEE-rounded"
print("ok")
"""


def test_the_triton_kernel_compiles_for_sm90_with_an_ieee_division():
    """What the interpreter cannot show: the kernel compiles for an H100 (fp fusion on, as Inductor compiles user
    kernels), every dtype and both cache forms, and divides by the scale with div.rn (Triton's ``/`` is
    div.full.f32, up to 2 ulps off, which can move a value across an e4m3 rounding boundary)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    out = subprocess.run([sys.executable, "-c", _COMPILES_FOR_SM90], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]


# ------------------------------------------------------------------ the scatter mode


def _judge(got_k: torch.Tensor, before: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor, fp8: bool = False):
    target = ScatterTarget("cache", before, slots, rows, fp8, 2)
    mode = ScatterWrite(targets=lambda *a: [target])
    exact = before.to(torch.float64).reshape(-1, rows.shape[1]).clone()
    exact[slots[slots >= 0]] = rows[slots >= 0]
    counts: dict[str, int] = {}
    errs = mode.errors(got_k.to(torch.float64).flatten(), exact.flatten(), (), counts)
    return (errs.diff > errs.allowed).view(-1, rows.shape[1]), mode.defects(got_k.to(torch.float64).flatten(),
                                                                            exact.flatten(), ()), counts


def test_the_mode_allows_no_change_outside_the_slots_not_even_a_sign_of_zero():
    before = torch.tensor([[1.0, 2.0], [0.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=torch.bfloat16)
    rows = torch.tensor([[10.0, 11.0]], dtype=torch.float64)
    slots = torch.tensor([2])
    after = before.clone()
    after[2] = rows[0].to(torch.bfloat16)
    bad, found, counts = _judge(after, before, slots, rows)
    assert not bad.any() and found == [] and counts["slots written"] == 1
    after[1, 0] = -0.0  # a sign bit flipped in a slot nobody names
    bad, found, _ = _judge(after, before, slots, rows)
    assert bad.nonzero().tolist() == [[1, 0]]
    assert [k for k, _ in found] == ["wrote_outside_slots"] and "slot 1 (block 0, offset 1)" in found[0][1]


def test_the_mode_judges_fp8_slots_in_grid_steps_and_names_a_padded_row():
    before = torch.zeros(4, 2).to(FP8)
    rows = torch.tensor([[16.0, 32.0], [64.0, 96.0]], dtype=torch.float64)  # token 1 is padding
    slots = torch.tensor([0, -1])
    after = before.clone()
    after[0] = torch.tensor([18.0, 32.0]).to(FP8)  # one e4m3 step off: allowed
    bad, found, counts = _judge(after, before, slots, rows, fp8=True)
    assert not bad.any() and counts["fp8 values one step off"] == 1
    after[0, 0] = torch.tensor(20.0).to(FP8)  # two steps: wrong
    after[3] = rows[1].to(torch.float32).to(FP8)  # the padded token's row in the last slot
    bad, found, _ = _judge(after, before, slots, rows, fp8=True)
    assert bad.nonzero().tolist() == [[0, 0], [3, 0], [3, 1]]
    assert [k for k, _ in found] == ["wrote_padding"] and "read as a Python index" in found[0][1]


def _external(fn: str) -> str:
    name = f"external/{fn}"
    spec.register(KernelSpec(name=name, op=OP, backend="external", target=f"{DEFECTS}:{fn}", dtypes=("bf16", "fp32"),
                             devices=("cpu",)))
    return name


@pytest.mark.parametrize("fn, kind", [("reshape_and_cache_flash_writes_padding", "wrote_padding"),
                                      ("reshape_and_cache_flash_writes_neighbour", "wrote_outside_slots")])
def test_defect_rows_fail_and_the_verdict_names_their_class(fn, kind):
    report = verify(_external(fn), dtypes=["bf16"], device="cpu", record=False)
    assert not report.passed, str(report)
    assert kind in report["bf16"].verdict, report["bf16"].verdict
    assert {d.kind for d in report.defects} == {kind}, str(report)
    assert "scatter into persistent state" in report.rule_text()
    assert any(line.startswith(f"{kind}: ") for line in report["bf16"].notes), report["bf16"].notes


def test_the_fixed_twin_passes_with_nothing_changed_outside_its_slots():
    report = verify(_external("reshape_and_cache_flash_fixed"), dtypes=["fp32"], device="cpu", record=False)
    assert report.passed and report.defects == (), str(report)
    assert "elements outside them changed: 0 of" in report["fp32"].notes[0], report["fp32"].notes


# ------------------------------------------------------------------ bad calls


def _call(**changed):
    gen = torch.Generator().manual_seed(0)
    args = dict(zip(("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale"),
                    R.make_case(4, 2, 8, 4, 2, torch.float32, torch.device("cpu"), gen, slots=torch.tensor([0, 5, -1, 7]))))
    args.update({k: v(args) if callable(v) else v for k, v in changed.items()})
    return tuple(args.values())


BAD = {
    "a slot past the cache": (dict(slot_mapping=torch.tensor([0, 5, -1, 8])), "holds slot 8, outside [-1, 8)"),
    "a slot below -1": (dict(slot_mapping=torch.tensor([0, -2, -1, 7])), "holds slot -2, outside [-1, 8)"),
    "int32 slots": (dict(slot_mapping=torch.tensor([0, 5, -1, 7], dtype=torch.int32)), "slot_mapping must be int64"),
    "value_cache is key_cache": (dict(value_cache=lambda a: a["key_cache"]), "must not share memory with"),
    "key inside key_cache": (dict(key=lambda a: a["key_cache"][0]), "key_cache is written and must not share"),
    "a cache of another head size": (dict(key_cache=torch.zeros(2, 4, 2, 4), value_cache=torch.zeros(2, 4, 2, 4)),
                                     "key_cache's heads and head size must be key's [2, 8]"),
    "a bf16 cache for fp32 keys": (dict(key_cache=torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16),
                                        value_cache=torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16)),
                                   "key_cache must be key's dtype or float8_e4m3fn"),
    "an fp16 scale": (dict(k_scale=torch.tensor([1.0], dtype=torch.float16)), "k_scale must be a float32 tensor"),
    "two scales in one": (dict(v_scale=torch.ones(2)), "v_scale must be a float32 tensor of one element"),
    "2-D key": (dict(key=torch.zeros(4, 16)), "key must be [T, H, D]"),
}


@pytest.mark.parametrize("condition", sorted(BAD))
def test_every_path_refuses_a_bad_call_in_one_line_naming_the_op(condition):
    changed, words = BAD[condition]
    answers = {}
    for name, fn in {**cpu_rows(), "K": getattr(K, OP), "torch.ops": getattr(torch.ops.rapid_llm, OP)}.items():
        args = _call(**changed)
        before = [a.clone() for a in args]
        with pytest.raises(ValueError) as caught:
            fn(*args)
        assert all(torch.equal(a, b) for a, b in zip(args, before)), f"{name} wrote before raising"
        answers[name] = str(caught.value)
    assert len(set(answers.values())) == 1, answers
    message = next(iter(answers.values()))
    assert message.startswith(f"{OP}: ") and words in message and "\n" not in message, message


# ------------------------------------------------------------------ torch.compile


def test_fullgraph_compile_keeps_the_cache_write():
    """K.reshape_and_cache_flash under torch.compile(fullgraph=True) is one node of the custom op, whose schema
    marks both caches written: the functionalized graph writes them back, so the write is kept."""
    def step(key, value, kc, vc, slots, ks, vs):
        K.reshape_and_cache_flash(key, value, kc, vc, slots, ks, vs)
        return kc.float().sum() + vc.float().sum()

    schema = str(getattr(torch.ops.rapid_llm, OP).default._schema)
    assert "Tensor(a!) key_cache" in schema and "Tensor(b!) value_cache" in schema, schema
    gen = torch.Generator().manual_seed(1)
    args = R.make_case(6, 2, 8, 4, 3, torch.float32, torch.device("cpu"), gen)
    explained = torch._dynamo.explain(step)(*[a.clone() for a in args])
    assert explained.graph_break_count == 0, explained.break_reasons
    eager = [a.clone() for a in args]
    compiled = [a.clone() for a in args]
    torch._dynamo.reset()
    want = step(*eager)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled)
    assert torch.equal(got, want)
    assert torch.equal(compiled[2], eager[2]) and torch.equal(compiled[3], eager[3])
    assert not torch.equal(compiled[2], args[2])  # it wrote


#: The conditions the CUDA launcher checks itself (slot values and aliasing are the op's checks, which its call
#: path runs first): its words must be the floor's.
LAUNCHER_CONDITIONS = ("int32 slots", "a cache of another head size", "a bf16 cache for fp32 keys", "an fp16 scale",
                       "two scales in one", "2-D key")


@pytest.mark.parametrize("condition", LAUNCHER_CONDITIONS)
def test_the_cuda_launcher_refuses_in_the_floors_words(condition):
    """The .cu launcher checks shapes and dtypes before the device, so its words are compared here, on CPU
    tensors, with the launcher built by the host compiler (its kernels never run)."""
    import shutil

    if shutil.which("g++") is None or shutil.which("nvcc") is None:
        pytest.skip("building the launcher needs g++ and the CUDA toolkit's headers (nvcc)")
    launcher = spec.get_row(f"jit/{OP}").target.launcher()
    args = _call(**BAD[condition][0])
    with pytest.raises(ValueError) as expected:
        spec.native_row(OP).load()(*args)
    with pytest.raises(ValueError) as caught:
        launcher(*args)
    assert str(caught.value) == str(expected.value)
