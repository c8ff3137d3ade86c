"""A row bench refuses is not dispatched, and explain names the refusal, until a new build of it is verified."""
from __future__ import annotations

import pytest

from rapid_llm.bench import BenchRefused, bench_op
from rapid_llm.kernels.dispatch.dispatcher import explain
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec
from tests.contract.cheats import shortcuts

NAME = "external/refused_skipper"


def _register(target) -> None:
    spec.register(KernelSpec(name=NAME, op="scale", backend="external", target=target, dtypes=("fp32",),
                             devices=("cpu",), priority=100,
                             golden=GoldenRecord(verified=True, baseline="native/scale")), replace=True)


def _verdict():
    return explain("scale", dtype="fp32", device="cpu", numel=4097).verdict(NAME)


@pytest.fixture
def skipper():
    shortcuts.forget()
    target = shortcuts.skipping_at_random(0.5)
    _register(target)
    yield target
    spec.unregister(NAME)


def test_a_refused_row_leaves_dispatch_until_a_new_build_is_verified(skipper):
    assert _verdict().verdict == "chosen"  # verified, no figures: its static priority puts it above the floor
    with pytest.raises(BenchRefused) as caught:
        bench_op("scale", [4097], ["fp32"], rows=[NAME], device="cpu", record=False)
    assert caught.value.kind == "timed_output_wrong"

    verdict = _verdict()
    assert verdict.verdict == "filtered" and "timed_output_wrong" in verdict.reason, verdict
    assert "new build" in verdict.reason

    # verify passing the same build again does not lift it; nor does registering the same build again
    spec.update_golden(NAME, GoldenRecord(verified=True, baseline="native/scale"))
    assert _verdict().verdict == "filtered"
    _register(skipper)
    assert "timed_output_wrong" in _verdict().reason

    # a new build starts clean, and answers once verified
    _register(shortcuts.skipping_at_random(0.0))
    assert _verdict().verdict == "chosen"


def test_a_refusal_survives_the_records_json_form():
    record = GoldenRecord(verified=False, refused="bench: timed_output_wrong: ...")
    assert GoldenRecord.from_json(record.to_json()) == record
    with pytest.raises(spec.RegistryError):
        GoldenRecord(verified=True, refused="bench: lazy_result")
