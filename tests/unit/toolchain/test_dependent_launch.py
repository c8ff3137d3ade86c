"""Programmatic dependent launch (rl::launch_dependent): the switch, and chains of dependent kernels.

A dependent kernel may start before the kernel ahead of it on the stream has finished; its in-kernel wait is
what keeps it from reading that kernel's output early. So each GPU case chains a CUDA row on its own output,
eight calls back to back in one CUDA graph (where the launches overlap most), and requires the result to
equal, bit for bit, the same chain run eagerly as plain launches. (A per-tensor dynamic scaled_fp8_quant call
is such a chain by itself: clear, amax, quantise, scale, each kernel reading what the one before wrote.)
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Callable

import pytest
import torch

from rapid_llm.kernels.toolchain.fastpath.binding import DEPENDENT_LAUNCH_ENV, plain_launches, set_dependent_launch
from rapid_llm.kernels import platform
from rapid_llm.kernels.registry import spec

needs_toolchain = pytest.mark.skipif(shutil.which("gcc") is None, reason="the call binding is built with gcc")

CHAIN = 8

#: Shipped sources that launch dependently: every kernel they define must wait before it touches memory.
DEPENDENT_SOURCES = sorted(p for p in platform.OPS_DIR.rglob("*.cu*") if "rl::launch_dependent(" in p.read_text())


def _kernel_bodies(text: str) -> dict[str, str]:
    """name -> body of each ``__global__`` function defined (not merely declared) in ``text``."""
    bodies = {}
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", text)
    for m in re.finditer(r"__global__[^;{]*?(\w+)\s*\(", text):
        depth, i = 0, m.end() - 1
        while True:  # past the parameter list
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        rest = text[i:].lstrip()
        if not rest.startswith("{"):
            continue  # a declaration
        start = i + text[i:].index("{")
        depth, j = 0, start
        while True:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        bodies[m.group(1)] = text[start:j]
    return bodies


def test_the_shipped_dependent_sources_are_the_llm_ops():
    names = {p.name for p in DEPENDENT_SOURCES}
    assert {"rms_norm_kernels.cuh", "silu_and_mul.cu", "rotary_embedding.cu", "merge_attn_states.cu",
            "scaled_fp8_quant.cu"} <= names


@pytest.mark.parametrize("source", DEPENDENT_SOURCES, ids=lambda p: p.name)
def test_every_kernel_of_a_dependent_source_waits_for_the_grid_before(source):
    bodies = _kernel_bodies(source.read_text())
    assert bodies, f"{source.name}: no kernel definitions found"
    missing = sorted(name for name, body in bodies.items() if "rl::wait_for_prior_grids();" not in body)
    assert not missing, f"{source.name}: kernels launched dependently without rl::wait_for_prior_grids(): {missing}"


@needs_toolchain
def test_the_switch_follows_the_environment_and_returns_the_setting_before():
    default = os.environ.get(DEPENDENT_LAUNCH_ENV, "1") != "0"
    assert set_dependent_launch(True) is default
    try:
        assert set_dependent_launch(False) is True
        assert set_dependent_launch(False) is False
    finally:
        set_dependent_launch(default)


@needs_toolchain
@pytest.mark.parametrize("env", [None, "0"], ids=["default", "env_off"])
def test_a_binding_first_loaded_inside_plain_launches_is_plain_there_and_takes_the_default_after(env):
    # A fresh process: this one has loaded the binding already.
    code = ("from rapid_llm.kernels.toolchain.fastpath import binding\n"
            "with binding.plain_launches():\n"
            "    inside = binding.set_dependent_launch(False)\n"
            "print(inside, binding.set_dependent_launch(False))\n")
    environ = {k: v for k, v in os.environ.items() if k != DEPENDENT_LAUNCH_ENV}
    if env is not None:
        environ[DEPENDENT_LAUNCH_ENV] = env
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True" if env is None else "False"]


@needs_toolchain
def test_plain_launches_turns_the_switch_off_and_back_even_on_error():
    before = set_dependent_launch(True)  # the binding is loaded: plain_launches has something to switch
    try:
        with pytest.raises(KeyError), plain_launches():
            assert set_dependent_launch(False) is False
            raise KeyError("inside")
        assert set_dependent_launch(True) is True
    finally:
        set_dependent_launch(before)


def _chains(tokens: int) -> dict[str, Callable[[], torch.Tensor]]:
    """op -> a chain of CHAIN calls of its CUDA row, each reading what the one before wrote (fresh inputs)."""
    gen = torch.Generator().manual_seed(tokens)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to("cuda", torch.bfloat16)

    x, r, w = rand(tokens, 4096), rand(tokens, 4096), 1 + 0.1 * rand(4096)
    q, k = rand(tokens, 32 * 128), rand(tokens, 8 * 128)
    positions = torch.randint(0, 4096, (tokens,), generator=gen).cuda()
    cache = torch.randn(4096, 128, generator=gen).cuda()
    gate_up = rand(tokens, 2 ** CHAIN * 16)
    rows = {op: spec.get_row(f"jit/{op}").load()
            for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding")}

    def rms_norm() -> torch.Tensor:
        y = x
        for _ in range(CHAIN):
            y = rows["rms_norm"](y, w, 1e-5)
        return y

    def fused_add_rms_norm() -> torch.Tensor:
        xx, rr = x.clone(), r.clone()
        for _ in range(CHAIN):
            rows["fused_add_rms_norm"](xx, rr, w, 1e-5)
        return torch.cat([xx, rr])

    def silu_and_mul() -> torch.Tensor:
        y = gate_up
        for _ in range(CHAIN):  # halves the last dim each time
            y = rows["silu_and_mul"](y)
        return y

    def rotary_embedding() -> torch.Tensor:
        qq, kk = q.clone(), k.clone()
        for _ in range(CHAIN):
            rows["rotary_embedding"](positions, qq, kk, 128, cache, True)
        return torch.cat([qq, kk], dim=1)

    heads = 32
    v, v_b = rand(tokens, heads, 128), rand(tokens, heads, 128)
    lse, lse_b = torch.randn(heads, tokens, generator=gen).cuda(), torch.randn(heads, tokens, generator=gen).cuda()
    merge = spec.get_row("jit/merge_attn_states").load()
    quant = spec.get_row("jit/scaled_fp8_quant").load()

    def merge_attn_states() -> torch.Tensor:
        a, a_lse = v, lse
        for _ in range(CHAIN):  # each merge's output is the next one's first state
            out, out_lse = torch.empty_like(a), torch.empty_like(a_lse)
            merge(out, out_lse, a, a_lse, v_b, lse_b)
            a, a_lse = out, out_lse
        return torch.cat([a.flatten().float(), a_lse.flatten()])

    def scaled_fp8_quant() -> torch.Tensor:
        parts = []
        for i in range(CHAIN):  # per tensor, dynamic: clear, amax, quantise, scale, four dependent kernels a call
            out, scales = torch.empty(tokens, 4096, dtype=torch.float8_e4m3fn, device="cuda"), x.new_empty(1).float()
            quant(out, x if i % 2 == 0 else r, scales, False)
            parts += [out.view(torch.uint8).flatten().float(), scales]
        return torch.cat(parts)

    return {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding,
                                    merge_attn_states, scaled_fp8_quant)}


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding",
                                "merge_attn_states", "scaled_fp8_quant"])
@pytest.mark.parametrize("tokens", [1, 16, 1024, 16384])
def test_a_chain_of_dependent_launches_in_a_graph_equals_plain_launches(op, tokens):
    chain = _chains(tokens)[op]
    before = set_dependent_launch(False)
    try:
        expected = chain()
        set_dependent_launch(True)
        chain()  # warm every kernel outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = chain()
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(got, expected), f"{op} T={tokens}: a dependent chain in a graph differs"
        assert torch.equal(chain(), expected), f"{op} T={tokens}: a dependent chain called eagerly differs"
    finally:
        set_dependent_launch(before)
