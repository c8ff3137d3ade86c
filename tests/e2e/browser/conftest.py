"""Fixtures of the JupyterLab browser test: what it needs, notebook copies, the server, Chromium.

Everything here is module-scoped: one server and one browser serve all the
notebooks. The notebooks run in a project of their own (``.browser_run/``),
so nothing they write lands where nbval's run of the same notebooks, or
another test, reads at the same time (under pytest-xdist, in another worker).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.e2e.browser.lab_server import LabServer

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Notebooks the test runs with JupyterLab's Run All (test_jupyterlab.py says why these);
#: the others are opened as committed. RAPID_LLM_LAB_RUN_ALL=1 runs every one.
RUN_ALL = ("01_add_jit_kernel", "08_inside_a_kernel")
#: Debian's Chromium; the test never downloads a browser.
CHROMIUM = Path("/usr/bin/chromium")
#: Where the notebooks are copied to: inside the repository, so that the server (rooted there)
#: serves them and notebook 10 finds ../benchmarks/results, and apart from notebooks/, so
#: JupyterLab's autosave never touches a tracked file. It is a project root of its own (its
#: pyproject.toml, a copy of csrc/): the %%cuda_jit cells save into .browser_run/csrc, never
#: into the checkout's csrc/, which nbval's notebooks and the README's transcript test use (and a copy of
#: notebooks/results, which notebooks 01 and 06 plot from, under the root they find).
RUN_DIR = ROOT / ".browser_run"
VIEWPORT = {"width": 1400, "height": 1000}


def run_all() -> list[Path]:
    """The notebooks run with Run All: RUN_ALL, or every one with RAPID_LLM_LAB_RUN_ALL=1."""
    if os.environ.get("RAPID_LLM_LAB_RUN_ALL") == "1":
        return NOTEBOOKS
    return [nb for nb in NOTEBOOKS if nb.stem in RUN_ALL]


def opened() -> list[Path]:
    """The notebooks opened as committed (outputs and saved widget state), not run."""
    running = run_all()
    return [nb for nb in NOTEBOOKS if nb not in running]


def missing_requirement() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"playwright is not importable ({exc}): pip install playwright (its browser downloads are not needed)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} does not exist: apt-get install chromium (Debian's Chromium drives the test)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError as exc:
        return f"jupyterlab is not installed ({exc}): pip install jupyterlab"
    return None


@pytest.fixture(scope="module", autouse=True)
def browser_requirements() -> None:
    reason = missing_requirement()
    if reason:
        pytest.skip(reason)


def copy_without_outputs(source: Path, target: Path) -> None:
    """Copy a notebook with its outputs, execution counts and widget state cleared, so that
    everything the page shows afterwards comes from this run."""
    nb = json.loads(source.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb.get("metadata", {}).pop("widgets", None)
    target.write_text(json.dumps(nb, indent=1))


@pytest.fixture(scope="module")
def notebook_copies(browser_requirements: None) -> Iterator[Path]:
    """``.browser_run/``, a project of its own: a cleared copy of each notebook run here, a copy as committed of
    each one opened, and the cells the notebooks read back from csrc/; removed afterwards."""
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir()
    (RUN_DIR / "pyproject.toml").write_text("# The browser test's own project root: %%cuda_jit cells save into "
                                            "its csrc/ (tests/e2e/browser/conftest.py)\n")
    shutil.copytree(ROOT / "csrc", RUN_DIR / "csrc")
    shutil.copytree(ROOT / "notebooks" / "results", RUN_DIR / "notebooks" / "results")  # figures they plot on a CPU
    running = run_all()
    for notebook in NOTEBOOKS:
        if notebook in running:
            copy_without_outputs(notebook, RUN_DIR / notebook.name)
        else:
            shutil.copy(notebook, RUN_DIR / notebook.name)
    yield RUN_DIR
    shutil.rmtree(RUN_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def lab_server(notebook_copies: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    server = LabServer(ROOT, tmp_path_factory.mktemp("jupyterlab"))
    server.trust([notebook_copies / nb.name for nb in opened()])
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium(browser_requirements: None) -> Iterator[Any]:
    """Headless Debian Chromium, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def lab_app(chromium: Any, lab_server: LabServer) -> Iterator[Any]:
    """One page with JupyterLab loaded once: each notebook is opened in it through the app's commands
    (lab_page.open_alone), as a reader opens one after another."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        from tests.e2e.browser import lab_page  # needs playwright: imported once the requirements are met

        lab_page.load_lab(page, lab_server.url("/lab/workspaces/browser-test?reset"))
        yield page
    finally:
        context.close()


@pytest.fixture
def page(lab_app: Any, lab_server: LabServer) -> Iterator[Any]:
    """The loaded JupyterLab for one notebook; afterwards its documents are closed and every kernel shut down, so
    one notebook's kernel does not hold memory during the next."""
    from tests.e2e.browser import lab_page

    try:
        yield lab_app
    finally:
        lab_page.close_all(lab_app)
        lab_server.shutdown_kernels()
