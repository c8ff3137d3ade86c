"""The README's set-up commands are the ones CI runs; keep them honest."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_starts_with_two_setup_commands():
    lab, test = _commands()[:2]
    assert lab.startswith("pip install") and "jupyter lab notebooks/" in lab
    assert test.startswith("pip install") and "pytest" in test and "--nbval" in test


def test_ci_runs_the_readme_test_command():
    """.ci/run reads the command from the README and runs its install beside Chromium's, then its tests: the
    command keeps the form it splits ("pip install ... && python -m pytest ...", once), or runs whole after it."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "bash -c" in ci
    assert " && python -m pytest *}" in ci
    test = _commands()[1]
    assert test.count(" && python -m pytest ") == 1 and test.startswith("pip install"), test


def test_the_notebook_transcript_runs_as_written(tmp_path, monkeypatch):
    """Every name the README's transcript uses exists after %load_ext; the cell is notebook 01's scale_vec."""
    import shutil

    from IPython.core.interactiveshell import InteractiveShell

    from rapid_llm.kernels import platform
    from rapid_llm.kernels.verification.golden import GoldenError
    from rapid_llm.kernels.registry.spec import RegistryError

    block = re.search(r"### A kernel from a notebook cell\n\n```\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
    lines = [m for m in re.findall(r"^In \[\d+\]: (.+)$", block[1], re.M)]
    assert lines[0] == "%load_ext rapid_llm" and lines[1].startswith("%%cuda_jit ")
    package = tmp_path / "rapid_llm"  # promote() writes into a copy, never into the checkout
    shutil.copytree(platform.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(platform, "PACKAGE_DIR", package)
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "rapid_llm")
        shell.magics_manager.registry["CudaJitMagics"].csrc_dir = str(tmp_path / "csrc")
        cell = (ROOT / "csrc" / "elementwise" / "scale_vec.cu").read_text()
        shell.run_cell_magic("cuda_jit", lines[1][len("%%cuda_jit "):], cell)
        for line in lines[2:]:
            code = line.split("  #", 1)[0].strip()
            result = shell.run_cell(code, silent=True)
            error = result.error_in_exec
            # without a GPU the row cannot run: verify and promote say so; a missing name is never acceptable
            assert error is None or isinstance(error, (GoldenError, RegistryError)), f"{code}: {error!r}"
    finally:
        from rapid_llm.notebook import cell_rows

        cell_rows.drop_cell_row("scale_vec")
        shell.run_line_magic("unload_ext", "rapid_llm")
