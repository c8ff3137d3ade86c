"""A row as it was: at a git commit (a .cu row and a Python row), or in a saved build by source digest."""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from rapid_llm.bench import row_versions
from rapid_llm.bench.compare import compare
from rapid_llm.bench.row_versions import VersionError, at_commit, from_saved_build, registered, saved_builds, version
from rapid_llm.kernels.toolchain import cache as build_cache
from rapid_llm.kernels.toolchain import jit
from rapid_llm.kernels.toolchain.jit_row import JitRow, source_digest
from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import KernelSpec, register
from tests.jit_builders import GccBuilder, answer_source


@pytest.fixture
def gcc(tmp_path):
    jit.register_builder("test-gcc", GccBuilder(log=tmp_path / "builds.log"))


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", *files)
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "--short", "HEAD").strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    return root


def _jit_row(source: Path, name: str = "jit/answer") -> KernelSpec:
    return register(KernelSpec(name=name, op="scale", backend="jit", target=JitRow(source, "answer")))


# ---------------------------------------------------------------- saved builds


def test_a_build_keeps_the_sources_it_was_built_from(tmp_path, gcc):
    src = tmp_path / "csrc" / "g" / "answer.c"
    src.parent.mkdir(parents=True)
    (src.parent / "value.h").write_text("#define VALUE 1\n")
    src.write_text('#include "value.h"\n' + answer_source(1))
    built = jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc")
    kept = built.build_dir / build_cache.SOURCES_DIR
    assert (kept / "answer.c").read_text() == src.read_text()
    assert (kept / "value.h").read_text() == "#define VALUE 1\n"


def test_saved_builds_are_listed_newest_first_and_restored_by_digest(tmp_path, gcc):
    src = tmp_path / "csrc" / "g" / "answer.c"
    src.parent.mkdir(parents=True)
    texts = [answer_source(v) for v in (1, 2)]
    dirs = []
    for i, text in enumerate(texts):
        src.write_text(text)
        dirs.append(jit.build_jit("answer", src, extra_cuda_cflags=("-O1",), builder="test-gcc").build_dir)
        os.utime(dirs[-1] / build_cache.MANIFEST, (1_700_000_000 + i, 1_700_000_000 + i))
    row = _jit_row(src)
    builds = saved_builds(row)
    assert [b.digest for b in builds] == [source_digest(texts[1]), source_digest(texts[0])]
    assert builds[0].flags == ("-O1",) and builds[0].source_name == "answer.c"
    old = from_saved_build(row, builds[1].digest[:8])
    assert old.temporary and old.digest == source_digest(texts[0])
    assert old.name == f"jit/answer@build:{builds[1].digest[:10]}" and old.origin.startswith("saved build ")
    assert old.spec.target.source.read_text() == texts[0]
    assert not old.spec.target.source.is_relative_to(tmp_path / "csrc")  # written under the cache, not the tree
    assert old.spec.target.flags == ("-O1",) and not old.spec.golden.verified
    assert version(f"jit/answer@build:{builds[1].digest[:12]}").digest == old.digest
    with pytest.raises(VersionError, match="no saved build of answer.c has source digest 000000"):
        from_saved_build(row, "000000")
    with pytest.raises(VersionError, match="6 to 64 hex digits"):
        from_saved_build(row, "xyz")


def test_saved_builds_are_for_jit_rows():
    with pytest.raises(VersionError, match="triton/scale is a triton row: saved builds exist for JIT rows"):
        saved_builds("triton/scale")


# ---------------------------------------------------------------- commits


def test_a_cu_row_at_an_earlier_commit_comes_with_its_headers(repo):
    first = _commit(repo, {"csrc/g/answer.cu": '#include "k.cuh"\n// v1\n', "csrc/g/k.cuh": "// kernels v1\n"}, "one")
    _commit(repo, {"csrc/g/answer.cu": '#include "k.cuh"\n// v2\n', "csrc/g/k.cuh": "// kernels v2\n"}, "two")
    row = _jit_row(repo / "csrc" / "g" / "answer.cu")
    old = at_commit(row, "HEAD~1")
    assert old.name == f"jit/answer@{first}" and old.origin == f"commit {first}"
    assert old.spec.target.source.read_text() == '#include "k.cuh"\n// v1\n'
    assert (old.spec.target.source.parent / "k.cuh").read_text() == "// kernels v1\n"
    assert old.digest == source_digest('#include "k.cuh"\n// v1\n') != row_versions.digest_of(row)
    assert version(f"jit/answer@{first}").spec.target.source == old.spec.target.source


def test_commit_errors_say_what_is_missing(repo, tmp_path):
    _commit(repo, {"a.txt": "a\n"}, "one")
    _commit(repo, {"csrc/g/answer.cu": "// new\n"}, "two")
    row = _jit_row(repo / "csrc" / "g" / "answer.cu")
    with pytest.raises(VersionError, match="csrc/g/answer.cu does not exist at commit .* give its path then"):
        at_commit(row, "HEAD~1")
    with pytest.raises(VersionError, match="no commit 'nope'"):
        at_commit(row, "nope")
    loose = tmp_path / "loose" / "g" / "x.cu"
    loose.parent.mkdir(parents=True)
    loose.write_text("// x\n")
    with pytest.raises(VersionError, match="is not in a git checkout"):
        at_commit(_jit_row(loose, "jit/loose"), "HEAD")


def test_a_python_row_at_an_earlier_commit_runs_its_old_code_and_compares(repo, monkeypatch):
    code = textwrap.dedent("""
        import torch

        def scale(input, factor, out=None):
            result = input * factor * {k}
            return result if out is None else out.copy_(result)
    """)
    first = _commit(repo, {"old_scale_mod.py": code.format(k=1)}, "right")
    _commit(repo, {"old_scale_mod.py": code.format(k=2)}, "wrong")
    monkeypatch.syspath_prepend(str(repo))
    register(KernelSpec(name="external/scale_mod", op="scale", backend="external", target="old_scale_mod:scale",
                        devices=("cpu",)))
    old = version("external/scale_mod@HEAD~1")
    x = torch.ones(4)
    assert torch.equal(old.spec.load()(x, 3.0), 3 * x)
    assert torch.equal(_spec.get_row("external/scale_mod").load()(x, 3.0), 6 * x)
    with registered(old):
        assert _spec.get_row(old.name) is old.spec
    with pytest.raises(_spec.RegistryError):
        _spec.get_row(old.name)  # registered only while compared
    c = compare("external/scale_mod@HEAD~1", "external/scale_mod", sizes=[256], dtypes=["fp32"], seconds=0.5,
                min_pairs=5, repeats=2, warmup=1, why=False)
    assert c.a.row == f"external/scale_mod@{first}" and c.a.origin == f"commit {first}" and c.a.verdict == "pass"
    assert c.b.verdict.startswith("FAIL") and c.refused  # the edit broke it: not timed
    assert c.a.digest != c.b.digest
