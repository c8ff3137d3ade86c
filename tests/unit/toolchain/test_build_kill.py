"""A build killed at any point leaves nothing the next build trips on: it builds, publishes an intact entry,
and no staging folder of the dead build survives it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import cache, jit
from tests.unit.toolchain.kill_worker import POINTS, arm
from tests.unit.toolchain.race_worker import race_body

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                                reason="compiling a cell needs g++ and nvcc")

HANG_GUARD_S = 120  # a killed build is a few seconds; only a hang gets here


def _die_building_at(point: str, source: Path) -> None:
    """Build ``source`` in a forked child armed to SIGKILL itself at ``point`` (a fork: no second torch import).

    The build's GPU facts are read here first: a forked child of a process whose CUDA is started cannot start
    it again, so on a GPU machine the child reuses what this process read (the same device, the same key)."""
    arch, arch_list = cache.target_arch(), cache._arch_list()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            cache.target_arch, cache._arch_list = (lambda: arch), (lambda: arch_list)
            arm(point)
            jit.build_jit("killed", source)
        except BaseException as exc:  # say why in the test's output: the point was never reached
            print(f"the forked build raised {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finally:
            os._exit(3)  # only reached when the point was never hit, or the build raised
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"the build did not die at {point}"


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache with the machine-wide builds (host support, call binding) done once for all points."""
    root = tmp_path_factory.mktemp("warm")
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=str(root))
    subprocess.run([sys.executable, "-c", "from rapid_llm.kernels.toolchain.fastpath.builder import warm; warm()"],
                   env=env, check=True, timeout=HANG_GUARD_S, capture_output=True)
    return root


@pytest.mark.parametrize("point", POINTS)
def test_a_build_killed_at_any_point_heals_on_the_next_run(point, tmp_path, warm_cache, monkeypatch):
    import torch

    if torch.cuda.is_initialized():
        pytest.skip("this worker has CUDA started, and a forked child's build then fails before the kill point "
                    "(5 of 9 points on an H100); the kill points are device-independent and CPU CI runs them")
    root = tmp_path / "cache"
    shutil.copytree(warm_cache, root)
    if point == "host_support":
        for built in root.glob("jit/host_support_*"):
            shutil.rmtree(built) if built.is_dir() else built.unlink()
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(root))
    source = tmp_path / "killed.cu"
    source.write_text(race_body(f"kill-{point}").replace("void cell(", "void killed(").replace("RL_EXPORT(cell)",
                                                                                                 "RL_EXPORT(killed)"))
    _die_building_at(point, source)

    result = jit.build_jit("killed", source)
    if point != "published":  # a build that died after publishing left a good entry: loading it is right
        assert result.cached is False
    manifest = json.loads((result.build_dir / cache.MANIFEST).read_text())
    assert cache._cached_binary(result.build_dir) == result.build_dir / manifest["binary"]
    assert b"RLHOST:kill-" + point.encode() in (result.build_dir / manifest["binary"]).read_bytes()
    assert not list(root.glob("jit/*.staging-*")), "a dead build's staging folder survived the next build"
    assert jit.build_jit("killed", source).cached  # and the entry serves the run after
