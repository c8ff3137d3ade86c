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
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "bash -c" in ci
