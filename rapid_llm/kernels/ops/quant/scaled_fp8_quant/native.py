"""The floor for scaled_fp8_quant: plain torch, runs on every device, dtype and layout.

The contract every row keeps (vLLM's semantics, with one floor for every dynamic form):

- ``x`` [..., H] in bf16, fp16 or fp32 is quantised into ``output`` (float8_e4m3fn, x's shape) with fp32
  ``scales`` whose shape names the granularity: ``[1]`` one scale for the whole tensor, ``[..., G]``
  (x's leading dims) G groups of H / G consecutive elements per token: G = 1 is per token, G = H / 128
  DeepSeek's 1x128 groups.
- Dynamic (``static=False``): each scale is ``max(amax / 448, 1 / (448 * 512))`` in fp32, ``amax`` the
  largest |x| of its group (a NaN element is left out of it, as CUDA's fmaxf leaves it out), the
  division IEEE-rounded. An all-zero group gets the floor 1 / 229376 and quantises to zeros: never a
  zero scale, so never 0 / 0 (vLLM's per-tensor kernel has no floor and returns NaN there).
- Static (``static=True``): ``scales`` is read, not written (any of the same shapes); it must hold
  positive finite values, which no row checks (that would read the device from the host).
- ``output = fp8(clamp(x / scale, -448, 448))``, rounded to nearest even, NaN kept NaN. Rows may
  multiply by ``1 / scale`` instead (one more rounding): verify allows one fp8 ulp and counts them.
"""
from __future__ import annotations

import torch

from rapid_llm.kernels.ops import arguments as a
from rapid_llm.kernels.platform import describe

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
#: vLLM's smallest dynamic scale, 1 / (448 * 512), as fp32 computes it.
MIN_SCALE = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(FP8_MAX * 512.0, dtype=torch.float32))
_IN_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_args(op: str, output: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> tuple[int, int]:
    """The (groups, group size) the call quantises, the whole tensor being one group for scales [1]; ValueError
    or TypeError naming the op and the problem for anything a row would misread."""
    for name, t in (("output", output), ("x", x), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if not isinstance(static, bool):
        raise TypeError(f"{op}: static must be a bool, got {type(static).__name__}")
    if x.dtype not in _IN_DTYPES:
        raise ValueError(f"{op}: x must be bf16, fp16 or fp32, got {x.dtype}")
    if output.dtype != FP8:
        raise ValueError(f"{op}: out must be float8_e4m3fn, got {describe(output)}")  # as the launchers say
    if scales.dtype != torch.float32:
        raise ValueError(f"{op}: scales must be float32, got {describe(scales)}")  # the CUDA launcher's words
    if output.shape != x.shape:
        raise ValueError(f"{op}: out must have x's shape, got {describe(output)} for x {describe(x)}")
    if not (output.device == x.device == scales.device):
        raise ValueError(f"{op}: output, x and scales must be on one device, got {output.device}, {x.device}, "
                         f"{scales.device}")
    geometry = layout(op, x.shape, scales.shape)
    a.no_overlap(op, {"output": output} if static else {"output": output, "scales": scales},
                 {"x": x, "scales": scales} if static else {"x": x})
    return geometry


def layout(op: str, x_shape: torch.Size, scales_shape: torch.Size) -> tuple[int, int]:
    """(groups, elements per group) of a call: scales [1] is one group of everything, [..., G] G per token."""
    if len(x_shape) < 1 or x_shape[-1] == 0:
        raise ValueError(f"{op}: x must be [..., H] with H >= 1, got {list(x_shape)}")
    hidden, numel = x_shape[-1], x_shape.numel()
    if len(scales_shape) == 1 and scales_shape[0] == 1 and len(x_shape) > 1:
        return 1, numel  # per tensor
    if len(scales_shape) != len(x_shape) or scales_shape[:-1] != x_shape[:-1] or scales_shape[-1] < 1 \
            or hidden % scales_shape[-1]:
        raise ValueError(f"{op}: scales must be [1] (per tensor) or [..., G] with x's leading dims and G dividing "
                         f"H = {hidden} (G groups per token), got {list(scales_shape)} for x {list(x_shape)}")
    return scales_shape.numel(), hidden // scales_shape[-1]


def group_amax(groups: torch.Tensor) -> torch.Tensor:
    """max |x| over the last dim of fp32 ``groups``, NaN left out; 0 for an empty group."""
    mags = groups.abs()
    mags = torch.where(torch.isnan(mags), torch.zeros_like(mags), mags)
    return mags.amax(-1) if mags.shape[-1] else mags.new_zeros(mags.shape[:-1])


def dynamic_scales(amax: torch.Tensor) -> torch.Tensor:
    """max(amax / 448, MIN_SCALE) in fp32, an IEEE division (a tensor divisor: torch's CUDA division by a
    Python scalar multiplies by its reciprocal, which can be an fp32 ulp off)."""
    return torch.clamp_min(amax / torch.full_like(amax, FP8_MAX), MIN_SCALE)


def scaled_fp8_quant(output: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """Quantise x into output (float8_e4m3fn) with fp32 scales per tensor, token or group; writes scales unless
    static. In place on output and scales (vLLM's out-first form, its names), returns None."""
    n_groups, size = check_args("scaled_fp8_quant", output, x, scales, static)
    groups = x.reshape(n_groups, size).float()
    if static:
        scale = scales.reshape(n_groups, 1)
    else:
        scale = dynamic_scales(group_amax(groups)).unsqueeze(-1)
        scales.copy_(scale.reshape(scales.shape))
    q = (groups / scale).clamp(-FP8_MAX, FP8_MAX)
    output.copy_(q.reshape(output.shape))


def check(output: torch.Tensor, x: torch.Tensor, scales: torch.Tensor, static: bool) -> None:
    """scaled_fp8_quant's argument checks, every path's: output (and scales, unless static) are written."""
    check_args("scaled_fp8_quant", output, x, scales, static)


scaled_fp8_quant.check = check
