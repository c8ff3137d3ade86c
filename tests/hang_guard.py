"""Fail a test, rather than hang the suite, when a call blocks (a dead build's lock, say)."""
from __future__ import annotations

import threading
from typing import Any, Callable

import pytest


def with_hang_guard(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """Run ``fn`` in a daemon thread; return its value, re-raise its error, or fail after ``seconds``."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{what} still blocked after {seconds} s: a dead build's lock is hanging it")
    if "error" in box:
        raise box["error"]
    return box["value"]
