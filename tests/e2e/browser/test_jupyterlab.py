"""The tutorial notebooks in JupyterLab, in headless Chromium: what a user sees there, which nbval cannot see.

nbval already runs every cell of every notebook (``pytest --nbval notebooks``) and compares the outputs it
does not ignore, so this test does not run all ten again. It covers what only a browser shows, in two parts:

* **Run All, live**, of the notebooks in ``conftest.RUN_ALL`` (01 and 08), by JupyterLab's own Run menu: every
  cell ran; no error outside cells tagged ``raises-exception``; every widget rendered as a widget (not its
  repr, not "Error displaying widget") with its plot loaded as an image; the %%cuda_jit status lines;
  bench_plot's GB/s-latency toggle and dtype dropdown and explain_widget's size dropdown each redraw what
  they control (which takes a live kernel answering the widget's messages). Between them the two make every
  kind of live widget the tutorials show (bench_plot, golden_widget and explain_widget in 01, inspect_widget in
  08), both kinds of control, a %%cuda_jit draft that fails to compile (01), a cell built with -lineinfo and a
  kernel's printf (08).
* **Opened as committed**, every other notebook, trusted (``jupyter trust``, as a reader trusts a notebook:
  JupyterLab renders stored widgets only in a trusted one): JupyterLab shows every cell, each code cell saved as
  run with its outputs, each stored widget rendered from the widget state saved in the notebook (a view, its
  plots loaded as images, never "Error displaying widget" or the widget's text), each compare(a, b) cell's
  compare widget with its plot and table (notebook 04's three), and no error output outside cells tagged
  ``raises-exception``. That is what a reader opening the tutorial sees, and what a notebook saved without its
  widget state, or with a widget that no longer renders, breaks. They open one after another in one loaded
  JupyterLab, each connected to the one running kernel (ipywidgets renders saved widgets only once a kernel is
  connected; which kernel does not matter to a render): about 1.5 s a notebook, against about 7 s with a page
  load and a kernel start each. (The notebooks run with Run All open in the same page, each with a new kernel.)

That is enough because the rest is checked elsewhere: nbval runs every cell of these notebooks on this machine;
the widgets' Python side (tests/unit/notebook/test_widgets.py, test_compare_view.py, test_progress.py) and the
forms of the %%cuda_jit status line (test_magic.py, test_magic_build.py, test_magic_compile_only.py) have tests
of their own; and the browser side of each widget kind and control is the same code whichever notebook makes it.
``RAPID_LLM_LAB_RUN_ALL=1`` runs every notebook with Run All, as this test did before (about 200 s on a CPU,
against about 80 s). ``RAPID_LLM_SCREENSHOTS=1`` also saves a screenshot per notebook to
``docs/img/lab_<notebook>.png``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.e2e.browser.conftest import RUN_DIR, ROOT, missing_requirement, opened, run_all

if missing_requirement():  # lab_page needs playwright: skip before importing it
    pytest.skip(missing_requirement(), allow_module_level=True)

from tests.e2e.browser import lab_page  # noqa: E402

pytestmark = pytest.mark.browser

#: Seconds Run All may take per notebook (they take 5-20 s on a CPU).
RUN_TIMEOUT_S = 240
SCREENSHOT_DIR = ROOT / "docs" / "img"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: Where a notebook saves its widgets' models (metadata.widgets), which JupyterLab renders them from.
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
#: JupyterLab renders an error's traceback, like a stderr stream, as this MIME type.
ERROR_MIME = "application/vnd.jupyter.stderr"
WIDGET_REPR = re.compile(r"\b(?:HBox|VBox|Tab)\(children=")
#: Calls that display one of the project's widgets: a notebook making any shows at least one widget.
WIDGET_CALLS = ("bench_plot(", "golden_widget(", "explain_widget(", "inspect_widget(", "compare_widget(")
#: A call of compare(a, b): the cell that makes one shows the compare widget (its plot too, where it timed).
COMPARE_CALL = re.compile(r"(?<![\w.])compare\(")
BUILT_STATUS = re.compile(r"^(?:built in|loaded from cache in) [\d.]+ s.* -> .* bound")
#: Without a GPU a fast-path cell is compiled all the same (a compile check), and nothing is bound.
COMPILED_STATUS = r"^(?:built in [\d.]+ s|loaded from cache) for sm_\w+ \(a compile check: .*\); saved {path}"


@dataclass
class Tally:
    """What was checked in one notebook (printed, and quoted in every failure)."""

    cells: int = 0
    outputs: int = 0
    widgets: int = 0
    images: int = 0
    controls: int = 0
    status_lines: int = 0

    def __str__(self) -> str:
        return (f"{self.cells} code cells checked, {self.outputs} outputs, {self.widgets} widgets, "
                f"{self.images} plot images, {self.controls} controls changed, "
                f"{self.status_lines} %%cuda_jit status lines")


# -------------------------------------------------------- what the notebook says


def _source(cell: dict[str, Any]) -> str:
    return "".join(cell.get("source", ""))


def _tags(cell: dict[str, Any]) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _committed_result(cell: dict[str, Any]) -> dict[str, Any]:
    """The data of the cell's committed execute_result: what its last expression displays anywhere."""
    return next((o.get("data", {}) for o in cell.get("outputs", []) if o["output_type"] == "execute_result"), {})


