"""tune and sweep in a notebook: a progress bar that follows the stages, and the space as a picture."""
from __future__ import annotations

import io
from typing import Any, Callable

import ipywidgets
from IPython.display import Image, display

__all__ = ["tune_progress", "tune_picture"]


def tune_progress() -> Callable[[str, int, int], None]:
    """A progress bar (shown now) and the callback ``tune(..., progress=)`` drives it with: one bar per stage
    (compile and verify, then time), its label saying how many candidates are done."""
    bar = ipywidgets.IntProgress(min=0, max=1, value=0, description="tune", layout={"width": "60%"})
    label = ipywidgets.Label("")
    display(ipywidgets.HBox([bar, label]))

    def update(stage: str, done: int, total: int) -> None:
        bar.max, bar.value, bar.description = total, done, stage
        label.value = f"{done}/{total} candidates"
        if stage == "time" and done == total:
            bar.bar_style = "success"

    return update


def tune_picture(result: Any) -> Image:
    """The result's plot (TuneResult.plot) as a PNG: stored in the notebook, shown by any frontend."""
    buf = io.BytesIO()
    result.plot().savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")
