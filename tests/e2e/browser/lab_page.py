"""Driving a notebook in JupyterLab through Playwright, and reading back what the page shows.

Everything here reads the rendered DOM, as a user would see it: prompts,
output areas (each rendered output carries the MIME type JupyterLab rendered
it as in ``data-mime-type``), widget views and images.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import Locator, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

#: The status-bar item that names the kernel and its state ("Python 3 (ipykernel) | Idle").
_KERNEL_STATUS_JS = """() => {
  const item = [...document.querySelectorAll('.jp-StatusBar-TextItem')]
    .find(e => (e.getAttribute('title') || '').startsWith('Change kernel'));
  return item ? item.textContent.trim() : '';
}"""

#: True once a kernel is connected and idle (before that the item says "No Kernel | Initializing",
#: then "Connecting", then "Unknown").
_KERNEL_IDLE_JS = f"""() => {{
  const status = ({_KERNEL_STATUS_JS})();
  return !status.startsWith('No Kernel') && status.endsWith('| Idle');
}}"""

#: True once Run All has finished: some cell ran, none is queued or running ("[*]"), the kernel is idle.
#: A cell the kernel aborted after an error ends with an empty prompt, so this also ends early runs.
_RUN_FINISHED_JS = f"""() => {{
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .map(p => p.textContent);
  return prompts.some(p => /\\[\\d+\\]/.test(p)) && !prompts.some(p => p.includes('*'))
    && ({_KERNEL_IDLE_JS})();
}}"""

#: Every cell in notebook order, with its prompt and what each of its outputs rendered as.
_CELLS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(cell => ({
  kind: cell.classList.contains('jp-CodeCell') ? 'code'
        : cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw',
  prompt: (cell.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent.trim(),
  outputs: [...cell.querySelectorAll('.jp-OutputArea-output')].map(out => ({
    mime: out.getAttribute('data-mime-type'),
    text: out.innerText,
    widget_views: [...out.querySelectorAll('.jupyter-widgets')]
      .filter(w => !w.parentElement.closest('.jupyter-widgets')).length,
    widget_images: [...out.querySelectorAll('.jupyter-widgets img')]
      .map(img => ({src: img.src, loaded: img.complete && img.naturalWidth > 0})),
  })),
}))"""


@dataclass
class OutputView:
    """One rendered output: its MIME type (None for a widget view), its text, its widget views and images."""

    mime: str | None
    text: str
    widget_views: int
    widget_images: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_widget(self) -> bool:
        return self.widget_views > 0

    @property
    def loaded_images(self) -> int:
        return sum(1 for img in self.widget_images if img["loaded"] and img["src"])


@dataclass
class CellView:
    """One cell as the page shows it."""

    index: int
    kind: str
    prompt: str
    outputs: list[OutputView]

    @property
    def execution_count(self) -> int | None:
        inside = self.prompt.strip("[]: ")
        return int(inside) if inside.isdigit() else None


#: True once JupyterLab has loaded and restored its layout (window.jupyterapp: the server exposes it).
_LAB_RESTORED_JS = "() => !!window.jupyterapp && !!window.jupyterapp.shell && window.jupyterapp.started !== undefined"

#: Close every open document without saving: the test's notebooks are scratch copies (a notebook whose kernel
#: connected counts as changed, and closing it would ask).
_CLOSE_ALL_JS = """async () => {
  const app = window.jupyterapp;
  await app.restored;
  for (const widget of [...app.shell.widgets('main')]) {
    if (widget.context) widget.context.model.dirty = false;
    widget.dispose();
  }
}"""
#: Open the notebook at ``path`` with the kernel asked for ({id} of a running one, or {name} of a new one).
_OPEN_JS = """async ([path, kernel]) => {
  await window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook', kernel});
}"""


