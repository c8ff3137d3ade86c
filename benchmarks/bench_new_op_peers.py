#!/usr/bin/env python3
"""Head to head on one GPU: the three new ops, each row and dispatch, against FlashInfer's kernels and
torch.compile of the native floor.

    python benchmarks/bench_new_op_peers.py [--json OUT.json] [--table OUT.txt] [--ops cache sampling gate]
                                            [--peers rapid_llm flashinfer compile] [--repeats 50] [--budget-s 230]
    python benchmarks/bench_new_op_peers.py --cpu-test [--json OUT.json]   # the plumbing, without a GPU

On a GPU machine without the package registry, benchmarks/peers/run_new_ops.sh OUTDIR installs the carried
FlashInfer (benchmarks/peers/fetch_new_op_wheels.sh) and runs this under a time cap.

Shapes:

* reshape_and_cache_flash: T = 1, 16, 64, 128, 1024, 16384 tokens of 8 kv heads x 128, bf16, block size 16, the
  slots of the op's bench case (each block's 16 slots in order, blocks shuffled, no padding), plus a copy of the
  same bytes (key and value read, both written). FlashInfer: ``append_paged_kv_cache`` on the same caches, the
  slots given as its page table (flashinfer_peer.page_table, built outside the timed call). Checked: its caches
  after one call equal the floor's, bit for bit.
* top_k_top_p_sampling: batch 1, 32, 128 x vocabulary 131072, fp32 probabilities (each row's k in [1, 100],
  p = 0.9, as the op's bench case), and the same rows as logits (their log, ``from_logits``). FlashInfer:
  ``top_k_top_p_sampling_from_probs`` / ``_from_logits`` with per-row k and p tensors and a fixed seed and offset,
  in its default order (``top_k_first``: p on the renormalised top k, as ours) and ``joint`` (p on the whole
  distribution). Its draws are random with another generator than ours, so they are checked only for staying
  inside each row's top-k / nucleus set of that order (float64, ties and the last 1e-3 of p taken leniently),
  over 8 seeds; never for equality.
* moe_topk_gate: DeepSeek-V3's gate (256 experts, 8 groups, top 4 groups, k = 8, sigmoid with an fp32 bias,
  renormalised) at T = 1, 16, 64, 128, bf16 logits. FlashInfer: ``fused_topk_deepseek`` (its bias cast to the
  logits' dtype, scaling factor 1, no programmatic dependent launch). Checked: the tokens whose 8 ids match the
  floor's as a set, and the largest weight difference on those.

Every arm is timed by rapid_llm.bench.bench: cold L2, CUDA events, median and 20th/80th percentiles of ``--repeats``
calls, new content on every call and checked calls: our rows, dispatch and the compiled floor against the native
floor (``reference``), FlashInfer against an untimed call of itself (its answers differ from ours by design: its own
generator, its own page table). torch.compile (dynamic=True unless --compile-static: one compile per op and form)
makes its first call at each shape outside the timing; its compile times are reported. Anything that cannot run is
reported as 'skipped: reason' and the rest goes on; the JSON is rewritten after each op, so a run cut short keeps
what it measured. Order: each op's rows, dispatch and FlashInfer first (cache write, gate, sampling), the compiled
floors last, since Inductor's compiles are what a time budget should cut first.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import torch



def _peer_module() -> Any:
    """benchmarks/peers/flashinfer_peer.py (a script's neighbour, not a package)."""
    path = Path(__file__).resolve().parent / "peers" / "flashinfer_peer.py"
    spec = importlib.util.spec_from_file_location("flashinfer_peer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fip = _peer_module()

OPS = {"cache": "reshape_and_cache_flash", "sampling": "top_k_top_p_sampling", "gate": "moe_topk_gate"}
PEERS = ("rapid_llm", "flashinfer", "compile")
CACHE_TOKENS = (1, 16, 64, 128, 1024, 16384)
SAMPLING_BATCHES = (128, 32, 1)  # the goal's shape first: a run cut short has it
GATE_TOKENS = (1, 16, 64, 128)
VOCAB = 131072
#: What --cpu-test runs: one small shape per op, the native row and dispatch, and torch.compile (its eager backend)
#: of the gate's floor alone (the compiled arm's code is every op's; Dynamo's import and traces cost seconds each).
CPU_TEST = dict(cache=(1,), sampling=(2,), gate=(1,), vocab=512, repeats=3, compile_ops=("gate",))
#: Seeds FlashInfer's draws are checked over (each a full batch of draws).
CHECK_SEEDS = 8
#: Slack on p when a FlashInfer draw is checked against the nucleus (its fp32 sums against our float64 ones).
P_SLACK = 1e-3

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


class Run:
    """What the run found: results, checks, skips and errors, written to JSON after each op."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.doc: dict[str, Any] = {"args": {k: v for k, v in vars(args).items()}, "results": [], "checks": [],
                                    "skipped": {}, "errors": [], "compile_s": {}}
        self.deadline = T0 + args.budget_s

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def skip(self, key: str, why: str) -> None:
        why = " ".join(str(why).split())[:800]
        self.doc["skipped"][key] = why
        log(f"{key}: skipped: {why}")

    def error(self, key: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"
        self.doc["errors"].append({"key": key, "error": text, "trace": traceback.format_exc()[-2000:]})
        log(f"{key}: ERROR {text}")

    def save(self) -> None:
        if self.args.json:
            self.doc["elapsed_s"] = round(time.perf_counter() - T0, 1)
            Path(self.args.json).write_text(json.dumps(self.doc, indent=1, default=str))


# ------------------------------------------------------------------------------------------- timing


def time_arm(run: Run, op: str, size: Any, arm: str, fn: Callable[..., Any], args: tuple,
             bytes_moved: int | None, reference: Callable[..., Any] | None, min_left: float = 3.0,
             plain_retry: bool = False) -> None:
    """Time one arm through rapid_llm.bench.bench and record it (or why not). ``plain_retry``: a peer whose
    answer may vary between two calls on the same content (a sampler's draws) and that the checked calls
    therefore refuse is timed again without them, and the figure says so."""
    from rapid_llm.bench import BenchRefused, bench

    key = f"{op} {size} {arm}"
    if run.left() < min_left:
        run.skip(key, f"time budget ({run.args.budget_s:.0f} s) spent")
        return
    note = None
    try:
        r = bench(fn, *args, bytes_moved=bytes_moved, repeats=run.args.repeats, label=arm, reference=reference)
    except BenchRefused as exc:
        if not (plain_retry and exc.kind == "timed_output_wrong"):
            run.skip(key, f"bench refused it: {exc.kind}: {exc.detail}")
            return
        note = f"timed without the checked calls: {exc.kind} on the first try ({exc.detail[:200]})"
        log(f"{key}: {note}")
        try:
            r = bench(fn, *args, bytes_moved=bytes_moved, repeats=run.args.repeats, label=arm, integrity=False)
        except Exception as exc2:  # noqa: BLE001
            run.error(key, exc2)
            return
    except Exception as exc:  # noqa: BLE001 - one arm's failure is reported, the rest goes on
        run.error(key, exc)
        return
    run.doc["results"].append({"op": op, "size": size, "arm": arm, "median_us": r.median_us, "p20_us": r.p20_us,
                               "p80_us": r.p80_us, "repeats": r.repeats, "kind": r.kind, "device": r.device,
                               "gbps": r.gbps, "copy_fraction": r.roofline_fraction,
                               "rotation_sets": r.rotation_sets, "note": note})


def native_function(op: str) -> Callable[..., Any]:
    """The op's native floor as plain Python (its target, not a wrapper): what torch.compile is given."""
    from rapid_llm.kernels.registry.spec import native_row

    module, _, name = native_row(op).target.partition(":")
    return getattr(importlib.import_module(module), name)


class Compiled:
    """torch.compile of one op's floor, one compiled function per variant, with each new shape's first call
    (its compile, or a recompile) made and timed before the timing."""

    def __init__(self, run: Run, op: str) -> None:
        self.run, self.op, self.fns = run, op, {}

    #: Budget a compile (or recompile) must leave: Inductor's sort-and-scan graphs take tens of seconds.
    MIN_LEFT_S = 30.0

    def warm(self, variant: str, args: tuple) -> Callable[..., Any] | None:
        if self.run.left() < self.MIN_LEFT_S:
            self.run.skip(f"{self.op} {variant} compile {_shape(args)}", "time budget too short for a compile")
            return None
        if variant not in self.fns:
            backend = self.run.args.compile_backend
            # dynamic=True: one compile serves every size (a serving engine's batch dimension is dynamic too);
            # --compile-static compiles each shape on its own, which costs Inductor's sort-and-scan graphs tens of
            # seconds each.
            dynamic = not self.run.args.compile_static
            self.fns[variant] = torch.compile(native_function(self.op), backend=backend, dynamic=dynamic)
        fn = self.fns[variant]
        t0 = time.perf_counter()
        try:
            fn(*_fresh(args))
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            self.run.error(f"{self.op} {variant} torch.compile", exc)
            return None
        self.run.doc["compile_s"][f"{self.op} {variant} {_shape(args)}"] = round(time.perf_counter() - t0, 2)
        return fn


def _shape(args: tuple) -> str:
    return "x".join(str(n) for n in args[0].shape)


def _fresh(args: tuple) -> tuple:
    """The arguments with every tensor cloned: a warm-up call must not write into the timed case."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def our_arms(run: Run, op: str, dtype: str, device: torch.device, numel: int) -> list[tuple[str, Callable]]:
    """(label, call) of each of our rows that can run here (--cpu-test: the native row), then dispatch."""
    import rapid_llm.kernels as K
    from rapid_llm.bench.ops import eligible_rows
    from rapid_llm.kernels.registry.spec import get_row

    arms = []
    for row, why in eligible_rows(op, dtype, device, numel).items():
        if run.args.cpu_test and not row.startswith("native/"):
            why = why or "--cpu-test times the native row and dispatch only"
        if why is not None:
            run.doc["skipped"].setdefault(f"{op} {row}", why)
            continue
        arms.append((row.split("/")[0], get_row(row).call_path()))
    arms.append(("dispatch", getattr(K, op)))
    return arms


# ------------------------------------------------------------------------------------- the cache write


def cache_cases(run: Run, device: torch.device):
    from rapid_llm.bench.ops import make_args
    from rapid_llm.kernels.ops.cache.reshape_and_cache_flash import reference as ref

    for tokens in run.sizes["cache"]:
        yield tokens, make_args(OPS["cache"], tokens * ref.TOKEN_NUMEL, torch.bfloat16, device)


def ours_cache(run: Run, device: torch.device, tokens: int, case: Any, compiled: Compiled | None,
               floor: Callable) -> None:
    op, args = OPS["cache"], case.args
    if compiled is None:  # key and value: read once, written once
        src = torch.cat([args[0].flatten(), args[1].flatten()])
        time_arm(run, op, tokens, "copy", lambda s, d: d.copy_(s), (src, torch.empty_like(src)), 2 * src.nbytes,
                 None)
    if compiled is None and "rapid_llm" in run.args.peers:
        for label, fn in our_arms(run, op, "bf16", device, args[0].numel()):
            time_arm(run, op, tokens, label, fn, args, case.bytes_moved, floor)
    if compiled is not None:
        fn = compiled.warm("bf16", args)
        if fn is not None:
            time_arm(run, op, tokens, "compile", fn, args, case.bytes_moved, floor)


def flashinfer_cache(run: Run, tokens: int, case: Any, fi: Any, floor: Callable) -> None:
    op = OPS["cache"]
    key, value, key_cache, value_cache, slots, k_scale, v_scale = case.args
    table = fip.page_table(slots, key_cache.shape[1])
    written = table.pop("tokens")
    if written.numel() != key.shape[0]:  # padded tokens are left out of FlashInfer's inputs
        key, value = key.index_select(0, written), value.index_select(0, written)
    call = fip.append_paged_kv_cache(fi)
    fi_args = (key, value, key_cache, value_cache, table["batch_indices"], table["positions"], table["kv_indices"],
               table["kv_indptr"], table["kv_last_page_len"])
    try:  # before the timing (which rewrites the arguments' content): one call on copies of the caches against
        # the floor's on other copies, the same bytes
        kc, vc = key_cache.clone(), value_cache.clone()
        call(key, value, kc, vc, *fi_args[4:])
        kf, vf = key_cache.clone(), value_cache.clone()
        floor(case.args[0], case.args[1], kf, vf, slots, k_scale, v_scale)
        same = bool(torch.equal(kc.view(torch.int16), kf.view(torch.int16))
                    and torch.equal(vc.view(torch.int16), vf.view(torch.int16)))
        run.doc["checks"].append({"op": op, "size": tokens, "arm": "flashinfer", "caches_equal_to_floor": same})
        log(f"{op} T={tokens}: flashinfer's caches {'equal' if same else 'DIFFER FROM'} the floor's")
    except Exception as exc:  # noqa: BLE001
        run.error(f"{op} {tokens} flashinfer check", exc)
        return
    time_arm(run, op, tokens, "flashinfer", call, fi_args, case.bytes_moved, None)


# ------------------------------------------------------------------------------------------ sampling


def sampling_case(batch: int, vocab: int, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """The op's bench case at any vocabulary: sharp random probabilities (exponential^4, normalised), each row's
    k in [1, 100], p = 0.9; their log as logits."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.empty((batch, vocab)).exponential_(generator=gen).pow_(4.0)
    probs = probs / probs.sum(dim=1, keepdim=True)
    top_k = torch.randint(1, 101, (batch,), generator=gen, dtype=torch.int32)
    return {"probs": probs.to(device), "logits": probs.log().to(device), "top_k": top_k.to(device),
            "top_p": torch.full((batch,), 0.9, device=device), "seed_offset": torch.tensor([1234, 0], device=device)}


def sampling_cases(run: Run, device: torch.device):
    for batch in run.sizes["sampling"]:
        yield batch, sampling_case(batch, run.vocab, device, seed=batch)


def _sampling_form(case: dict, form: str) -> tuple[str, tuple, int]:
    x = case[form]
    batch = x.shape[0]
    size = f"{batch}x{x.shape[1]} {form}"
    args = (x, case["top_k"], case["top_p"], case["seed_offset"], None, form == "logits")
    return size, args, x.numel() * x.element_size() + batch * (4 + 4 + 8)


def ours_sampling(run: Run, device: torch.device, batch: int, case: dict, compiled: Compiled | None,
                  floor: Callable) -> None:
    op = OPS["sampling"]
    for form in ("probs", "logits"):
        size, args, moved = _sampling_form(case, form)
        if compiled is None and "rapid_llm" in run.args.peers:
            for label, fn in our_arms(run, op, "fp32", device, args[0].numel()):
                time_arm(run, op, size, label, fn, args, moved, floor)
        if compiled is not None:
            fn = compiled.warm(form, args)
            if fn is not None:
                time_arm(run, op, size, "compile", fn, args, moved, floor)


def allowed(q: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, joint: bool = False) -> torch.Tensor:
    """bool [B, V]: the tokens a top-k + top-p sampler may draw from the exact distribution ``q`` (float64):
    fewer than k tokens strictly likelier, and the mass of the strictly likelier ones below p (+ P_SLACK) of the
    top k's mass (top-k first: p on the renormalised top k, ours and FlashInfer's default) or of the whole mass
    (``joint``: FlashInfer's one-kernel order, p on the distribution as it is, a larger set). Ties at either
    boundary count as inside."""
    q = q.to(torch.float64)
    batch, vocab = q.shape
    qs, order = torch.sort(q, dim=1, descending=True)
    incl = torch.cumsum(qs, dim=1)
    k = top_k.to(torch.int64).clamp(1, vocab)
    w_k = incl[:, -1:] if joint else torch.gather(incl, 1, (k - 1)[:, None])
    # strict: how many values are strictly larger (the first position of each value's group of ties)
    asc = qs.flip(1).contiguous()
    strict = vocab - torch.searchsorted(asc, qs.contiguous(), right=True)
    excl = torch.where(strict > 0, torch.gather(incl, 1, (strict - 1).clamp_min(0)), torch.zeros_like(qs))
    keep = (strict < k[:, None]) & ((strict == 0) | (excl < (top_p.to(torch.float64)[:, None] + P_SLACK) * w_k))
    return torch.zeros_like(keep).scatter_(1, order, keep)


def flashinfer_sampling(run: Run, batch: int, case: dict, fi: Any, floor: Callable) -> None:
    """Every form and order's draws checked first, then each timed: a timed run rewrites its arguments' content
    (the harness's new content for every call), so no check may follow one on the same tensors."""
    op = OPS["sampling"]
    sets = {order: allowed(case["probs"], case["top_k"], case["top_p"], joint=order == "joint")
            for order in ("top_k_first", "joint")}
    timed = []
    for form in ("probs", "logits"):
        size, args, moved = _sampling_form(case, form)
        x, top_k, top_p = args[:3]
        for order, ok in sets.items():
            arm = f"flashinfer {order}"
            call = fip.sampling(fi, form == "logits", order)
            try:
                outside = draws = 0
                for seed in range(CHECK_SEEDS):
                    ids = call(x, top_k, top_p, seed=seed).long()
                    valid = (ids >= 0) & (ids < x.shape[1])
                    inside = ok.gather(1, ids.clamp(0, x.shape[1] - 1)[:, None]).squeeze(1) & valid
                    outside += int((~inside).sum())
                    draws += ids.numel()
                run.doc["checks"].append({"op": op, "size": size, "arm": arm, "draws": draws,
                                          "outside_top_k_top_p": outside})
                log(f"{op} {size} {arm}: {outside} of {draws} draws outside the top-k / nucleus set")
            except Exception as exc:  # noqa: BLE001
                run.error(f"{op} {size} {arm} check", exc)
                continue
            timed.append((size, arm, call, (x, top_k, top_p), moved))
    for size, arm, call, args, moved in timed:
        time_arm(run, op, size, arm, call, args, moved, None, plain_retry=True)


# ---------------------------------------------------------------------------------------------- gate


def gate_cases(run: Run, device: torch.device):
    from rapid_llm.bench.ops import make_args
    from rapid_llm.kernels.ops.moe.moe_topk_gate import reference as ref

    for tokens in run.sizes["gate"]:
        yield tokens, make_args(OPS["gate"], tokens * ref.DSV3_EXPERTS, torch.bfloat16, device)


def ours_gate(run: Run, device: torch.device, tokens: int, case: Any, compiled: Compiled | None,
              floor: Callable) -> None:
    op, args = OPS["gate"], case.args
    if compiled is None and "rapid_llm" in run.args.peers:
        for label, fn in our_arms(run, op, "bf16", device, args[0].numel()):
            time_arm(run, op, tokens, label, fn, args, case.bytes_moved, floor)
    if compiled is not None:
        fn = compiled.warm("bf16", args)
        if fn is not None:
            time_arm(run, op, tokens, "compile", fn, args, case.bytes_moved, floor)


def flashinfer_gate(run: Run, tokens: int, case: Any, fi: Any, floor: Callable) -> None:
    op, args = OPS["gate"], case.args
    logits, k, _scoring, _renorm, bias, groups, topk_groups = args
    try:
        call = fip.dsv3_gate(k, groups, topk_groups)
        fi_bias = bias.to(logits.dtype)
        weights = torch.empty((tokens, k), dtype=logits.dtype, device=logits.device)
        ids = torch.empty((tokens, k), dtype=torch.int32, device=logits.device)
        call(logits, fi_bias, weights, ids)
        want_w, want_ids = floor(*args)
        mine, mine_at = torch.sort(ids.long(), dim=1)
        theirs, theirs_at = torch.sort(want_ids.long(), dim=1)
        same = (mine == theirs).all(dim=1)
        w_mine = torch.gather(weights.float(), 1, mine_at)
        w_theirs = torch.gather(want_w.float(), 1, theirs_at)
        diff = float((w_mine - w_theirs)[same].abs().max()) if bool(same.any()) else None
        run.doc["checks"].append({"op": op, "size": tokens, "arm": "flashinfer", "tokens_same_ids": int(same.sum()),
                                  "tokens": tokens, "max_weight_diff_same_ids": diff})
        log(f"{op} T={tokens}: flashinfer's ids are the floor's (as a set) on {int(same.sum())} of {tokens} tokens; "
            f"largest weight difference there {diff}")
    except Exception as exc:  # noqa: BLE001
        run.error(f"{op} {tokens} flashinfer", exc)
        return
    time_arm(run, op, tokens, "flashinfer", call, (logits, fi_bias, weights, ids), case.bytes_moved, None)


#: name -> (the cases; our rows and dispatch, or with a Compiled the compiled floor; FlashInfer's arm)
BENCHES = {"cache": (cache_cases, ours_cache, flashinfer_cache),
           "gate": (gate_cases, ours_gate, flashinfer_gate),
           "sampling": (sampling_cases, ours_sampling, flashinfer_sampling)}


def each_case(run: Run, name: str, device: torch.device, arm: str, time_one: Any) -> None:
    """``time_one(size, case)`` at each of the op's sizes while the run's time budget lasts (a size past it is
    skipped and named, ``arm`` after it), each case freed before the next is made; the results saved after."""
    cases = BENCHES[name][0]
    for size, case in cases(run, device):
        if run.left() < 5:
            run.skip(f"{OPS[name]} {size}{arm}", "time budget spent")
            continue
        time_one(size, case)
        del case
    run.save()


def head_to_head(run: Run, name: str, device: torch.device, fi: Any, builds: Any) -> None:
    """Our rows and dispatch at every size, then FlashInfer's (its module loaded by now: prebuilt, or built in
    the background while ours were timed, waited for as long as the budget allows)."""
    from rapid_llm.bench.ops import floor_call

    op = OPS[name]
    _, ours, theirs = BENCHES[name]
    floor = floor_call(op)
    each_case(run, name, device, "", lambda size, case: ours(run, device, size, case, None, floor))
    peer = peer_for(run, fi, builds, op)
    if peer is not None:
        each_case(run, name, device, " flashinfer", lambda size, case: theirs(run, size, case, peer, floor))


def compiled_floor(run: Run, name: str, device: torch.device) -> None:
    """torch.compile of the floor at every size: last, after every op's head to head, since Inductor's compiles
    (tens of seconds for sampling's sorts and scans) are what a time budget should cut first."""
    from rapid_llm.bench.ops import floor_call

    op = OPS[name]
    if run.args.cpu_test and name not in CPU_TEST["compile_ops"]:
        run.skip(f"{op} compile", "--cpu-test compiles the gate's floor only")
        return
    _, ours, _ = BENCHES[name]
    floor, compiled = floor_call(op), Compiled(run, op)
    each_case(run, name, device, " compile", lambda size, case: ours(run, device, size, case, compiled, floor))


# --------------------------------------------------------------------------------------------- report


def table(doc: dict[str, Any]) -> str:
    """One block per op: a row per size, a column per arm, median us (and % of the copy roofline for the cache
    write)."""
    out = []
    for op in OPS.values():
        rows = [r for r in doc["results"] if r["op"] == op]
        if not rows:
            continue
        arms = list(dict.fromkeys(r["arm"] for r in rows))
        sizes = list(dict.fromkeys(r["size"] for r in rows))
        cell = {(r["size"], r["arm"]): r for r in rows}
        width = max(len(a) for a in arms) + 2
        what = {"reshape_and_cache_flash": "T tokens, 8 kv heads x 128, bf16, block 16; median us (% of copy roofline)",
                "top_k_top_p_sampling": "batch x vocab, fp32; median us",
                "moe_topk_gate": "T tokens, DeepSeek-V3 (256 experts, 8 groups, top 4, k 8, sigmoid + bias), bf16; "
                                 "median us"}[op]
        out.append(f"\n{op}: {what} [{rows[0]['device']}]")
        out.append(f"{'size':>24}" + "".join(f"{a:>{max(width, 16)}}" for a in arms))
        for s in sizes:
            line = f"{str(s):>24}"
            for a in arms:
                r = cell.get((s, a))
                if r is None:
                    text = "-"
                elif op == "reshape_and_cache_flash" and r["copy_fraction"]:
                    text = f"{r['median_us']:.2f} ({100 * r['copy_fraction']:.0f}%)"
                else:
                    text = f"{r['median_us']:.2f}"
                line += f"{text:>{max(width, 16)}}"
            out.append(line)
    checks = doc.get("checks") or []
    if checks:
        out.append("\nchecks of FlashInfer's outputs:")
        out += [f"  {c}" for c in checks]
    if doc.get("compile_s"):
        out.append(f"\ntorch.compile, first call per variant and shape (s): {doc['compile_s']}")
    if doc.get("skipped"):
        out.append("\nskipped:")
        out += [f"  {k}: {v}" for k, v in doc["skipped"].items()]
    if doc.get("errors"):
        out.append("\nerrors:")
        out += [f"  {e['key']}: {e['error']}" for e in doc["errors"]]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------- main


def environment(device: torch.device) -> dict[str, Any]:
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "platform": platform.platform()}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton"] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env["device"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                         "l2_bytes": p.L2_cache_size}
    else:
        env["device"] = {"name": "cpu"}
    return env


def flashinfer_for(run: Run, device: torch.device) -> tuple[Any | None, Any | None]:
    """FlashInfer and its module builds (started in the background), or (None, None) with the reason recorded."""
    if "flashinfer" not in run.args.peers:
        return None, None
    if device.type != "cuda":
        where = importlib.util.find_spec("flashinfer")
        run.skip("flashinfer", "no CUDA device: FlashInfer's kernels run on a GPU only"
                 + ("" if where else " (and flashinfer is not installed here)"))
        return None, None
    run.doc["flashinfer_env"] = fip.prepare_env(Path(os.environ.get("PEER_BENCH_SCRATCH", "/tmp/peer-bench")), True)
    fi, why, facts = fip.import_flashinfer()
    run.doc["flashinfer"] = facts
    if fi is None:
        run.skip("flashinfer", why)
        return None, None
    log(f"flashinfer {facts['version']} from {facts['file']} ({facts['import_s']} s)")
    if run.args.no_build:
        run.skip("flashinfer", "--no-build")
        return None, None
    names = [fip.MODULE_OF[OPS[o]] for o in ("cache", "gate", "sampling") if o in run.args.ops]
    log(f"flashinfer JIT: building {', '.join(names)} in the background")
    return fi, fip.Builds(names, run.doc["flashinfer_env"]["toolkit_headers_missing"])


def peer_for(run: Run, fi: Any, builds: Any | None, op: str) -> Any | None:
    """FlashInfer once the module ``op`` needs is built (waiting at most what the budget leaves), else None."""
    if fi is None or builds is None:
        return None
    name = fip.MODULE_OF[op]
    module, why = builds.wait(name, run.left() - 20)
    run.doc["flashinfer_jit_s"] = builds.times()
    if module is None:
        run.skip(f"{op} flashinfer", why)
        return None
    return fi


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", choices=list(OPS), default=list(OPS))
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--budget-s", type=float, default=230.0, help="stop starting new arms after this long")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--compile-static", action="store_true",
                        help="compile the floor for each shape (default: once per op and form, dynamic=True)")
    parser.add_argument("--no-build", action="store_true", help="skip FlashInfer (no JIT build)")
    parser.add_argument("--json", help="write every figure and check here")
    parser.add_argument("--table", help="write the readable table here too")
    parser.add_argument("--cpu-test", action="store_true",
                        help="the plumbing on a CPU: small shapes, the native row and dispatch, compile's eager "
                             "backend, FlashInfer skipped with its reason")
    args = parser.parse_args(argv)
    if args.cpu_test:
        args.repeats = min(args.repeats, CPU_TEST["repeats"])
        args.compile_backend = "eager"
    device = torch.device("cpu" if args.cpu_test or not torch.cuda.is_available() else "cuda")
    run = Run(args)
    run.vocab = CPU_TEST["vocab"] if args.cpu_test else VOCAB
    run.sizes = ({k: CPU_TEST[k] for k in ("cache", "sampling", "gate")} if args.cpu_test else
                 {"cache": CACHE_TOKENS, "sampling": SAMPLING_BATCHES, "gate": GATE_TOKENS})
    if device.type != "cuda" and not args.cpu_test:
        log("no CUDA device: the figures below are CPU numbers (use --cpu-test for the plumbing check)")
    run.doc["env"] = environment(device)
    log(f"python {run.doc['env']['python']}, torch {torch.__version__}, device {run.doc['env']['device']['name']}")
    fi, builds = flashinfer_for(run, device)
    import rapid_llm  # noqa: F401 - the ops register on import

    run.doc["env"]["rapid_llm"] = str(Path(rapid_llm.__file__).parent)
    steps = [(n, "head to head") for n in ("cache", "gate", "sampling") if n in args.ops]
    if "compile" in args.peers:
        steps += [(n, "torch.compile") for n in ("cache", "gate", "sampling") if n in args.ops]
    for name, what in steps:
        log(f"{OPS[name]}: {what} ...")
        try:
            if what == "head to head":
                head_to_head(run, name, device, fi, builds)
            else:
                compiled_floor(run, name, device)
        except Exception as exc:  # noqa: BLE001
            run.error(f"{OPS[name]} {what}", exc)
        run.save()
    text = table(run.doc)
    print(text, flush=True)
    if args.table:
        Path(args.table).write_text(text + "\n")
    run.save()
    log(f"done: {len(run.doc['results'])} figures, {len(run.doc['errors'])} errors")
    return 1 if run.doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
