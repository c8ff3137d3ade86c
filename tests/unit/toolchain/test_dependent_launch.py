"""Programmatic dependent launch (rl::launch_dependent): the switch, and the waits in the shipped sources.

A dependent kernel may start before the kernel ahead of it on the stream has finished; its in-kernel wait is
what keeps it from reading that kernel's output early, so every kernel of a source that launches dependently
must wait before it touches memory. Chains of dependent kernels on a GPU are in
tests/gpu/unit/toolchain/test_dependent_launch.py.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from rapid_llm.kernels.toolchain.fastpath.binding import DEPENDENT_LAUNCH_ENV, plain_launches, set_dependent_launch
from rapid_llm.kernels import platform

needs_toolchain = pytest.mark.skipif(shutil.which("gcc") is None, reason="the call binding is built with gcc")

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