def load_lab(page: Page, url: str, timeout_s: float = 90) -> None:
    """Load JupyterLab at ``url`` (a server started with ``expose_app_in_browser``) and wait until it has restored."""
    page.goto(url, timeout=timeout_s * 1000)
    page.wait_for_function(_LAB_RESTORED_JS, timeout=timeout_s * 1000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")


def close_all(page: Page) -> None:
    """Close every document open in the loaded JupyterLab, unsaved."""
    page.evaluate(_CLOSE_ALL_JS)


def open_alone(page: Page, path: str, cell_count: int, kernel: dict[str, str], timeout_s: float = 90) -> None:
    """Open the notebook at ``path`` (relative to the server's root) in the loaded JupyterLab, the only document
    open, with ``kernel`` (``{"id": ...}``: connected to that running kernel; ``{"name": ...}``: a new kernel of that
    kernelspec, as a reader's), and wait until its ``cell_count`` cells are shown. The widgets rendered from the
    notebook's saved state come once a kernel is connected (ipywidgets restores them then): the caller waits for
    those it expects."""
    close_all(page)
    page.evaluate(_OPEN_JS, [path, kernel])
    page.wait_for_function("(n) => document.querySelectorAll('.jp-Notebook .jp-Cell').length === n",
                           arg=cell_count, timeout=timeout_s * 1000)


def wait_for_kernel_idle(page: Page, timeout_s: float = 90) -> None:
    """Wait until the open notebook's kernel is connected and idle."""
    page.wait_for_function(_KERNEL_IDLE_JS, timeout=timeout_s * 1000)


def run_all_cells(page: Page) -> None:
    """JupyterLab's own Run All: the Run menu, then "Run All Cells"."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel").get_by_text(
        "Run All Cells", exact=True).click()


#: Every code cell's prompt, in order: what must not change while a run counts as finished.
_PROMPTS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map(p => p.textContent)"""
#: How long the finished state must hold, unchanged, to count.
SETTLE_S = 1.0


def wait_until_run_finished(page: Page, timeout_s: float) -> None:
    """Wait until no cell is queued or running and the kernel is idle again, and that holds for SETTLE_S with
    the same prompts: between two cells, for a moment, nothing may show as queued while the kernel is idle (one
    CI run under load saw the last code cell of notebook 01 still unrun when the wait returned)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left_ms = max(1.0, deadline - time.monotonic()) * 1000
        page.wait_for_function(_RUN_FINISHED_JS, timeout=left_ms, polling=250)
        before = page.evaluate(_PROMPTS_JS)
        page.wait_for_timeout(SETTLE_S * 1000)
        if page.evaluate(_RUN_FINISHED_JS) and page.evaluate(_PROMPTS_JS) == before:
            return
        if time.monotonic() > deadline:
            raise PlaywrightTimeoutError(f"the run did not settle in {timeout_s:g} s")


def kernel_status(page: Page) -> str:
    """The status bar's kernel item, e.g. "Python 3 (ipykernel) | Busy"."""
    return page.evaluate(_KERNEL_STATUS_JS)


def cells(page: Page) -> list[CellView]:
    """Every cell of the open notebook, in order."""
    return [CellView(index=i, kind=c["kind"], prompt=c["prompt"],
                     outputs=[OutputView(**o) for o in c["outputs"]])
            for i, c in enumerate(page.evaluate(_CELLS_JS))]


def cell_locator(page: Page, index: int) -> Locator:
    """The ``index``-th cell of the open notebook (every cell is in the DOM: windowing is off)."""
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def wait_for_widget_views(page: Page, indices: list[int], timeout_s: float = 30) -> bool:
    """Widget views render after their models arrive: wait until each listed cell shows one with
    its images loaded. False when that does not happen in time (the checks then say which cell)."""
    try:
        page.wait_for_function(
            """(indices) => { const all = document.querySelectorAll('.jp-Notebook .jp-Cell');
                 return indices.every(i => all[i] && all[i].querySelector('.jp-OutputArea-output .jupyter-widgets')
                   && [...all[i].querySelectorAll('.jupyter-widgets img')]
                        .every(img => img.complete && img.naturalWidth > 0)); }""",
            arg=indices, timeout=timeout_s * 1000)
    except PlaywrightTimeoutError:
        return False
    return True


# ------------------------------------------------------------------ widgets


def bench_plot_views(page: Page) -> Locator:
    """bench_plot's widget views: a box with a dtype dropdown, the GB/s-latency toggle and the plot image."""
    return (page.locator(".jp-OutputArea-output .widget-vbox")
            .filter(has=page.locator(".widget-toggle-buttons"))
            .filter(has=page.locator("select"))
            .filter(has=page.locator("img.widget-image")))


def explain_views(page: Page) -> Locator:
    """explain_widget's views: a box with the dtype, device and numel dropdowns over an HTML table."""
    return (page.locator(".jp-OutputArea-output .widget-vbox")
            .filter(has=page.locator(".widget-dropdown", has_text="numel"))
            .filter(has_not=page.locator("img")))


def compare_views(page: Page, within: Locator | None = None) -> Locator:
    """The compare widget's views (in ``within``, else anywhere on the page): a box whose HTML opens with
    ``compare('<op>')`` and names both sides' verify verdicts, with the plot of B/A per size as an image
    where the rows were timed."""
    return ((within or page).locator(".jp-OutputArea-output .widget-vbox")
            .filter(has=page.locator(".widget-html-content", has_text="compare('"))
            .filter(has=page.locator(".widget-html-content", has_text="verify")))


def _wait_for_change(view: Locator, selector: str, prop: str, before: str, timeout_s: float) -> str:
    """The new value of ``prop`` once it differs from ``before`` (an image also loaded); ``before``
    again when it does not change in time, so the caller can say what stayed the same."""
    handle = view.locator(selector).first.element_handle()
    try:
        view.page.wait_for_function(
            "([el, prop, before]) => el[prop] !== before"
            " && (el.tagName !== 'IMG' || (el.complete && el.naturalWidth > 0))",
            arg=[handle, prop, before], timeout=timeout_s * 1000)
    except PlaywrightTimeoutError:
        pass
    return handle.evaluate(f"el => el.{prop}")


def choose_other_option(view: Locator, dropdown: Locator, watched: str, prop: str,
                        skip: tuple[str, ...] = (), timeout_s: float = 60) -> tuple[str, str, str]:
    """Select the first option of ``dropdown`` other than the current one (and not in ``skip``);
    wait until ``watched``'s ``prop`` changes. Returns (option label, value before, value after)."""
    select = dropdown.locator("select")
    current = select.evaluate("s => s.options[s.selectedIndex].text")
    labels = select.evaluate("s => [...s.options].map(o => o.text)")
    label = next(lab for lab in labels if lab != current and lab not in skip)
    before = view.locator(watched).first.evaluate(f"el => el.{prop}")
    select.select_option(label=label)
    return label, before, _wait_for_change(view, watched, prop, before, timeout_s)


def dropdown_labels(dropdown: Locator) -> list[str]:
    """The option labels of an ipywidgets Dropdown."""
    return dropdown.locator("select").evaluate("s => [...s.options].map(o => o.text)")


def click_toggle(view: Locator, text: str, watched: str, prop: str, timeout_s: float = 60) -> tuple[str, str]:
    """Click the toggle button labelled ``text``; wait until ``watched``'s ``prop`` changes."""
    before = view.locator(watched).first.evaluate(f"el => el.{prop}")
    view.locator(".widget-toggle-button", has_text=text).first.click()
    return before, _wait_for_change(view, watched, prop, before, timeout_s)
