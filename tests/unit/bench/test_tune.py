"""tune on CPU: a Triton row in the interpreter, verified and timed through the same path a GPU takes; pins
shared by concurrent processes; a JIT row's pinned config in its flags and digest. The GPU run (a CUDA row's
candidates compiled, verified in the child and timed) is tests/gpu/unit/bench/test_tune.py."""
from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import rapid_llm.kernels as K
from rapid_llm.bench.tune import TuneError, tune
from rapid_llm.kernels.registry import pins
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from rapid_llm.kernels.registry.tune_space import SearchSpace, TuneSpaceError, config_flags, read_space
from rapid_llm.kernels.toolchain.digests import code_digest
from rapid_llm.kernels.toolchain.jit_row import JitRow
from rapid_llm.kernels.verification.isolate import recipe


@triton.jit
def _scale_kernel(out_ptr, in_ptr, factor, n, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(in_ptr + offs, mask=mask).to(tl.float32)
    y = x * factor
    if BUG:  # a wrong candidate: loses the low mantissa bits, as a bf16 accumulation would
        y = y.to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def scale_tunable(input: torch.Tensor, factor: float, out: torch.Tensor | None = None, *, BLOCK: int = 64,
                  BUG: int = 0) -> torch.Tensor:
    """Defaults far from the best: in the interpreter a program is a Python loop's turn, so at 513 elements 64 a
    block (9 programs) is several times slower than 2048 (one), a gap no load on CI's two cores hides from
    tune's paired confirmation (0.716x, 5 programs against 3, once did)."""
    if out is None:
        out = torch.empty_like(input)
    n = input.numel()
    if n:
        _scale_kernel[(triton.cdiv(n, BLOCK),)](out, input, float(factor), n, BLOCK=BLOCK, BUG=BUG)
    return out


@contextlib.contextmanager
def interpreted_row(name: str, target, space: dict):
    """A Triton row of scale tuned over ``space``, served by the interpreter on CPU (so explain's verdict is the
    dispatch rule's), unregistered after."""
    from rapid_llm.kernels.toolchain import triton_support

    triton_support.serve_interpreter(True)
    K.register(KernelSpec(name=name, op="scale", backend="triton", target=target,
                          available="rapid_llm.kernels.toolchain.triton_support:available", dtypes=("fp32",),
                          devices=("cuda", "cpu"), golden=GoldenRecord(verified=False, baseline="native/scale"),
                          tune_space=space), replace=True)
    try:
        yield name
    finally:
        K.unregister(name)
        triton_support.serve_interpreter(None)


@pytest.fixture
def tunable_row():
    with interpreted_row("triton/scale_tunable", scale_tunable, {"BLOCK": [256, 2048], "BUG": [0, 1]}) as name:
        yield name


def scale_wide_default(input: torch.Tensor, factor: float, out: torch.Tensor | None = None, *,
                       BLOCK: int = 2048) -> torch.Tensor:
    """scale_tunable with the fastest block as its default: every candidate of a smaller one is slower."""
    return scale_tunable(input, factor, out, BLOCK=BLOCK)


#: The interpreter serves on CPU (the suite sets TRITON_INTERPRET there).
DEVICE = "cpu"
#: Compiled on a GPU, scale at 513 elements is launch-bound (64 a block against 2048: 4.16 against 4.26 us on an
#: H100), a tie no confirmation can call either way.
INTERPRETER_GAPS = pytest.mark.skipif(torch.cuda.is_available(), reason=(
    "these tests confirm the Triton interpreter's gaps between block sizes, which a machine with CUDA does not run "
    "(its Triton compiles); tests/gpu/unit/bench/test_tune.py tunes a CUDA row there"))
#: Seconds of paired timings a token count: tune's minimum of pairs alone tells a 4x gap apart.
CONFIRM_S = 0.5


@pytest.fixture(autouse=True)
def short_confirmation_samples(monkeypatch):
    """Two calls a sample, not ten: in the interpreter each call is about 15 ms, and the gap the confirmation must
    see here (0.23-0.25x, or a slower winner) needs the pairs, not long samples; CI spends 4 s on it, not 20."""
    monkeypatch.setattr(importlib.import_module("rapid_llm.bench.tune"), "CONFIRM_REPEATS", 2)


@INTERPRETER_GAPS
def test_tune_verifies_times_and_pins_a_triton_row(tunable_row):
    result = tune(tunable_row, tokens=(513,), dtype="fp32", device=DEVICE, confirm_seconds=CONFIRM_S)
    states = {c.label: c.state for c in result.candidates}
    assert states == {"BLOCK=256 BUG=0": "timed", "BLOCK=2048 BUG=0": "timed",
                      "BLOCK=256 BUG=1": "verify_failed", "BLOCK=2048 BUG=1": "verify_failed"}
    wrong = [c for c in result.candidates if c.config["BUG"]]
    assert all(not c.times_us and "fp32" in c.why for c in wrong)  # never timed: verify failed first
    assert result.winner is not None and result.winner.config["BUG"] == 0
    assert result.untuned.score_us is not None and result.speedup is not None
    assert result.pin is not None and result.pin.config == result.winner.config
    assert result.pin.path.is_relative_to(Path(os.environ["RAPID_LLM_CACHE_DIR"]))  # a notebook's row: local
    fn = K.get_row(tunable_row).load()  # dispatch's view: the launcher with the pinned config bound
    assert fn.keywords == result.winner.config
    x = torch.randn(5000, device=DEVICE)
    torch.testing.assert_close(fn(x, 3.0), x * 3.0, rtol=0, atol=0)
    verdict = K.explain("scale", dtype="fp32", device=DEVICE, numel=4097).verdict(tunable_row)
    assert f"tuned: {result.winner.label}, pinned for {result.device}" in verdict.reason
    assert [c.index for c in result.candidates if c.state == "pending"] == []
    assert "2 timed, 2 verify_failed" in result.summary()
    assert result.confirmed and "against the untuned row, interleaved: T=513 faster" in result.summary()
    # a second tune of the same code keeps the first pin unless told to replace it (its winner, 256 a block, is
    # confirmed faster than the defaults too)
    again = tune(tunable_row, tokens=(513,), dtype="fp32", device=DEVICE, limit=1, confirm_seconds=CONFIRM_S)
    print(result.summary(), again.summary(), sep="\n")
    assert again.confirmed and again.pin.config == result.pin.config, again.summary()
    assert "(an earlier pin of this code holds)" in again.summary()
    assert K.get_row(tunable_row).load().keywords == result.winner.config  # and dispatch still runs it


@INTERPRETER_GAPS
def test_a_winner_slower_than_the_defaults_is_not_pinned():
    """The space's best (64 a block: 9 programs at 513 elements) against defaults of one program: the paired
    timings say slower, nothing is pinned, and the row keeps its defaults."""
    with interpreted_row("triton/scale_wide_default", scale_wide_default, {"BLOCK": [64]}) as name:
        result = tune(name, tokens=(513,), dtype="fp32", device=DEVICE, confirm_seconds=CONFIRM_S)
        print(result.summary())
        assert result.winner is not None and not result.confirmed and result.pin is None, result.summary()
        assert "slower than the untuned row at T=513" in result.not_pinned, result.summary()
        assert K.get_row(name).load() is scale_wide_default  # dispatch's view: the defaults, no config bound


def test_tune_refuses_what_it_cannot_tune():
    with pytest.raises(TuneError, match="native/scale.*tune_space"):
        tune("native/scale", device="cpu")


def test_space_reads_and_rejects():
    space = read_space('// x\n// rapid_llm tune: {"T": [32, 64, 128], "R": [1, 2], "where": "T * R <= 128"}\n')
    assert [tuple(c.values()) for c in space.configs()] == [(32, 1), (32, 2), (64, 1), (64, 2), (128, 1)]
    assert config_flags({"T": 64, "R": 2}) == ("-DR=2", "-DT=64")
    assert read_space("// no space here") is None
    for text, words in [('{"T": []}', "at least one value"), ('{"T": [1, 1]}', "twice"),
                        ('{"T": [1], "where": "__import__(1)"}', "not Call"),
                        ('{"T": [1], "where": "Q > 1"}', "'Q', which is not a parameter"),
                        ('{"1T": [1]}', "not a plain identifier"), ("{nope}", "not valid JSON")]:
        with pytest.raises(TuneSpaceError, match=words):
            read_space(f"// rapid_llm tune: {text}", "cell.cu")
    assert SearchSpace.from_dict({"A": [1, 2]}).contains({"A": 2})


_SPACED = '// rapid_llm tune: {"THREADS": [128, 256]}\n#ifndef THREADS\n#define THREADS 256\n#endif\nint f();\n'


def test_a_jit_rows_pinned_config_is_in_its_flags_and_digest(tmp_path):
    source = tmp_path / "cell.cu"
    source.write_text(_SPACED)
    row = KernelSpec(name="jit/cell", op="scale", target=JitRow(source, "cell"), dtypes=("fp32",))
    untuned = code_digest(row)
    assert row.target.config is None and row.target.flags == ("-O3",)
    pins.pin(source, "scale", "jit/cell", row.target.untuned_digest(), pins.current_kind(), {"THREADS": 128})
    assert row.target.config == {"THREADS": 128} and row.target.flags == ("-O3", "-DTHREADS=128")
    assert code_digest(row) != untuned  # figures of the untuned build do not rank the tuned one
    job = recipe(row)
    assert job["flags"] == ["-O3"] and job["config"] == {"THREADS": 128}  # the child builds the same variant
    source.write_text(_SPACED.replace("128, 256", "128, 512"))  # an edited space is other code: the pin lapses
    assert row.target.config is None


def _pin_one(args: tuple[str, str, int]) -> dict:
    cache, source, threads = args
    os.environ["RAPID_LLM_CACHE_DIR"] = cache
    from rapid_llm.kernels.registry import pins as p

    held = p.pin(Path(source), "scale", "jit/cell", "d" * 64, "NVIDIA Test GPU", {"THREADS": threads})
    return p.pinned(Path(source), "d" * 64, "NVIDIA Test GPU").config | {"held": held.config["THREADS"]}


def test_eight_processes_read_the_same_pinned_config(tmp_path):
    """Eight ranks each tuned and found a different winner; all of them run the one pinned first."""
    source = tmp_path / "cell.cu"
    source.write_text(_SPACED)
    ctx = multiprocessing.get_context("fork")  # eight processes, not eight torch imports: the pins need no torch
    with ctx.Pool(8) as pool:
        seen = pool.map(_pin_one, [(str(tmp_path / "cache"), str(source), 32 * (k + 1)) for k in range(8)])
    assert len({json.dumps(s, sort_keys=True) for s in seen}) == 1, seen
    first = seen[0]["THREADS"]
    assert all(s["held"] == first for s in seen)
    # a fresh process reading the table afresh gets it too
    code = ("import sys; from pathlib import Path; from rapid_llm.kernels.registry import pins; "
            "print(pins.pinned(Path(sys.argv[1]), 'd' * 64, 'NVIDIA Test GPU').config['THREADS'])")
    out = subprocess.run([sys.executable, "-c", code, str(source)], capture_output=True, text=True, check=True,
                         env={**os.environ, "RAPID_LLM_CACHE_DIR": str(tmp_path / "cache")})
    assert int(out.stdout) == first
