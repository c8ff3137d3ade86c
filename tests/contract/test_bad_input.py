"""One answer per bad call: seeded bad and edge calls of every op through K, every CPU row and torch.ops.

The cases and the verdicts are tests/contract/bad_input_cases.py's. The summary line goes to the terminal
summary of every run that includes this test (CI's log shows it), pass or fail.
"""
from __future__ import annotations

from tests.contract import bad_input_cases as fuzz

SEED = 52
PER_OP = 80  # per op: 10 ops, 800 cases


def test_every_bad_call_gets_one_clear_answer(record_property):
    counts, failures = fuzz.run_all(SEED, PER_OP)
    line = fuzz.summary(counts)
    record_property("bad_input_fuzz", line)
    assert sum(counts.values()) >= 500
    assert not failures, f"{line}\n" + "\n".join(failures[:40])

