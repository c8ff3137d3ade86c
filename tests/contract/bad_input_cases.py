"""Seeded bad and edge calls of every op, and how each call path answered them (tests/contract/test_bad_input.py).

A case is one call, made fresh for each path from its own seed (an in-place op changes its arguments), and
run through ``K.<op>``, every row that runs on the CPU called directly, and ``torch.ops.rapid_llm.<op>``. Its
verdict:

* right: every path returned, and what the op wrote or returned matches the float64 oracle (on meta, the
  shapes and dtypes of a CPU call's results);
* clear error: every path raised the same exception class and first line, one line naming the op, and
  left the arguments as they were;
* silently wrong: a result off the oracle (aliased in-place arguments, a dtype computed by mistake);
* unclear: an error of more than one line, or not in the op's words;
* inconsistent: paths disagree (one raises, another returns; another class or first line);
* wrote before raising: a path raised after changing an argument.

A row called outside what it declares (a dtype, device or layout dispatch would not send it) may refuse
in its own words where the others answer; its refusal must still be clear.
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
from collections import Counter
from typing import Any, Callable, Iterator

import torch

import rapid_llm.kernels as K
from rapid_llm.kernels.registry import spec
from rapid_llm.kernels.verification import comparison

FP8 = torch.float8_e4m3fn
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
BAD_DTYPES = (torch.complex64, torch.bool, torch.int32, torch.int64, FP8, torch.float64)
#: Exception classes an op answers a bad call with.
CLEAR_CLASSES = (TypeError, ValueError, NotImplementedError)
VERDICTS = ("right", "clear error", "silently wrong", "unclear", "inconsistent", "wrote before raising")


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    label: str
    seed: int
    build: Callable[[random.Random, torch.Generator], tuple[list, dict]]
    device: str = "cpu"  # where the call's tensors are (made on the CPU, then moved: on_device)

    def make(self) -> tuple[list, dict]:
        """The call's arguments, made afresh (same values, same aliasing) for each path."""
        args, kwargs = self.build(random.Random(self.seed), torch.Generator().manual_seed(self.seed))
        return (args, kwargs) if self.device == "cpu" else on_device(args, kwargs, self.device)

    def __str__(self) -> str:
        return f"{self.op} [{self.label}] seed {self.seed}"


def on_device(args: list, kwargs: dict, device: str) -> tuple[list, dict]:
    """The arguments with every tensor (meta ones aside) on ``device``, views of one buffer still views of one
    buffer: each storage is copied once and every view of it rebuilt there with its offset and strides, so an
    aliased or overlapping call stays exactly as aliased."""
    storages: dict[int, torch.Tensor] = {}

    def move(v: Any) -> Any:
        if not isinstance(v, torch.Tensor) or v.is_meta:
            return v
        storage = v.untyped_storage()
        key = storage._cdata
        if key not in storages:
            storages[key] = torch.empty(0, dtype=torch.uint8).set_(storage).to(device, copy=True)
        moved = torch.empty(0, dtype=v.dtype, device=device)
        return moved.set_(storages[key].untyped_storage(), v.storage_offset(), v.shape, v.stride())

    return [move(a) for a in args], {k: move(v) for k, v in kwargs.items()}


