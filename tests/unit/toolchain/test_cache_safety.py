"""What the build cache refuses to load, what it heals, and what it says when the disk says no.

Builds are real: gcc compiles a small CPython extension through a registered builder (the PCH test runs the
fast path itself). Faults are real too where root allows: another user's files (chown), a read-only or full
tmpfs; elsewhere those tests skip and say why.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import cache, jit
from rapid_llm.kernels.toolchain.cache import CacheError, CacheRepaired
from tests.disk_faults import OTHER_UID, fill, give_away, remount_read_only, tmpfs
from tests.jit_builders import GccBuilder, answer_source


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    jit.register_builder("test-gcc", GccBuilder(log=tmp_path / "builds.log"))
    return tmp_path / "cache"


def _source(folder: Path, value: int) -> Path:
    src = folder / f"src{value}" / "answer.c"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(answer_source(value))
    return src


def _build(src: Path) -> jit.BuildResult:
    return jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc")


def _binary(entry: Path) -> Path:
    return entry / json.loads((entry / cache.MANIFEST).read_text())["binary"]


# ------------------------------------------------------------------ damaged or in the way: rebuilt


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nvcc") is None,
                    reason="the precompiled header is the fast path's: it needs g++ and nvcc")
def test_a_damaged_precompiled_header_is_rebuilt_not_fed_to_the_compiler(tmp_path, cache_root):
    from rapid_llm.kernels.toolchain.fastpath import builder
    from tests.unit.toolchain.race_worker import race_body

    builder._host_support.cache_clear()
    first = tmp_path / "first" / "cell.cu"
    first.parent.mkdir()
    first.write_text(race_body("pch-1"))
    jit.build_jit("cell", first)
    (pch,) = cache_root.glob("jit/host_support_*/rapid_llm_pch.h.gch")
    pch.write_bytes(pch.read_bytes()[:4096])  # truncated, as a full disk or a killed copy leaves it
    builder._host_support.cache_clear()  # a new process
    second = tmp_path / "second" / "cell.cu"
    second.parent.mkdir()
    second.write_text(race_body("pch-2"))
    with pytest.warns(CacheRepaired, match=r"rebuilding .*host_support_\w+: rapid_llm_pch\.h\.gch does not match"):
        result = jit.build_jit("cell", second)
    assert b"RLHOST:pch-2:END" in Path(result.module.__file__).read_bytes()


def test_a_file_where_an_entry_goes_heals_on_the_next_build(tmp_path):
    src = _source(tmp_path, 3)
    entry = _build(src).build_dir
    shutil.rmtree(entry)
    entry.write_text("not a build")
    with pytest.warns(CacheRepaired, match=str(entry)):
        again = _build(src)
    assert again.build_dir == entry and entry.is_dir() and again.module.answer() == 3


def test_a_dead_builds_staging_folder_is_removed_by_the_next_build(tmp_path):
    src = _source(tmp_path, 4)
    entry = _build(src).build_dir
    shutil.rmtree(entry)
    stale = entry.parent / f"{entry.name}.staging-1-dead"
    (stale / "half").mkdir(parents=True)
    assert _build(src).module.answer() == 4
    assert not stale.exists()


def test_a_manifest_naming_a_binary_outside_its_entry_is_rebuilt_never_loaded(tmp_path):
    src, other = _source(tmp_path, 5), _source(tmp_path, 6)
    entry = _build(src).build_dir
    planted = _binary(_build(other).build_dir)
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    manifest["binary"] = str(planted)
    manifest["files"][str(planted)] = manifest["files"].pop(Path(_binary(entry)).name)
    (entry / cache.MANIFEST).write_text(json.dumps(manifest))
    assert cache._cached_binary(entry) is None
    with pytest.warns(CacheRepaired, match="outside the entry"):
        so, cached = cache.fetch_binary(jit.BuildRequest("answer", src, (), "k", entry), GccBuilder())
    assert not cached and so.parent == entry


def test_an_entry_that_is_a_symlink_is_rebuilt_not_followed(tmp_path):
    src, other = _source(tmp_path, 7), _source(tmp_path, 8)
    entry = _build(src).build_dir
    shutil.rmtree(entry)
    entry.symlink_to(_build(other).build_dir)
    with pytest.warns(CacheRepaired, match="symlink"):
        so, _ = cache.fetch_binary(jit.BuildRequest("answer", src, (), "k", entry), GccBuilder())
    assert not entry.is_symlink() and so.parent == entry


def test_a_symlinked_lock_of_ours_is_replaced_and_its_target_untouched(tmp_path):
    src = _source(tmp_path, 9)
    entry = _build(src).build_dir
    shutil.rmtree(entry)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    lock = entry.parent / f"{entry.name}.flock"
    lock.unlink()
    lock.symlink_to(victim)
    assert _build(src).module.answer() == 9
    assert not lock.is_symlink() and victim.read_text() == "keep me"


def test_a_cache_folder_of_ours_that_others_can_write_is_tightened(tmp_path):
    src = _source(tmp_path, 10)
    folder = _build(src).build_dir.parent
    os.chmod(folder, 0o777)
    assert _build(src).module.answer() == 10
    assert os.stat(folder).st_mode & 0o022 == 0


# ------------------------------------------------------------------ another user's: refused


@pytest.fixture
def world_writable_cache(cache_root) -> Path:
    """The jit folder as a shared /tmp-like folder: everyone may write, the sticky bit protects entries."""
    folder = cache_root / "jit"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o1777)
    return folder


def test_a_binary_another_user_planted_is_refused_even_with_a_matching_manifest(tmp_path, world_writable_cache):
    src, other = _source(tmp_path, 11), _source(tmp_path, 12)
    entry = _build(src).build_dir
    planted = _build(other).build_dir
    shutil.rmtree(entry)
    shutil.copytree(planted, entry)  # their code, under our key, with a manifest that checks out
    give_away(entry)
    for _ in range(2):  # refused, and refused again: nothing loads it, nothing deletes their files
        with pytest.raises(CacheError, match=rf"refusing the build cache entry {entry}: it is owned by uid "
                                             rf"{OTHER_UID}.*RAPID_LLM_CACHE_DIR"):
            jit.build_jit("answer", src, extra_cuda_cflags=(), builder="test-gcc")
    assert entry.is_dir()


def test_a_lock_another_user_planted_as_a_symlink_is_refused(tmp_path, world_writable_cache):
    src = _source(tmp_path, 13)
    entry = _build(src).build_dir
    shutil.rmtree(entry)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    lock = entry.parent / f"{entry.name}.flock"
    lock.unlink()
    lock.symlink_to(victim)
    give_away(lock)
    with pytest.raises(CacheError, match=rf"{lock} is in the build cache's way and belongs to uid {OTHER_UID}"):
        _build(src)
    assert victim.read_text() == "keep me" and lock.is_symlink()


def test_a_cache_folder_another_user_owns_and_anyone_can_write_is_refused(tmp_path, cache_root):
    folder = cache_root / "jit"
    folder.mkdir(parents=True)
    give_away(folder)
    os.chmod(folder, 0o777)
    with pytest.raises(CacheError, match=rf"refusing the build cache folder {folder}: uid {OTHER_UID} owns it"):
        _build(_source(tmp_path, 14))


def test_the_shared_opt_in_loads_a_trusted_users_entry(tmp_path, world_writable_cache, monkeypatch):
    src = _source(tmp_path, 15)
    entry = _build(src).build_dir
    give_away(entry)
    monkeypatch.setenv("RAPID_LLM_CACHE_SHARED", "1")
    again = _build(src)
    assert again.cached and again.module.answer() == 15


# ------------------------------------------------------------------ disk faults: one line, nothing half-written


def test_a_read_only_cache_says_so_in_one_line_and_still_loads_what_it_holds(tmp_path, monkeypatch):
    with tmpfs(tmp_path / "ro") as mount:
        monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(mount))
        built = _build(_source(tmp_path, 16))
        remount_read_only(mount)
        assert _build(_source(tmp_path, 16)).cached
        with pytest.raises(CacheError) as err:
            _build(_source(tmp_path, 17))
    assert "\n" not in str(err.value)
    assert "Read-only file system" in str(err.value) and "RAPID_LLM_CACHE_DIR" in str(err.value)
    assert str(built.build_dir.parent) in str(err.value)


def test_a_full_disk_says_so_in_one_line_leaves_nothing_and_heals_once_space_is_freed(tmp_path, monkeypatch):
    with tmpfs(tmp_path / "small", size="2m") as mount:
        monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(mount))
        _build(_source(tmp_path, 18))
        filler = fill(mount)
        with pytest.raises(CacheError) as err:
            _build(_source(tmp_path, 19))
        assert "\n" not in str(err.value) and "full" in str(err.value) and str(mount) in str(err.value)
        assert not list(mount.glob("jit/*.staging-*")) and not list(mount.glob("jit-sources/.*staging*"))
        filler.unlink()
        assert _build(_source(tmp_path, 19)).module.answer() == 19


def test_a_remembered_verdict_another_user_wrote_is_not_believed(world_writable_cache):
    from rapid_llm.kernels.registry.spec import GoldenRecord
    from rapid_llm.kernels.verification import remembered

    digest = "ab" * 32
    golden = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="native/scale")
    remembered.remember_verification(digest, golden, "scale")
    assert remembered.recall_verification(digest, "scale") is not None
    give_away(remembered._verification_path(digest))  # as if planted: "verified", by someone else
    assert remembered.recall_verification(digest, "scale") is None
