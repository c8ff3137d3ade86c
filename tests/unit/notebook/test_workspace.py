"""Where cells are saved, which names they may use, and that a save is all or nothing."""
from __future__ import annotations

import os

import pytest

from rapid_llm.notebook import workspace


def test_csrc_is_beside_the_nearest_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    deep = tmp_path / "notebooks" / "drafts"
    deep.mkdir(parents=True)
    assert workspace.project_root(deep) == tmp_path.resolve()
    assert workspace.default_csrc(deep) == tmp_path.resolve() / "csrc"


def test_csrc_falls_back_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(workspace, "project_root", lambda start=None: None)
    monkeypatch.chdir(tmp_path)
    assert workspace.default_csrc() == tmp_path.resolve() / "csrc"


@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", "..", "x.cu", "", "1st", "caf\u00e9", "a-b"])
def test_names_that_are_not_plain_identifiers_are_refused(tmp_path, name):
    with pytest.raises(workspace.WorkspaceError, match="plain identifier"):
        workspace.cell_path(tmp_path / "csrc", "", name)
    with pytest.raises(workspace.WorkspaceError, match="--group"):
        workspace.cell_path(tmp_path / "csrc", name or "/", "ok")


def test_cell_path_is_group_then_name(tmp_path):
    csrc = tmp_path / "csrc"
    assert workspace.cell_path(csrc, "elementwise", "scale_vec") == csrc.resolve() / "elementwise" / "scale_vec.cu"
    assert workspace.cell_path(csrc, "", "scale_vec") == csrc.resolve() / "scale_vec.cu"


def test_a_symlinked_group_cannot_lead_outside_csrc(tmp_path):
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (csrc / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(workspace.WorkspaceError, match="outside"):
        workspace.cell_path(csrc, "linked", "scale_vec")


def test_write_atomic_writes_exactly_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "csrc" / "g" / "k.cu"
    text = "// no trailing newline, tabs\tand unicode-free ASCII"
    assert workspace.write_atomic(path, text) is True
    assert path.read_bytes() == text.encode()
    assert os.listdir(path.parent) == ["k.cu"]
    assert path.stat().st_mode & 0o644 == 0o644


def test_write_atomic_leaves_an_unchanged_file_untouched(tmp_path):
    path = tmp_path / "k.cu"
    workspace.write_atomic(path, "a")
    before = path.stat().st_mtime_ns
    assert workspace.write_atomic(path, "a") is False
    assert path.stat().st_mtime_ns == before


def test_a_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "k.cu"
    workspace.write_atomic(path, "old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(workspace.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        workspace.write_atomic(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["k.cu"]
