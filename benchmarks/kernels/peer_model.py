"""The peer benchmark at another model's shapes: its own run (every peer, its timer, its checks, its JSON), with
the hidden size, intermediate size and heads of ``--model`` instead of Llama-3-8B's.

    python benchmarks/kernels/peer_model.py --peer-bench PEER_DIR --model llama3-70b [bench_peers.py args]

Every argument after ``--model`` goes to the peer benchmark as is (``--json F``, ``--budget-s``, ``--tokens``...).
The JSON it writes names the model under ``args.model``, which benchmarks/peer_cells.py reads, so the runs of
several models can be read together. Run it where ``run.sh`` of the peer benchmark has installed the peers (their
folder on ``PYTHONPATH``), e.g. after one ``run.sh`` on the same machine.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_bench  # noqa: E402  (the folder of this script, as its siblings import it)


def record_model(json_path: str, model: str) -> None:
    """Name ``model`` in the run's JSON, where peer_cells.py looks for a run's shapes."""
    path = Path(json_path)
    if not path.is_file():
        return
    run = json.loads(path.read_text())
    run.setdefault("args", {})["model"] = model
    path.write_text(json.dumps(run, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-bench", required=True, help="the folder holding bench_peers.py")
    p.add_argument("--model", required=True, choices=list(peer_bench.MODELS))
    args, rest = p.parse_known_args(argv)
    peer = peer_bench.load(args.peer_bench)
    keep = peer_bench.set_model(peer, args.model)
    hidden, inter, q_heads, kv_heads, head = peer_bench.MODELS[args.model]
    print(f"model {args.model}: hidden {hidden}, intermediate {inter}, {q_heads}/{kv_heads} heads of {head}",
          flush=True)
    code = peer.main([*rest, *keep])
    if "--json" in rest:
        record_model(rest[rest.index("--json") + 1], args.model)
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
