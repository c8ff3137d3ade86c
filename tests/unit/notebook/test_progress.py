"""The elapsed line: shown only for slow work, printed once outside a notebook, errors passed on."""
from __future__ import annotations

import threading

import pytest

from rapid_llm.notebook.progress import StatusLine, elapsed, run_with_progress


def test_elapsed_is_minutes_and_seconds():
    assert (elapsed(0), elapsed(7.9), elapsed(125)) == ("00:00", "00:07", "02:05")


def test_quick_work_shows_no_progress_line(capsys):
    value, shown = run_with_progress(lambda: 42, "building k.cu", StatusLine(live=False), quiet_for=5)
    assert (value, shown) == (42, False)
    assert capsys.readouterr().out == ""


def test_slow_work_prints_its_line_once_outside_a_notebook(capsys):
    release = threading.Event()

    def work() -> str:
        release.wait(10)
        return "done"

    threading.Timer(0.3, release.set).start()
    value, shown = run_with_progress(work, "building k.cu", StatusLine(live=False), quiet_for=0, every=0.05)
    assert (value, shown) == ("done", True)
    assert capsys.readouterr().out == "building k.cu  [00:00 elapsed]\n"


def test_the_work_s_exception_reaches_the_caller():
    def work() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_with_progress(work, "building k.cu", StatusLine(live=False))


def test_a_live_line_is_one_display_rewritten_in_place(monkeypatch):
    shown: list[tuple[str, str]] = []

    class Handle:
        def update(self, bundle, raw):
            shown.append(("update", bundle["text/plain"]))

    def display(bundle, raw, display_id):
        shown.append(("display", bundle["text/plain"]))
        return Handle()

    monkeypatch.setattr("IPython.display.display", display)
    status = StatusLine(live=True)
    status.show("building [00:00 elapsed]")
    status.update("building [00:01 elapsed]")
    status.finish("built in 1.0 s")
    assert shown == [("display", "building [00:00 elapsed]"), ("update", "building [00:01 elapsed]"),
                     ("update", "built in 1.0 s")]
