"""The bad-input fuzz's summary line in the terminal summary of any run that includes it (under xdist too: a
test's recorded properties travel with its report to the controller)."""
from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "bad_input_fuzz" and getattr(report, "when", "call") == "call":
                    terminalreporter.write_line(value)
