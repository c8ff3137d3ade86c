"""A build is a function of the bytes it read: the key names them and the compilers read a copy of them.

Builds are real (gcc compiles a small CPython extension through a registered builder), so what runs says
which bytes were built.
"""
from __future__ import annotations

import json
import os

import pytest

from rapid_llm.kernels.toolchain import cache, jit, snapshot
from tests.jit_builders import GccBuilder, answer_source


class OverwritingBuilder(GccBuilder):
    """Saves another cell's text to the user's file while the build runs, as a second process would."""

    name = "test-gcc-overwrite"

    def __init__(self, origin, text: str) -> None:
        super().__init__()
        self.origin, self.text = origin, text

    def build(self, request):  # noqa: ANN001
        self.origin.write_text(self.text)
        return super().build(request)


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    jit.register_builder("test-gcc", GccBuilder())
    return tmp_path / "cache"


def _source(tmp_path, value: int, name: str = "answer.c"):
    src = tmp_path / "csrc" / name
    src.parent.mkdir(exist_ok=True)
    src.write_text(answer_source(value))
    return src


def test_a_file_rewritten_during_the_build_does_not_reach_it(tmp_path):
    src = _source(tmp_path, 1)
    jit.register_builder("test-gcc-overwrite", OverwritingBuilder(src, answer_source(2)))
    result = jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc-overwrite")
    assert result.module.answer() == 1  # what the build read, not what the file holds now
    assert src.read_text() == answer_source(2)
    assert (result.build_dir / cache.SOURCES_DIR / "answer.c").read_text() == answer_source(1)
    assert result.compiled_source.read_text() == answer_source(1) and result.snapshot.text == answer_source(1)
    again = jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc")
    assert again.module.answer() == 2 and again.build_dir != result.build_dir


def test_the_text_given_is_built_whatever_the_file_holds(tmp_path):
    src = _source(tmp_path, 3)
    result = jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc", text=answer_source(4))
    assert result.module.answer() == 4 and src.read_text() == answer_source(3)
    manifest = json.loads((result.build_dir / cache.MANIFEST).read_text())
    assert manifest["source"] == str(src.resolve())


def test_a_compile_error_names_the_users_file_not_the_cached_copy(tmp_path):
    src = tmp_path / "csrc" / "broken.c"
    src.parent.mkdir()
    src.write_text(answer_source(5).replace("PyLong_FromLong(5)", "PyLong_FromLong(undefined_name)"))
    with pytest.raises(jit.BuildError) as err:
        jit.build_jit("broken", src, extra_cuda_cflags=(), builder="test-gcc")
    assert f"{src.resolve()}:" in err.value.log and "undefined_name" in err.value.log
    assert "jit-sources" not in str(err.value) and "jit-sources" not in err.value.log
    assert err.value.source == src.resolve()


def test_a_header_outside_the_sources_folder_is_snapshotted_with_its_path(tmp_path):
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "shared.h").write_text("#define VALUE 6\n")
    op = tmp_path / "group" / "op"
    op.mkdir()
    src = op / "answer.c"
    src.write_text('#include "../shared.h"\n' + answer_source(0).replace("PyLong_FromLong(0)", "PyLong_FromLong(VALUE)"))
    snap = snapshot.take(src)
    assert [rel for rel, _ in snap.files] == ["op/answer.c", "shared.h"]
    assert jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc").module.answer() == 6
    (tmp_path / "group" / "shared.h").write_text("#define VALUE 7\n")
    assert jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc").module.answer() == 7


@pytest.mark.parametrize("change", ["source", "header", "flags", "nvcc_env_flags", "builder", "compiler", "nvrtc",
                                    "arch"])
def test_the_key_changes_with_everything_that_changes_the_binary(change, tmp_path, monkeypatch):
    from rapid_llm.kernels.toolchain.fastpath import device

    src = _source(tmp_path, 8)
    header = tmp_path / "csrc" / "extra.h"
    header.write_text("// a header\n")
    src.write_text('#include "extra.h"\n' + src.read_text())
    before = cache.cache_key(snapshot.take(src), ("-O3",), "fast")
    flags, builder = ("-O3",), "fast"
    if change in ("compiler", "nvrtc"):  # the process's toolchain is asked once; these two pretend it changed
        cache._toolchain_fingerprint.cache_clear()
    if change == "source":
        src.write_text(src.read_text() + "\n")
    elif change == "header":
        header.write_text("// another header\n")
    elif change == "flags":
        flags = ("-O3", "-lineinfo")
    elif change == "nvcc_env_flags":  # nvcc adds them to every command it runs
        monkeypatch.setenv("NVCC_APPEND_FLAGS", os.environ.get("NVCC_APPEND_FLAGS", "") + " -lineinfo")
    elif change == "builder":
        builder = "torch"
    elif change == "compiler":
        monkeypatch.setattr(cache, "_tool_version", lambda tool: f"{tool} 99.0")
    elif change == "nvrtc":
        monkeypatch.setattr(device, "nvrtc_identity", lambda: "libnvrtc.so.99")
    elif change == "arch":
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")
    try:
        assert cache.cache_key(snapshot.take(src), flags, builder) != before
    finally:
        cache._toolchain_fingerprint.cache_clear()
