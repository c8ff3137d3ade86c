"""A JIT row's call path: how ``out`` is made for each out rule, in C (fastcall's OutFirst) and in Python alike."""
from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.toolchain import jit_row
from rapid_llm.kernels.toolchain.jit_row import JitRow


def _launcher(calls):
    def launcher(*args):
        calls.append(args)
        if isinstance(args[0], torch.Tensor) and len(args) > 1 and isinstance(args[1], torch.Tensor):
            if args[0].shape == args[1].shape:
                args[0].copy_(args[1] * 2)
    return launcher


@pytest.fixture(params=["compiled", "portable"])
def bind(request, monkeypatch):
    if request.param == "portable":
        import rapid_llm.kernels.toolchain.fastpath.binding as binding

        def unavailable():
            raise RuntimeError("chosen by the test")

        monkeypatch.setattr(binding, "fastcall", unavailable)
    return request.param


def _row(tmp_path, rule, calls):
    src = tmp_path / "k.cu"
    src.write_text("// a kernel\n")
    return JitRow(src, "k", launcher=_launcher(calls), out=rule)


@pytest.mark.parametrize("shape", [(0,), (1,), (4097,), (3, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_like_input_allocates_a_contiguous_out_like_the_input(tmp_path, bind, shape, dtype):
    calls = []
    row = _row(tmp_path, "like_input", calls)
    x = torch.ones(shape, dtype=dtype)
    out = row(x, 1.5)
    assert out.shape == x.shape and out.dtype == dtype and out.is_contiguous()
    assert x.numel() == 0 or out.data_ptr() != x.data_ptr()
    assert calls[0][0] is out and calls[0][1] is x and calls[0][2] == 1.5
    assert torch.equal(out, x * 2)


def test_a_given_out_is_used_and_returned(tmp_path, bind):
    calls = []
    row = _row(tmp_path, "like_input", calls)
    x, out = torch.ones(4), torch.empty(4)
    assert row(x, out=out) is out and calls[0][0] is out


def test_half_last_dim_halves_and_refuses_an_odd_last_dim(tmp_path, bind):
    calls = []
    row = _row(tmp_path, "half_last_dim", calls)
    out = row(torch.ones(3, 8, dtype=torch.float16))
    assert out.shape == (3, 4) and out.dtype == torch.float16
    with pytest.raises(ValueError, match=r"^k: the input's last dim must be even \(\[\.\.\., 2I\]\), got \[3, 7\]$"):
        row(torch.ones(3, 7))


def test_none_calls_in_place_and_returns_none(tmp_path, bind):
    calls = []
    row = _row(tmp_path, "none", calls)
    x = torch.ones(2)
    assert row(x, 3) is None
    assert calls == [(x, 3)]
    if bind == "compiled":
        with pytest.raises(TypeError, match="in place"):
            row(x, out=x)


def test_an_unknown_rule_is_refused(tmp_path):
    with pytest.raises(jit_row.RegistryError, match="out must be one of like_input, half_last_dim, none"):
        _row(tmp_path, "sideways", [])


def test_the_row_line_carries_the_rule(tmp_path):
    text = jit_row.write_header("// body\n", {"name": "jit/k", "op": "k", "fn": "k", "out": "none"})
    spec = jit_row.row_from_header(jit_row.read_header(text), tmp_path / "k.cu")
    assert spec.target.out == "none"
