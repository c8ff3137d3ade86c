"""KernelSpec validation and the registry's rules."""
from __future__ import annotations

import pytest

from rapid_llm.kernels.registry.opdecl import CaseArgs, Reference, declare_op
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec, RegistryError


def _row(**kw):
    base = dict(name="triton/t_spec", op="t_spec", backend="triton", target="math:sqrt")
    base.update(kw)
    return KernelSpec(**base)


@pytest.fixture
def clean():
    added: list[str] = []
    yield added
    for name in added:
        spec.unregister(name)


@pytest.mark.parametrize("kw, message", [
    (dict(backend="cuda"), "unknown backend 'cuda'"),
    (dict(dtypes=("fp32", "float17")), "unknown dtype 'float17'"),
    (dict(dtypes=()), "dtypes must be a non-empty tuple"),
    (dict(dtypes="fp32"), "dtypes must be a non-empty tuple"),
    (dict(target="math.sqrt"), "target must be 'package.module:attribute'"),
    (dict(target="math:sqrt:x"), "target must be 'package.module:attribute'"),
    (dict(available="no-colon"), "available must be 'package.module:attribute'"),
    (dict(name="noslash"), "row name must look like 'backend/name'"),
    (dict(op="not an op"), "op must be an identifier"),
    (dict(devices=("tpu",)), "unknown device type 'tpu'"),
    (dict(priority="high"), "priority must be a number or None"),
    (dict(priority=True), "priority must be a number or None"),
    (dict(min_sm=9), "min_sm is an SM number"),
    (dict(golden={"verified": True}), "golden must be a GoldenRecord"),
])
def test_post_init_rejects(kw, message):
    with pytest.raises(RegistryError, match=message):
        _row(**kw)


def test_callables_are_accepted_as_target_and_probe():
    row = _row(target=lambda x: x, available=lambda: True)
    assert row.load()(3) == 3
    assert row.probe()


def test_lazy_target_is_not_imported_at_registration(clean):
    row = _row(name="triton/t_lazy", target="tests.unit.registry.never_imported_module:fn")
    spec.register(row)
    clean.append(row.name)  # registering did not try the import; loading would
    with pytest.raises(ModuleNotFoundError):
        row.load()


def test_duplicate_name_refused(clean):
    spec.register(_row(name="native/t_dup", backend="native"))
    clean.append("native/t_dup")
    with pytest.raises(RegistryError, match="already registered"):
        spec.register(_row(name="native/t_dup", backend="native"))


def test_second_native_row_refused(clean):
    spec.register(_row(name="native/t_one", backend="native"))
    clean.append("native/t_one")
    with pytest.raises(RegistryError, match="already has its native row 'native/t_one'"):
        spec.register(_row(name="native/t_two", backend="native"))


def test_replace_keeps_op_and_bumps_version(clean):
    spec.register(_row(name="triton/t_rep"))
    clean.append("triton/t_rep")
    before = spec.registry_version()
    spec.register(_row(name="triton/t_rep", priority=3), replace=True)
    assert spec.get_row("triton/t_rep").priority == 3
    assert spec.registry_version() > before
    with pytest.raises(RegistryError, match="cannot move it"):
        spec.register(_row(name="triton/t_rep", op="other_op"), replace=True)


def test_native_rows_are_their_own_golden():
    row = _row(name="native/t_gold", backend="native")
    assert row.golden.verified


def test_update_golden_swaps_record(clean):
    spec.register(_row(name="triton/t_gold"))
    clean.append("triton/t_gold")
    assert not spec.get_row("triton/t_gold").golden.verified
    spec.update_golden("triton/t_gold", GoldenRecord(verified=True, max_abs_diff=0.5, baseline="native/x"))
    assert spec.get_row("triton/t_gold").golden.max_abs_diff == 0.5


def test_unknown_row_lists_known_ones():
    with pytest.raises(RegistryError, match="no row named 'jit/nope'"):
        spec.get_row("jit/nope")


def test_no_static_priority_is_none_and_unmeasured_is_its_old_name():
    row = KernelSpec(name="triton/p", op="p", backend="triton", target=lambda x: x)
    assert row.priority is None


def test_a_row_name_carries_its_backend():
    with pytest.raises(RegistryError, match="the name's prefix must be its backend, 'triton/x'"):
        KernelSpec(name="jit/x", op="x", backend="triton", target=lambda x: x)


def test_a_type_error_inside_a_probe_is_not_swallowed():
    def probe(device):
        raise TypeError("a bug in the probe")

    row = KernelSpec(name="triton/p", op="p", backend="triton", target=lambda x: x, available=probe)
    with pytest.raises(TypeError, match="a bug in the probe"):
        row.probe("cpu")
    row = KernelSpec(name="triton/q", op="q", backend="triton", target=lambda x: x, available=lambda: False)
    assert not row.probe("cpu")  # a probe that takes no device is called without one


def test_golden_rejects_negative_diff():
    with pytest.raises(RegistryError, match="max_abs_diff must be >= 0"):
        GoldenRecord(verified=True, max_abs_diff=-1.0)


def test_a_group_imported_before_the_first_lookup_is_in_every_fresh_registry():
    """Importing a group module first (a test's reference import) must not leave its op out of fresh registries."""
    import subprocess
    import sys

    code = ("import rapid_llm.kernels.ops.rope.rotary_embedding.reference\n"
            "from rapid_llm.kernels.registry import spec\n"
            "with spec.isolated(discover=True):\n"
            "    print('rotary_embedding' in spec.all_ops(), len(spec.rows_for('rotary_embedding')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "3"], out.stdout + out.stderr


def test_a_native_function_declares_the_projects_dtypes_by_default():
    """declare_op(native=...) follows the conventions (KernelSpec's default, the shipped groups); dtypes= widens it."""
    ref = Reference(make_inputs=lambda *a: (), oracle=lambda *a: None)
    with spec.isolated():
        declare_op("t_dtypes", native=lambda x: x, reference=ref, bench=lambda n, d, dev: CaseArgs(()))
        assert set(spec.get_row("native/t_dtypes").dtypes) == {"bf16", "fp16", "fp32"} == set(_row().dtypes)
        declare_op("t_dtypes", native=lambda x: x, reference=ref, bench=lambda n, d, dev: CaseArgs(()),
                   dtypes=("fp32", "fp64"), replace=True)
        assert spec.get_row("native/t_dtypes").dtypes == ("fp32", "fp64")


def test_a_golden_record_round_trips_through_its_json():
    """The one JSON form (a .cu row line, the verification cache, verify's child): what is written reads back."""
    import json

    record = GoldenRecord(verified=True, max_abs_diff=0.5, baseline="native/x", per_dtype=(("bf16", 0.5), ("fp32", 0.0)))
    assert GoldenRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert GoldenRecord.from_json({}) == GoldenRecord()  # a row line without a record: unverified