def widget_cells(nb: dict[str, Any]) -> dict[int, bool]:
    """Cells whose last expression is a widget (any device), each with whether it shows a plot image."""
    found = {}
    for i, cell in enumerate(nb["cells"]):
        data = _committed_result(cell)
        if WIDGET_MIME in data:
            found[i] = "<img" in "".join(data.get("text/html", ""))
    return found


def saved_widget_cells(nb: dict[str, Any]) -> dict[int, bool]:
    """Cells with an output (displayed or the result) that is a widget whose model the notebook saved, each with
    whether that widget shows a plot image: what JupyterLab renders from the saved state."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
    found: dict[int, bool] = {}
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_MIME)
            if view and view.get("model_id") in state:
                found[i] = found.get(i, False) or "<img" in "".join(out["data"].get("text/html", ""))
    return found


# -------------------------------------------------------------------- checks


def check_every_cell_ran(nb: dict[str, Any], shown: list[lab_page.CellView], tally: Tally) -> list[str]:
    problems = []
    for cell, view in zip(nb["cells"], shown):
        if cell["cell_type"] != "code" or not _source(cell).strip():
            continue
        tally.cells += 1
        tally.outputs += len(view.outputs)
        if view.execution_count is None:
            problems.append(f"cell {view.index} did not run (prompt {view.prompt!r})")
    return problems


def check_no_errors(nb: dict[str, Any], shown: list[lab_page.CellView]) -> list[str]:
    return [f"cell {view.index} shows an error or stderr output:\n{out.text[:600]}"
            for cell, view in zip(nb["cells"], shown) if "raises-exception" not in _tags(cell)
            for out in view.outputs if out.mime == ERROR_MIME]


def check_no_widget_text(shown: list[lab_page.CellView]) -> list[str]:
    return [f"cell {view.index} shows a widget as text: {out.text[:200]!r}"
            for view in shown for out in view.outputs
            if WIDGET_REPR.search(out.text) or "Error displaying widget" in out.text]


def check_widgets(expected: dict[int, bool], shown: list[lab_page.CellView], tally: Tally) -> list[str]:
    problems = []
    for view in shown:
        tally.widgets += sum(out.widget_views for out in view.outputs)
        tally.images += sum(out.loaded_images for out in view.outputs)
    for index, with_image in expected.items():
        outputs = shown[index].outputs
        if not any(out.is_widget for out in outputs):
            problems.append(f"cell {index} should show a widget; it shows {[(o.mime, o.text[:80]) for o in outputs]}")
        elif with_image and not any(out.loaded_images for out in outputs):
            problems.append(f"cell {index}'s widget should show its plot as a loaded <img>; it has none")
    return problems


def compare_cells(nb: dict[str, Any]) -> list[int]:
    """Code cells that call compare(a, b): each shows its result as the compare widget."""
    return [i for i, cell in enumerate(nb["cells"])
            if cell["cell_type"] == "code" and COMPARE_CALL.search(_source(cell))]


def check_compare_widgets(cells_: list[int], page: Any, shown: list[lab_page.CellView]) -> list[str]:
    """Each cell that calls compare shows one compare widget (never its text), with the plot of B/A per size
    loaded as an image where the comparison was timed, and the table of the timed shapes."""
    problems = []
    for index in cells_:
        views = lab_page.compare_views(page, within=lab_page.cell_locator(page, index))
        if views.count() != 1:
            problems.append(f"cell {index} calls compare and should show one compare widget; it shows "
                            f"{views.count()}: {[(o.mime, o.text[:120]) for o in shown[index].outputs]}")
            continue
        text = views.first.inner_text()
        if "not timed:" in text:
            continue  # a side failed verify: the widget says why, and there is nothing to plot
        if not any(out.loaded_images for out in shown[index].outputs):
            problems.append(f"cell {index}'s compare widget should show its plot of B/A as a loaded <img>; it has none")
        if "95% CI" not in text or "verdict" not in text:
            problems.append(f"cell {index}'s compare widget shows no table of ratios and verdicts: {text[:300]!r}")
    return problems


def check_widget_calls_shown(nb: dict[str, Any], page: Any, tally: Tally) -> list[str]:
    """A notebook that makes widgets shows some; one that calls bench_plot shows a bench_plot."""
    sources = "".join(_source(c) for c in nb["cells"])
    problems = []
    if any(call in sources for call in WIDGET_CALLS) and not tally.widgets:
        problems.append(f"the notebook makes widgets ({', '.join(WIDGET_CALLS)}) but the page shows none")
    if "bench_plot(" in sources and not lab_page.bench_plot_views(page).count():
        problems.append("the notebook calls bench_plot but the page shows no bench_plot widget")
    return problems


def _magic_line_path(first_line: str) -> str:
    """A pattern of ``csrc/<group>/<NAME>.cu`` for a ``%%cuda_jit NAME [--group G] ...`` line (without
    --group the magic picks the group: the op's, or scratch)."""
    words = shlex.split(first_line)[1:]
    name = words[0]
    group = re.escape(words[words.index("--group") + 1]) if "--group" in words else r"\w+"
    return rf"csrc/{group}/{re.escape(name)}\.cu"


def check_cuda_jit_status(nb: dict[str, Any], shown: list[lab_page.CellView], tally: Tally) -> list[str]:
    """A %%cuda_jit cell answers with its status line: "built in ... -> ... bound" (or loaded from cache)
    where it runs, "built in ... for sm_90a (a compile check: ...)" where it compiles but cannot run,
    "saved csrc/...; not built: <why>" where it cannot compile."""
    problems = []
    for cell, view in zip(nb["cells"], shown):
        source = _source(cell)
        if cell["cell_type"] != "code" or not source.startswith("%%cuda_jit"):
            continue
        if "raises-exception" in _tags(cell) and any(o.mime == ERROR_MIME for o in view.outputs):
            continue  # the tagged draft fails to compile where it is built: its error is the point
        tally.status_lines += 1
        # printed (stdout), or a live status line (a display that the build's progress rewrote)
        text = next((o.text for o in view.outputs if o.text.strip() and o.mime != ERROR_MIME), "")
        first = text.strip().splitlines()[0] if text.strip() else ""
        path = _magic_line_path(source.splitlines()[0])
        saved = f"^saved {path}; not built: "
        if torch.cuda.is_available():
            ok = re.match(saved, first) or BUILT_STATUS.match(first)
        else:
            ok = re.match(saved, first) or re.match(COMPILED_STATUS.format(path=path), first)
        if not ok:
            problems.append(f"cell {view.index}'s %%cuda_jit status line should be a build line or match {saved!r}"
                            f"; it is {first!r}")
    return problems


def exercise_bench_plots(page: Any, tally: Tally) -> list[str]:
    """Flip each bench_plot's GB/s-latency toggle and its dtype dropdown; the plot must be redrawn."""
    problems = []
    views = lab_page.bench_plot_views(page)
    for i in range(views.count()):
        view = views.nth(i)
        image = "img.widget-image"
        before, after = lab_page.click_toggle(view, "latency", image, "src")
        tally.controls += 1
        if after == before:
            problems.append(f"bench_plot {i}: the latency toggle left the image as it was")
        dropdown = view.locator(".widget-dropdown").first
        dtypes = [label for label in lab_page.dropdown_labels(dropdown) if label != "all"]
        if len(dtypes) < 2:  # one dtype: "all" and that dtype draw the same figure
            print(f"bench_plot {i} has one dtype ({dtypes}): its dropdown cannot change the figure")
            continue
        label, before, after = lab_page.choose_other_option(view, dropdown, image, "src")
        tally.controls += 1
        if after == before:
            problems.append(f"bench_plot {i}: choosing dtype {label!r} left the image as it was")
    return problems


def exercise_explain_views(page: Any, tally: Tally) -> list[str]:
    """Pick another size in each explain widget; its table must be re-resolved for that size."""
    problems = []
    views = lab_page.explain_views(page)
    for i in range(views.count()):
        view = views.nth(i)
        numel = view.locator(".widget-dropdown", has_text="numel").first
        label, before, after = lab_page.choose_other_option(view, numel, ".widget-html-content", "innerText")
        tally.controls += 1
        if after == before:
            problems.append(f"explain widget {i}: choosing numel {label!r} left the table as it was")
    return problems


def save_screenshot(page: Any, stem: str, first_widget: int | None) -> Path:
    """The notebook panel, scrolled to its first widget (else its top), as docs/img/lab_<stem>.png."""
    if first_widget is not None:
        lab_page.cell_locator(page, first_widget).evaluate("el => el.scrollIntoView({block: 'start'})")
    page.mouse.move(0, 0)  # no hover highlight in the picture
    path = SCREENSHOT_DIR / f"lab_{stem}.png"
    page.locator(".jp-NotebookPanel:visible").first.screenshot(path=str(path))
    return path


# ---------------------------------------------------------------------- test


def _screenshot(page: Any, notebook: Path, expected: dict[int, bool]) -> None:
    if os.environ.get("RAPID_LLM_SCREENSHOTS") == "1":
        shot = save_screenshot(page, notebook.stem, min(expected, default=None))
        print(f"\nscreenshot: {shot.relative_to(ROOT)}")


@pytest.mark.parametrize("notebook", run_all(), ids=[nb.stem for nb in run_all()])
def test_notebook_runs_in_jupyterlab(notebook: Path, page: Any) -> None:
    nb = json.loads(notebook.read_text())
    tally = Tally()
    kernel = {"name": nb["metadata"]["kernelspec"]["name"]}  # a new kernel of its own, as a reader's
    lab_page.open_alone(page, f"{RUN_DIR.name}/{notebook.name}", len(nb["cells"]), kernel)
    lab_page.wait_for_kernel_idle(page)
    started = time.perf_counter()
    lab_page.run_all_cells(page)
    try:
        lab_page.wait_until_run_finished(page, RUN_TIMEOUT_S)
    except lab_page.PlaywrightTimeoutError as exc:
        pytest.fail(f"{notebook.name}: Run All did not finish in {RUN_TIMEOUT_S} s (kernel: "
                    f"{lab_page.kernel_status(page)!r}): {exc}")
    ran_s = time.perf_counter() - started

    expected = widget_cells(nb)
    comparing = compare_cells(nb)
    lab_page.wait_for_widget_views(page, sorted(set(expected) | set(comparing)))
    shown = lab_page.cells(page)
    assert len(shown) == len(nb["cells"]), f"the page shows {len(shown)} cells, the notebook has {len(nb['cells'])}"

    problems = check_every_cell_ran(nb, shown, tally)
    problems += check_no_errors(nb, shown)
    problems += check_no_widget_text(shown)
    problems += check_widgets(expected, shown, tally)
    problems += check_cuda_jit_status(nb, shown, tally)
    problems += check_widget_calls_shown(nb, page, tally)
    problems += check_compare_widgets(comparing, page, shown)

    _screenshot(page, notebook, expected)
    problems += exercise_bench_plots(page, tally)
    problems += exercise_explain_views(page, tally)

    print(f"\n{notebook.stem}: {tally} (Run All took {ran_s:.0f} s)")
    assert not problems, f"{notebook.name} in JupyterLab [{tally}]:\n" + "\n".join(problems)
    assert tally.cells > 0 and (tally.widgets >= len(expected)), f"{notebook.name}: too little was checked [{tally}]"


def check_committed_outputs_shown(nb: dict[str, Any], shown: list[lab_page.CellView], tally: Tally) -> list[str]:
    """Each code cell shows the prompt it was saved with, and some output where it saved outputs."""
    problems = []
    for cell, view in zip(nb["cells"], shown):
        if cell["cell_type"] != "code" or not _source(cell).strip():
            continue
        tally.cells += 1
        tally.outputs += len(view.outputs)
        saved = cell.get("execution_count")
        if saved is None:
            problems.append(f"cell {view.index} was saved without being run")
        elif view.execution_count != saved:
            problems.append(f"cell {view.index} shows prompt {view.prompt!r}; it was saved as run [{saved}]")
        elif cell.get("outputs") and not view.outputs:
            problems.append(f"cell {view.index} was saved with {len(cell['outputs'])} outputs; the page shows none")
    return problems


@pytest.mark.parametrize("notebook", opened(), ids=[nb.stem for nb in opened()])
def test_committed_notebook_renders_in_jupyterlab(notebook: Path, lab_app: Any, lab_server: Any) -> None:
    nb = json.loads(notebook.read_text())
    tally = Tally()
    page = lab_app
    lab_page.open_alone(page, f"{RUN_DIR.name}/{notebook.name}", len(nb["cells"]), {"id": lab_server.a_kernel()})
    expected = saved_widget_cells(nb)
    comparing = compare_cells(nb)
    lab_page.wait_for_widget_views(page, sorted(set(expected) | set(comparing)))
    shown = lab_page.cells(page)
    assert len(shown) == len(nb["cells"]), f"the page shows {len(shown)} cells, the notebook has {len(nb['cells'])}"

    problems = check_committed_outputs_shown(nb, shown, tally)
    problems += check_no_errors(nb, shown)
    problems += check_no_widget_text(shown)
    problems += check_widgets(expected, shown, tally)
    problems += check_compare_widgets(comparing, page, shown)
    _screenshot(page, notebook, expected)

    print(f"\n{notebook.stem} as committed: {tally}")
    assert not problems, f"{notebook.name} opened in JupyterLab [{tally}]:\n" + "\n".join(problems)
    assert tally.cells > 0 and (tally.widgets >= len(expected)), f"{notebook.name}: too little was checked [{tally}]"
