"""A live elapsed-time line while a build runs, and one summary line when it ends.

In a notebook the line is a display that updates in place and finally
becomes the summary; elsewhere (terminal IPython, tests) it is printed once
at the start and the summary once at the end. The work runs in a helper
thread so that the cell's own thread, the one whose output reaches the cell,
does the updating. Quick work (a cache hit) shows no progress line at all.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")

__all__ = ["StatusLine", "run_with_progress", "elapsed"]


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


class StatusLine:
    """One line of cell output that can be rewritten (notebook) or appended to (elsewhere)."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self._handle: Any = None

    def show(self, text: str) -> None:
        if not self.live:
            print(text, flush=True)
            return
        bundle = {"text/plain": text}
        if self._handle is None:
            from IPython.display import display

            self._handle = display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)

    def update(self, text: str) -> None:
        """A tick: rewritten in place when live, dropped otherwise (no scrolling wall of lines)."""
        if self.live:
            self.show(text)

    def close(self, text: str) -> None:
        """Rewrite the live line, if there is one, without printing anything otherwise."""
        if self.live and self._handle is not None:
            self.show(text)

    def finish(self, text: str) -> None:
        """The last word: replaces the live line if there is one, else printed."""
        if self.live and self._handle is not None:
            self.show(text)
        else:
            print(text, flush=True)


class _Outcome(Generic[T]):
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None


def run_with_progress(work: Callable[[], T], label: str, status: StatusLine, *,
                      quiet_for: float = 0.3, every: float = 1.0) -> tuple[T, bool]:
    """Run ``work`` showing ``label [mm:ss elapsed]``; returns its value and whether a line was shown.

    An exception from ``work`` is re-raised here. An interrupt (Ctrl-C, the
    notebook's stop button) returns control at once; the work itself cannot
    be stopped mid-compile and finishes in the background.
    """
    outcome: _Outcome[T] = _Outcome()

    def target() -> None:
        try:
            outcome.value = work()
        except BaseException as exc:  # handed to the cell's thread below
            outcome.error = exc
        finally:
            outcome.done.set()

    start = time.perf_counter()
    threading.Thread(target=target, name=f"rapid_llm {label}", daemon=True).start()
    shown = False
    try:
        if not outcome.done.wait(quiet_for):
            status.show(f"{label}  [{elapsed(time.perf_counter() - start)} elapsed]")
            shown = True
            while not outcome.done.wait(every):
                status.update(f"{label}  [{elapsed(time.perf_counter() - start)} elapsed]")
    except KeyboardInterrupt:
        status.finish(f"{label}: interrupted after {elapsed(time.perf_counter() - start)}; "
                      "the compiler finishes in the background and re-running the cell picks it up")
        raise
    if outcome.error is not None:
        raise outcome.error
    return outcome.value, shown  # type: ignore[return-value]
