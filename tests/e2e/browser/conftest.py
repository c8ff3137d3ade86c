"""Fixtures of the JupyterLab browser test: what it needs, notebook copies, the server, Chromium.

Everything here is module-scoped: one server and one browser serve all the
notebooks, and both are gone before the rest of the session (nbval's run of
the same notebooks) starts.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.e2e.browser.lab_server import LabServer

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Debian's Chromium; the test never downloads a browser.
CHROMIUM = Path("/usr/bin/chromium")
#: Where the notebooks are copied to run: inside the repository, so the notebooks still find
#: pyproject.toml above them, and apart from notebooks/, so JupyterLab's autosave never
#: touches a tracked file.
RUN_DIR = ROOT / ".browser_run"
VIEWPORT = {"width": 1400, "height": 1000}


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


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


@pytest.fixture(scope="module", autouse=True)
def csrc_left_as_found(browser_requirements: None) -> Iterator[None]:
    """The notebooks write their %%cuda_jit cells under csrc/ (byte-identical to the committed
    files when all goes well); a change they leave is undone, unless csrc/ had changes before."""
    before = _git("status", "--porcelain", "csrc")
    yield
    if before.returncode != 0 or before.stdout:
        return  # not a git checkout, or someone's uncommitted work: leave it alone
    changed = _git("status", "--porcelain", "csrc").stdout
    if changed:
        print(f"\nrunning the notebooks changed csrc/; restoring it:\n{changed}")
        _git("checkout", "--", "csrc")


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
    """``.browser_run/``: a cleared copy of every tutorial notebook; removed afterwards."""
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir()
    for notebook in NOTEBOOKS:
        copy_without_outputs(notebook, RUN_DIR / notebook.name)
    yield RUN_DIR
    shutil.rmtree(RUN_DIR, ignore_errors=True)


@pytest.fixture(scope="module")
def lab_server(notebook_copies: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    server = LabServer(ROOT, tmp_path_factory.mktemp("jupyterlab"))
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


@pytest.fixture
def page(chromium: Any, lab_server: LabServer) -> Iterator[Any]:
    """A fresh browser context per notebook; its kernel is shut down afterwards."""
    context = chromium.new_context(viewport=VIEWPORT)
    try:
        yield context.new_page()
    finally:
        context.close()
        lab_server.shutdown_kernels()
