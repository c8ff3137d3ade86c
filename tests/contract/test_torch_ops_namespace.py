"""Code written against torch.ops (vLLM's and SGLang's style) reaches every shipped op after one documented call."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from rapid_llm.kernels.registry import spec


def test_every_shipped_op_resolves_after_register_torch_ops():
    """In a fresh process: ``import rapid_llm.kernels`` imports no torch, and ``register_torch_ops()`` makes
    every shipped op ``torch.ops.rapid_llm.<op>``, each a packet whose call runs the op's checks first."""
    code = textwrap.dedent(f"""
        import sys
        import rapid_llm.kernels as K
        assert "torch" not in sys.modules, "import rapid_llm.kernels imported torch"
        import torch
        from rapid_llm.kernels.dispatch.custom_ops import CheckedPacket
        names = K.register_torch_ops()
        for op in {sorted(spec.all_ops())!r}:
            assert op in names, op
            assert isinstance(getattr(torch.ops.rapid_llm, op), CheckedPacket), op
        try:
            torch.ops.rapid_llm.rms_norm(torch.ones(2, 8), torch.ones(8), "1e-6")
        except TypeError as exc:
            assert str(exc) == "rms_norm: eps must be a float, got str", exc
        else:
            raise AssertionError("a string eps was accepted")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