def _r(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


# ------------------------------------------------------------------ each op's valid call


def _scale(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    shape = rng.choice([(0,), (1,), (7,), (3, 5), (2, 3, 4), (4097,)])
    return [_r(gen, *shape, dtype=dtype), rng.choice([2.0, 0.5, -1.25, 3])], {}


def _hidden(rng: random.Random) -> tuple[int, int]:
    return rng.choice([0, 1, 3, 5]), rng.choice([1, 8, 16, 33, 64])


def _rms_norm(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, h = _hidden(rng)
    return [_r(gen, t, h, dtype=dtype), _r(gen, h, dtype=dtype), rng.choice([1e-6, 1e-5, 0.0, 1])], {}


def _fused(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, h = _hidden(rng)
    return [_r(gen, t, h, dtype=dtype), _r(gen, t, h, dtype=dtype, scale=2.0), _r(gen, h, dtype=dtype),
            rng.choice([1e-6, 1e-5])], {}


def _silu(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, i = rng.choice([0, 1, 4]), rng.choice([1, 4, 9, 32])
    return [_r(gen, t, 2 * i, dtype=dtype)], {}


def _rope(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, head, hq, hk = rng.choice([0, 1, 5]), rng.choice([8, 16]), rng.choice([1, 2, 4]), rng.choice([1, 2])
    rot = rng.choice([head, head // 2])
    max_pos = 32
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    freqs = torch.arange(max_pos, dtype=torch.float32)[:, None] * inv[None, :]
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
    positions = torch.randint(0, max_pos, (t,), generator=gen)
    return [positions, _r(gen, t, hq * head, dtype=dtype), _r(gen, t, hk * head, dtype=dtype), head, cache,
            rng.choice([True, False])], {}


def _quant(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, h = rng.choice([1, 3]), rng.choice([16, 32, 256])
    x = _r(gen, t, h, dtype=dtype, scale=4.0)
    groups = rng.choice([None, 1, 2])
    scales = torch.zeros(1) if groups is None else torch.zeros(t, groups)
    static = rng.random() < 0.3
    if static:
        scales = scales.uniform_(0.01, 0.1, generator=gen)
    return [torch.zeros(t, h, dtype=FP8), x, scales, static], {}


def _merge(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, h, d = rng.choice([0, 1, 3]), rng.choice([1, 2, 4]), rng.choice([8, 16])
    return [torch.zeros(t, h, d, dtype=dtype), torch.zeros(h, t), _r(gen, t, h, d, dtype=dtype), _r(gen, h, t),
            _r(gen, t, h, d, dtype=dtype), _r(gen, h, t)], {}


def _kv_cache(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    blocks, block_size, h, d = rng.choice([1, 2, 3]), rng.choice([1, 4, 16]), rng.choice([1, 2]), rng.choice([4, 8, 16])
    t = min(rng.choice([0, 1, 5]), blocks * block_size)
    slots = torch.randperm(blocks * block_size, generator=gen)[:t]
    slots[rng.randrange(2)::3] = -1  # padding
    cache = FP8 if rng.random() < 0.3 else dtype
    return [_r(gen, t, h, d, dtype=dtype, scale=3.0), _r(gen, t, h, d, dtype=dtype, scale=3.0),
            _r(gen, blocks, block_size, h, d).to(cache), _r(gen, blocks, block_size, h, d).to(cache), slots,
            torch.tensor([0.05]), torch.tensor([0.5])], {}


def _moe(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    t, e = rng.choice([0, 1, 3, 5]), rng.choice([8, 16, 64])
    logits = _r(gen, t, e, dtype=dtype, scale=2.0)
    if rng.random() < 0.3:  # exact ties: logits drawn from a few values
        logits = torch.tensor([-1.0, 0.0, 2.0])[torch.randint(0, 3, (t, e), generator=gen)].to(dtype)
    groups = rng.choice([1, 1, 2, 4])
    keep = rng.randint(1, groups)
    k = rng.randint(1, min(8, keep * (e // groups)))
    bias = _r(gen, e, scale=0.1) if rng.random() < 0.5 else None
    return [logits, k, rng.choice(["softmax", "sigmoid"]), rng.choice([True, False]), bias, groups, keep], {}


def _sampling(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> tuple[list, dict]:
    b, v = rng.choice([0, 1, 3, 5]), rng.choice([1, 8, 33])
    logits = rng.random() < 0.5
    x = _r(gen, b, v, scale=2.0)
    x = (x if logits else x.softmax(-1)).to(dtype)
    top_k = torch.randint(-1, v + 2, (b,), generator=gen).to(rng.choice([torch.int32, torch.int64]))
    top_p = torch.rand(b, generator=gen) * 1.2
    temperature = torch.rand(b, generator=gen) * 2.0 if logits and rng.random() < 0.7 else None
    return [x, top_k if rng.random() < 0.8 else None, top_p,
            torch.tensor([rng.randrange(1 << 40), rng.randrange(1 << 20)]), temperature, logits], {}


@dataclasses.dataclass(frozen=True)
class OpShape:
    """What the fuzzer knows of an op: its valid call, its argument kinds, and what it writes."""

    valid: Callable[[random.Random, torch.Generator, torch.dtype], tuple[list, dict]]
    names: tuple[str, ...]
    scalars: tuple[int, ...]  # positions of float scalars (eps, factor)
    written: tuple[int, ...]  # positions of tensors written in place
    inputs: tuple[int, ...]  # positions of float tensors read
    out: str | None = None  # "like" or "half": an out= keyword and its shape rule
    alias: tuple[tuple[int, int], ...] = ()  # (written, other): pass other's tensor in the written one's place
    dtypes: tuple[torch.dtype, ...] = FLOATS


OPS: dict[str, OpShape] = {
    "scale": OpShape(_scale, ("input", "factor"), (1,), (), (0,), out="like",
                     dtypes=(*FLOATS, torch.float64)),
    "rms_norm": OpShape(_rms_norm, ("x", "weight", "eps"), (2,), (), (0, 1), out="like"),
    "fused_add_rms_norm": OpShape(_fused, ("x", "residual", "weight", "eps"), (3,), (0, 1), (0, 1, 2),
                                  alias=((1, 0), (0, 1))),
    "silu_and_mul": OpShape(_silu, ("x",), (), (), (0,), out="half"),
    "rotary_embedding": OpShape(_rope, ("positions", "q", "k", "head_size", "cos_sin_cache", "is_neox"), (),
                                (1, 2), (1, 2), alias=((2, 1), (1, 2))),
    "scaled_fp8_quant": OpShape(_quant, ("output", "x", "scales", "static"), (), (0, 2), (1,)),
    "merge_attn_states": OpShape(_merge, ("output", "output_lse", "v_a", "lse_a", "v_b", "lse_b"), (), (0, 1),
                                 (2, 4), alias=((0, 2), (0, 4), (1, 3), (1, 0))),
    "moe_topk_gate": OpShape(_moe, ("logits", "k", "scoring", "renormalize", "bias", "num_groups", "topk_groups"),
                             (), (), (0,)),
    "reshape_and_cache_flash": OpShape(_kv_cache, ("key", "value", "key_cache", "value_cache", "slot_mapping",
                                                   "k_scale", "v_scale"), (), (2, 3), (0, 1),
                                       alias=((3, 2), (2, 0))),
    "top_k_top_p_sampling": OpShape(_sampling, ("x", "top_k", "top_p", "seed_offset", "temperature", "from_logits"),
                                    (), (), (0, 2)),
}


# ------------------------------------------------------------------ mutations: (label, args, kwargs) -> same


def _tensors(args: list, kwargs: dict) -> list[torch.Tensor]:
    return [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]


def _with_out(shape: OpShape, args: list, dtype: torch.dtype | None = None, bad: str = "") -> torch.Tensor:
    x = args[0]
    dims = list(x.shape)
    if shape.out == "half":
        dims[-1] //= 2
    if bad == "shape":
        dims[-1] += 1
    return torch.full(dims, float("nan"), dtype=dtype or x.dtype)


def mutations(op: str, shape: OpShape) -> list[tuple[str, Callable[[random.Random, torch.Generator, list, dict], None]]]:
    """Every way the fuzzer bends a valid call of ``op``: each edits the args list and kwargs in place."""
    muts: list[tuple[str, Callable]] = [("valid", lambda rng, gen, a, k: None)]

    def nan_inf(rng, gen, a, k):
        for i in shape.inputs:
            t = a[i]
            if t.numel():
                flat = t.view(-1) if t.is_contiguous() else t.reshape(-1)
                flat[rng.randrange(t.numel())] = rng.choice([float("nan"), float("inf"), -float("inf")])
    muts.append(("NaN/Inf in an input", nan_inf))

    def strided(rng, gen, a, k):
        i = rng.choice(shape.inputs + shape.written)
        t = a[i]
        if t.dim() >= 1:
            wide = torch.empty((*t.shape[:-1], t.shape[-1] * 2 + 1), dtype=t.dtype)
            wide[..., ::2][..., :t.shape[-1]] = t  # every other element: a strided view of the same values
            a[i] = wide[..., ::2][..., :t.shape[-1]]
    muts.append(("a strided view", strided))

    def row_slice(rng, gen, a, k):
        i = rng.choice(shape.inputs + shape.written)
        t = a[i]
        if t.dim() >= 2:
            buf = torch.zeros((*t.shape[:-1], t.shape[-1] + 3), dtype=t.dtype)
            buf[..., :t.shape[-1]] = t
            a[i] = buf[..., :t.shape[-1]]
    muts.append(("a row slice of a wider buffer", row_slice))

    for bad in BAD_DTYPES:
        def to_dtype(rng, gen, a, k, bad=bad):
            first = a[shape.inputs[0]]
            for i, t in enumerate(a):
                if isinstance(t, torch.Tensor) and t.dtype == first.dtype:
                    a[i] = t.to(bad) if bad != torch.bool else t > 0
        muts.append((f"dtype {bad}".replace("torch.", ""), to_dtype))

    def meta(rng, gen, a, k):
        for i, t in enumerate(a):
            if isinstance(t, torch.Tensor):
                a[i] = t.to("meta")
        for key, t in k.items():
            if isinstance(t, torch.Tensor):
                k[key] = t.to("meta")
    muts.append(("meta tensors", meta))

    def one_meta(rng, gen, a, k):
        i = rng.choice([i for i, t in enumerate(a) if isinstance(t, torch.Tensor)])
        a[i] = a[i].to("meta")
    muts.append(("one tensor on meta", one_meta))

    for w, o in shape.alias:
        def alias(rng, gen, a, k, w=w, o=o):
            a[w] = a[o]
        muts.append((f"{shape.names[w]} is {shape.names[o]}", alias))

    def drop(rng, gen, a, k):
        a.pop()
    muts.append(("one argument too few", drop))

    def extra(rng, gen, a, k):
        a.append(rng.choice([1.0, None, "x"]))
    muts.append(("one argument too many", extra))

    tensor_positions = [i for i in range(len(shape.names)) if i in shape.inputs + shape.written]
    for replacement in (1.0, None, [1.0, 2.0]):
        def not_tensor(rng, gen, a, k, replacement=replacement):
            a[rng.choice(tensor_positions)] = replacement
        muts.append((f"{type(replacement).__name__} for a tensor", not_tensor))

    for i in shape.scalars:
        for label, value in (("a string", "1e-6"), ("a 0-d tensor", torch.tensor(1e-6)), ("negative", -1e-3),
                             ("None", None), ("a bool", True), ("NaN", float("nan")), ("inf", float("inf"))):
            def scalar(rng, gen, a, k, i=i, value=value):
                a[i] = value.clone() if isinstance(value, torch.Tensor) else value
            muts.append((f"{shape.names[i]} {label}", scalar))

    def shrink(rng, gen, a, k):
        i = rng.choice(tensor_positions[1:] or tensor_positions)
        t = a[i]
        a[i] = t[..., :-1] if t.dim() and t.shape[-1] > 0 else t.unsqueeze(0)
    muts.append(("a tensor of another shape", shrink))

    for label, value in (("a float for an int", 8.0), ("a bool for an int", True), ("an int for a bool", 1),
                         ("None for a bool", None)):
        def flag(rng, gen, a, k, value=value, label=label):
            want = int if "for an int" in label else bool
            spots = [i for i, x in enumerate(a) if type(x) is want]
            if spots:
                a[rng.choice(spots)] = value
        muts.append((label, flag))

    if shape.out:
        muts.append(("out=", lambda rng, gen, a, k: k.update(out=_with_out(shape, a))))
        muts.append(("out= of another dtype", lambda rng, gen, a, k: k.update(out=_with_out(shape, a, torch.float64))))
        muts.append(("out= of another shape", lambda rng, gen, a, k: k.update(out=_with_out(shape, a, bad="shape"))))
        muts.append(("out= is the input", lambda rng, gen, a, k: k.update(out=a[0])))

        def out_overlap(rng, gen, a, k):
            x = a[0]
            if x.numel() >= 2 and shape.out == "like":
                buf = torch.empty(x.numel() + 1, dtype=x.dtype)
                buf[:-1] = x.flatten()
                a[0] = buf[:-1].view(x.shape)
                k["out"] = buf[1:].view(x.shape)
        muts.append(("out= overlaps the input by one element", out_overlap))
        muts.append(("out= a float", lambda rng, gen, a, k: k.update(out=1.0)))
        muts.append(("out= positional float", lambda rng, gen, a, k: a.append(1.0)))
    if shape.written:
        def expanded(rng, gen, a, k):
            i = rng.choice(shape.written)
            t = a[i]
            if t.dim() >= 2 and t.shape[0] > 1:
                a[i] = t[:1].expand(t.shape)
        muts.append(("a written tensor expanded (stride 0)", expanded))
    return muts


def cases(seed: int = 52, per_op: int = 80, device: str = "cpu") -> list[Case]:
    """``per_op`` seeded cases for every shipped op: each mutation at least once, the rest drawn at random."""
    rng = random.Random(seed)
    out = []
    for op, shape in OPS.items():
        muts = mutations(op, shape)
        picks = list(range(len(muts))) + [rng.randrange(len(muts)) for _ in range(max(0, per_op - len(muts)))]
        for n, m in enumerate(picks):
            label, mutate = muts[m]
            dtype = rng.choice(shape.dtypes)

            def build(r: random.Random, g: torch.Generator, shape=shape, dtype=dtype, mutate=mutate):
                args, kwargs = shape.valid(r, g, dtype)
                mutate(r, g, args, kwargs)
                return args, kwargs

            out.append(Case(op, f"{label}, {str(dtype).replace('torch.', '')}", seed * 100_000 + len(out), build,
                            device))
    return out


# ------------------------------------------------------------------ running a case


def rows_on(op: str, device: str = "cpu") -> list[spec.KernelSpec]:
    """The op's rows that run on ``device``: on the CPU the floor, Triton rows under the interpreter and
    :func:`jit_twins`; on CUDA every row whose toolchain is here (CUDA rows included)."""
    where = torch.device(device)
    return [r for r in spec.rows_for(op) if where.type in r.devices and r.probe(where)]


def cpu_rows(op: str) -> list[spec.KernelSpec]:
    return rows_on(op, "cpu")


def paths(op: str, device: str = "cpu") -> dict[str, Callable[..., Any]]:
    """K, every row on ``device`` called directly, and torch.ops.rapid_llm: what every case runs through."""
    found = {"K": getattr(K, op)}
    found.update({r.name: r.load() for r in rows_on(op, device)})
    found["torch.ops"] = getattr(torch.ops.rapid_llm, op)
    return found


# ------------------------------------------------------------------ a JIT row's call path on the CPU


#: Calls the op's checks refuse that reached a twin's launcher anyway (jit_twins): (row, the checks' answer).
reached: list[tuple[str, str]] = []


def _twin_launcher(op: str, row: str, rule: str) -> Callable[..., None]:
    """A launcher with a CUDA launcher's convention (``fn(out, input, *args)``, or ``fn(*args)`` in place) that
    computes with the floor, and records in :data:`reached` any call the op's checks refuse: its row's call
    path must have answered that call before launching."""
    floor = spec.native_row(op).load()

    def launcher(*args: Any) -> None:
        call, kw = (args, {}) if rule == "none" else ((args[1], *args[2:]), {"out": args[0]})
        try:
            floor.check(*call, **kw)
        except Exception as exc:  # noqa: BLE001 - recorded: the launch should never have happened
            reached.append((row, f"{type(exc).__name__}: {exc}"))
        floor(*call, **kw)

    return launcher


@contextlib.contextmanager
def jit_twins() -> Iterator[list[str]]:
    """For every op with a shipped JIT row, a CPU twin: a JitRow of the same source, launcher name, out rule,
    dtypes and layouts, whose launcher is :func:`_twin_launcher` rather than the built CUDA code (which cannot
    run here), registered verified and first in rank on the CPU. So K, the row called directly and torch.ops
    run a JIT row's whole Python and C call path (the op's checks, out allocated in C, the launch) on CPU
    tensors. Yields the twins' names; unregisters them after."""
    from rapid_llm.kernels.toolchain.jit_row import JitRow

    names = []
    try:
        for op in OPS:
            for row in [r for r in spec.rows_for(op) if r.backend == "jit"]:
                target = row.load()
                if not isinstance(target, JitRow):
                    continue  # a Python wrapper around its launcher (moe_topk_gate): no out-first call path to twin
                name = f"jit/cpu_twin_of_{op}"
                twin = JitRow(target.source, target.fn, out=target.out,
                              launcher=_twin_launcher(op, name, target.out))
                spec.register(dataclasses.replace(row, name=name, target=twin, devices=("cpu",), available=None,
                                                  golden=spec.GoldenRecord(verified=True), priority=1e9))
                names.append(name)
        yield names
    finally:
        for name in names:
            spec.unregister(name)


@dataclasses.dataclass
class Answer:
    raised: BaseException | None = None
    observed: Any = None
    wrote: bool = False

    @property
    def error_key(self) -> tuple[str, str]:
        text = str(self.raised)
        return type(self.raised).__name__, (text.splitlines() or [""])[0]

    def describe(self) -> str:
        if self.raised is None:
            return "returned"
        return f"{type(self.raised).__name__}: {str(self.raised)[:300]}"


def _snapshot(args: list, kwargs: dict) -> list[torch.Tensor | None]:
    return [t.detach().clone() if not t.is_meta else None for t in _tensors(args, kwargs)]


def _unchanged(before: list, args: list, kwargs: dict) -> bool:
    for old, t in zip(before, _tensors(args, kwargs)):
        if old is None or t.is_meta:
            continue
        if old.dtype.is_floating_point and old.dtype != FP8:
            if not torch.equal(old.nan_to_num(0.5, 7.0, -7.0), t.nan_to_num(0.5, 7.0, -7.0)) or \
                    not torch.equal(old.isnan(), t.isnan()):
                return False
        elif old.dtype == FP8:
            if not torch.equal(old.view(torch.uint8), t.view(torch.uint8)):
                return False
        elif not torch.equal(old, t):
            return False
    return True


def observe(op: str, args: list, kwargs: dict, result: Any) -> torch.Tensor | None:
    """What a returned call produced, flat, in the order the op's oracle returns it."""
    shape = OPS[op]
    if shape.written:
        parts = [args[i] for i in shape.written]
        if op == "fused_add_rms_norm":
            parts = [args[1], args[0]]
    elif isinstance(result, tuple):  # several outputs (moe_topk_gate: weights, ids), as its oracle concatenates them
        parts = list(result)
    else:
        parts = [kwargs["out"] if isinstance(kwargs.get("out"), torch.Tensor) else result]
    if any(not isinstance(p, torch.Tensor) for p in parts) or len({p.device for p in parts}) > 1:
        return None
    if parts[0].is_complex():
        return None  # no real result to compare: a complex one is wrong by type
    return torch.cat([p.flatten().to(torch.float64) for p in parts])


def run(case: Case, fn: Callable[..., Any]) -> Answer:
    args, kwargs = case.make()
    before = _snapshot(args, kwargs)
    try:
        result = fn(*args, **kwargs)
        if case.device == "cuda":
            torch.cuda.synchronize()  # a kernel's fault is this call's answer, not a later case's
    except Exception as exc:  # noqa: BLE001 - every answer is recorded and judged
        return Answer(raised=exc, wrote=not _unchanged(before, args, kwargs))
    return Answer(observed=(observe(case.op, args, kwargs, result), result))


def _right(case: Case, observed: torch.Tensor | None) -> bool:
    """Whether a returned result is the oracle's, by verify's rule (on meta: the CPU floor's shapes)."""
    args, kwargs = case.make()
    if observed is None:
        return False
    if observed.is_meta:
        cpu = Case(case.op, case.label, case.seed, lambda r, g: _to_cpu(*case.build(r, g)))  # on the CPU
        answer = run(cpu, spec.native_row(case.op).load())
        got = answer.observed[0] if answer.raised is None else None
        return got is not None and got.shape == observed.shape
    if kwargs:
        return False  # the oracles take the positional form; out= cases are judged through it below
    while len(args) > len(OPS[case.op].names) and args[-1] is None:
        args.pop()  # out=None by position: the call without out=
    decl = spec.get_decl(case.op)
    ref = decl.reference
    try:
        exact = ref.oracle(*comparison.to64(tuple(args)))
    except Exception:  # noqa: BLE001 - an oracle that cannot take the call: no right answer exists
        return False
    exact = exact.flatten()
    if exact.shape != observed.shape:
        return False
    if ref.compare is not None:
        errs = ref.compare.errors(observed, exact, tuple(args), {})
    else:
        dtype = args[decl.dispatch_arg].dtype
        magnitude = ref.magnitude(*comparison.to64(tuple(args))) if ref.magnitude is not None else None
        errs = comparison.element_errors(observed, exact, dtype, ulps=ref.ulps, magnitude=magnitude)
    return not bool((errs.diff > errs.allowed).any())


def _to_cpu(args: list, kwargs: dict) -> tuple[list, dict]:
    def cpu(v):
        return torch.zeros_like(v, device="cpu") if isinstance(v, torch.Tensor) else v
    return [cpu(a) for a in args], {k: cpu(v) for k, v in kwargs.items()}


def _outside(row: spec.KernelSpec | None, case: Case, args: list, kwargs: dict) -> bool:
    """Whether a row called directly is outside what it declares (dispatch would not send it this call)."""
    if row is None or row.is_native:
        return False
    decl = spec.get_decl(case.op)
    x = args[decl.dispatch_arg] if len(args) > decl.dispatch_arg else None
    tensors = _tensors(args, kwargs)
    if not isinstance(x, torch.Tensor):
        return False
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(x.dtype)
    return (short not in row.dtypes or any(t.device.type not in row.devices for t in tensors)
            or not row.takes(spec.layout_of(tensors)))


def clear(op: str, exc: BaseException) -> bool:
    text = str(exc)
    return (isinstance(exc, CLEAR_CLASSES) and len(text.splitlines()) == 1
            and (text.startswith(f"{op}:") or text.startswith(f"{op}(")))


def judge(case: Case, answers: dict[str, Answer]) -> tuple[str, str]:
    """The case's verdict (VERDICTS) and, for a failure, why."""
    args, kwargs = case.make()
    included = {}
    for name, answer in answers.items():
        row = spec.get_row(name) if "/" in name else None
        if answer.wrote:
            return "wrote before raising", f"{name} raised after writing: {answer.describe()}"
        if answer.raised is not None and not clear(case.op, answer.raised):
            return "unclear", f"{name}: {answer.describe()}"
        if answer.raised is not None and _outside(row, case, args, kwargs):
            continue  # a row refusing, clearly, a call it does not declare
        included[name] = answer
    raised = {n for n, a in included.items() if a.raised is not None}
    if raised and len(raised) != len(included):
        return "inconsistent", "; ".join(f"{n}: {a.describe()}" for n, a in included.items())
    if raised:
        keys = {a.error_key for a in included.values()}
        if len(keys) > 1:
            return "inconsistent", "; ".join(f"{n}: {a.describe()}" for n, a in included.items())
        return "clear error", ""
    if kwargs.get("out") is not None and isinstance(kwargs["out"], torch.Tensor):
        # judged as the positional call's result: the same op without out= on fresh arguments
        plain = dataclasses.replace(case, build=lambda r, g: _without_out(*case.build(r, g)))
        ok = all(_right_with(plain, a.observed[0], case) for a in included.values())
    else:
        ok = all(_right(case, a.observed[0]) for a in included.values())
    if not ok:
        return "silently wrong", "; ".join(f"{n}: returned" for n in included)
    return "right", ""


def _without_out(args: list, kwargs: dict) -> tuple[list, dict]:
    return args, {k: v for k, v in kwargs.items() if k != "out"}


def _right_with(plain: Case, observed: torch.Tensor | None, case: Case) -> bool:
    args, kwargs = case.make()
    out = kwargs["out"]
    if observed is None or out.is_meta:
        return observed is not None
    if out.data_ptr() == args[0].data_ptr():
        pass  # out= the input: the result is judged against the input's values before the call
    return _right(plain, observed)


def run_all(seed: int = 52, per_op: int = 80, device: str = "cpu",
            ops: tuple[str, ...] | None = None) -> tuple[Counter, list[str]]:
    """Every case (of ``ops``, default all), its tensors on ``device``, through every path: the verdict counts and
    a line per failure. A case is the same whichever ops are run."""
    counts: Counter = Counter()
    failures = []
    all_paths = {op: paths(op, device) for op in (ops or OPS)}
    for case in [c for c in cases(seed, per_op, device) if c.op in all_paths]:
        answers = {name: run(case, fn) for name, fn in all_paths[case.op].items()}
        verdict, why = judge(case, answers)
        counts[verdict] += 1
        if verdict not in ("right", "clear error"):
            failures.append(f"{verdict}: {case}: {why}")
    return counts, failures


def summary(counts: Counter) -> str:
    n = sum(counts.values())
    return (f"bad-input fuzz: {n} cases, right {counts['right']}, clear errors {counts['clear error']}, "
            f"silently wrong {counts['silently wrong']}, unclear {counts['unclear']}, "
            f"inconsistent {counts['inconsistent']}, wrote before raising {counts['wrote before raising']}")

