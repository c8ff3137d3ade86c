"""A cell's native output (a kernel's printf) is flushed at the end of that cell: CUDA synchronised, C stdio flushed."""
from __future__ import annotations

import types

from rapid_llm.notebook import native_output


def test_the_extension_flushes_after_every_cell_and_unloads_cleanly(shell):
    assert native_output.flush_native_output in shell.events.callbacks["post_run_cell"]
    shell.extension_manager.unload_extension("rapid_llm")
    assert native_output.flush_native_output not in shell.events.callbacks["post_run_cell"]
    shell.extension_manager.load_extension("rapid_llm")


def test_a_started_cuda_is_synchronised_so_device_printf_reaches_the_cell(monkeypatch):
    calls = []
    fake_cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                      synchronize=lambda: calls.append("synchronize"))
    monkeypatch.setitem(native_output.sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    monkeypatch.setattr(native_output, "FORWARD_WAIT_S", 0.0)
    native_output.flush_native_output()
    assert calls == ["synchronize"]


def test_without_cuda_started_nothing_waits_on_a_device(monkeypatch):
    fake_cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False,
                                      synchronize=lambda: (_ for _ in ()).throw(AssertionError("synchronised")))
    monkeypatch.setitem(native_output.sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    native_output.flush_native_output()
