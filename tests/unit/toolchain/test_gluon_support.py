"""The Gluon probe: each reason a Gluon row is filtered, read from Triton's files (no import of triton)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import gluon_support


def fake_triton(root: Path, version: str | None, gluon: bool) -> Path:
    """A Triton package folder as the probe reads it: its __init__.py's version line, and Gluon's package or not."""
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("" if version is None else f'__version__ = "{version}"\n')
    if gluon:
        (root / "experimental" / "gluon").mkdir(parents=True)
        (root / "experimental" / "gluon" / "__init__.py").write_text("")
    return root


def test_no_triton_says_so():
    answer = gluon_support.check(None)
    assert not answer and answer.reason.startswith("triton is not installed")


def test_a_triton_without_gluon_names_its_version(tmp_path):
    answer = gluon_support.check(fake_triton(tmp_path / "triton", "3.2.0", gluon=False))
    assert not answer and "Triton 3.2 has no Gluon" in answer.reason


def test_a_gluon_older_than_the_rows_api_is_filtered(tmp_path):
    answer = gluon_support.check(fake_triton(tmp_path / "triton", "3.5.1", gluon=True))
    assert not answer and "Triton >= 3.6" in answer.reason and "Triton 3.5 may differ" in answer.reason


@pytest.mark.parametrize("version", ["3.6.0", "3.9.0", "3.10.0+git1234", "4.0.0"])
def test_the_rows_gluon_and_later_pass(tmp_path, version):
    assert gluon_support.check(fake_triton(tmp_path / "triton", version, gluon=True))


def test_an_unreadable_version_is_not_taken_for_a_good_one(tmp_path):
    answer = gluon_support.check(fake_triton(tmp_path / "triton", None, gluon=True))
    assert not answer and "of an unknown version" in answer.reason


def test_cpu_tensors_are_refused_for_want_of_an_interpreter(monkeypatch):
    monkeypatch.setattr(gluon_support, "installed", lambda: gluon_support.Availability(True))
    assert gluon_support.available("cpu").reason == gluon_support.NO_INTERPRETER


def test_the_probe_imports_no_triton():
    code = ("import sys; from rapid_llm.kernels.toolchain import gluon_support as g; g.available('cpu'); "
            "print('triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
