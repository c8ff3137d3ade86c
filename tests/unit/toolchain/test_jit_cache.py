"""The JIT disk cache survives what notebooks do to it: edits, kills, corruption, races.

Builds here are real (gcc compiles a small CPython extension through a
registered Builder), so each test loads and calls what was built.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import jit, cache as jit_cache
from tests.hang_guard import with_hang_guard
from tests.jit_builders import GccBuilder, answer_source

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 60


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "jit"


@pytest.fixture
def builds(tmp_path) -> Path:
    """Each real build appends one line here."""
    log = tmp_path / "builds.log"
    jit.register_builder("test-gcc", GccBuilder(log=log))
    return log


def _count(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _source(tmp_path: Path, value: int, comment: str = "") -> Path:
    src = tmp_path / "src" / "answer.c"
    src.parent.mkdir(exist_ok=True)
    src.write_text(answer_source(value, comment))
    return src


def _build(src: Path, name: str = "answer") -> jit.BuildResult:
    return jit.build_jit(name, src, extra_cuda_cflags=(), builder="test-gcc")


def _subprocess_build(src: Path, name: str, cache: Path, builder_args: str) -> list[str]:
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from rapid_llm.kernels.toolchain import jit
        from tests.jit_builders import GccBuilder
        jit.register_builder("test-gcc", GccBuilder({builder_args}))
        result = jit.build_jit({name!r}, {str(src)!r}, extra_cuda_cflags=(), builder="test-gcc")
        print("answer", result.module.answer(), flush=True)
    """)
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=str(cache.parent))
    return [sys.executable, "-c", script], env


def test_unchanged_source_loads_from_cache_and_returns_the_same_module(tmp_path, builds):
    src = _source(tmp_path, 1)
    first = _build(src)
    again = _build(src)
    assert first.module.answer() == 1
    assert (first.cached, again.cached) == (False, True)
    assert again.module is first.module
    assert _count(builds) == 1


def test_edited_source_builds_a_new_module_and_the_new_code_runs(tmp_path, builds):
    src = _source(tmp_path, 1)
    old = _build(src)
    src.write_text(answer_source(2))
    new = _build(src)
    assert new.module.__name__ != old.module.__name__
    assert (old.module.answer(), new.module.answer()) == (1, 2)
    assert _count(builds) == 2


def test_a_long_lived_process_loads_the_file_as_it_stands_not_its_first_build(tmp_path, builds, monkeypatch):
    """load_jit's memo (a row's first call) follows the file: the verify worker serves jobs across cell edits."""
    monkeypatch.setattr(jit, "default_builder", lambda source: "test-gcc")
    src = _source(tmp_path, 1)
    first = jit.load_jit("answer", str(src), extra_cuda_cflags=())
    assert jit.load_jit("answer", str(src), extra_cuda_cflags=()) is first and _count(builds) == 1
    staged = src.with_suffix(".new")  # saved the way a cell is: written beside, then renamed over
    staged.write_text(answer_source(2))
    os.replace(staged, src)
    assert (first.answer(), jit.load_jit("answer", str(src), extra_cuda_cflags=()).answer()) == (1, 2)


def test_published_build_directory_holds_no_leftovers(tmp_path, builds, cache_dir):
    result = _build(_source(tmp_path, 1))
    assert not (result.build_dir / "lock").exists()
    assert not list(cache_dir.glob("*.staging-*"))
    manifest = json.loads((result.build_dir / jit_cache.MANIFEST).read_text())
    assert manifest["builder"] == "test-gcc"


def test_truncated_binary_is_rebuilt_not_loaded(tmp_path, builds, cache_dir):
    """An earlier session's binary, truncated on disk (built elsewhere: a loaded one is mapped)."""
    src = _source(tmp_path, 3)
    cmd, env = _subprocess_build(src, "answer", cache_dir, f"log=Path({str(builds)!r})")
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)
    (build_dir,) = [p for p in cache_dir.iterdir() if p.is_dir()]
    so = build_dir / json.loads((build_dir / jit_cache.MANIFEST).read_text())["binary"]
    so.write_bytes(so.read_bytes()[:100])
    again = _build(src)
    assert again.module.answer() == 3
    assert again.cached is False
    assert _count(builds) == 2
    manifest = json.loads((again.build_dir / jit_cache.MANIFEST).read_text())
    assert jit_cache._sha256(again.build_dir / manifest["binary"]) == manifest["sha256"]


def test_unreadable_manifest_is_rebuilt(tmp_path, builds):
    src = _source(tmp_path, 4)
    first = _build(src)
    (first.build_dir / jit_cache.MANIFEST).write_text("{not json")
    again = _build(src)
    assert again.cached is False and again.module.answer() == 4


def test_failed_build_leaves_no_cache_entry_and_reports_the_log(tmp_path, builds, cache_dir):
    src = tmp_path / "broken.c"
    src.write_text("int main( {\n")
    with pytest.raises(jit.BuildError) as info:
        _build(src, name="broken")
    assert "broken.c" in info.value.log and "error" in info.value.log
    assert list(cache_dir.iterdir()) == [p for p in cache_dir.iterdir() if p.suffix == ".flock"]


def test_unknown_builder_is_named_with_the_registered_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown JIT builder 'nope'.*torch"):
        jit.build_jit("answer", _source(tmp_path, 1), builder="nope")


def test_build_killed_half_way_does_not_hang_the_next_one(tmp_path, builds, cache_dir):
    """SIGKILL a build while it holds the lock, with torch's ``lock`` file written; rebuild."""
    src = _source(tmp_path, 5, comment="killed")
    started = tmp_path / "started"
    cmd, env = _subprocess_build(src, "answer", cache_dir, f"delay=120, started=Path({str(started)!r})")
    victim = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not started.exists():
            assert victim.poll() is None, victim.stderr.read().decode()
            assert time.monotonic() < deadline, "the victim build never started"
            time.sleep(0.05)
        staging = list(cache_dir.glob("*.staging-*"))
        assert len(staging) == 1 and (staging[0] / "lock").exists()
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        victim.stdout.close()
        victim.stderr.close()

    result = with_hang_guard(lambda: _build(src), HANG_GUARD_S, "build")
    assert result.cached is False and result.module.answer() == 5
    assert not list(cache_dir.glob("*.staging-*")), "the dead build's staging directory was not cleaned"


def test_two_processes_building_at_once_end_with_one_good_build(tmp_path, builds, cache_dir):
    src = _source(tmp_path, 6, comment="race")
    cmd, env = _subprocess_build(src, "answer", cache_dir, f"log=Path({str(builds)!r}), delay=0.5")
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=HANG_GUARD_S) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert "answer 6" in out
    assert _count(builds) == 1
    assert len([p for p in cache_dir.iterdir() if p.is_dir()]) == 1
