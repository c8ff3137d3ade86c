"""Cold build and warm (new process) load times of a shipped JIT source.

    python benchmarks/kernels/jit_build_times.py [elementwise/scale.cu]

Runs each step in a fresh interpreter against an empty cache directory, so
"cold" really is cold and "warm" really is a new process reading the disk
cache. The figures come from the loader's own BuildResult.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

STEP = """
import json, sys
import torch
from rapid_llm.kernels.jit import build_jit
r = build_jit("scale", sys.argv[1])
print(json.dumps({"cached": r.cached, "seconds": r.seconds,
                  "builder": r.builder}))
"""


def run_step(source: str, cache: str) -> dict:
    env = dict(os.environ, RAPID_LLM_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", STEP, source], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"build step failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else "elementwise/scale.cu"
    with tempfile.TemporaryDirectory(prefix="rapid_llm_build_times_") as cache:
        cold = run_step(source, cache)
        warm = run_step(source, cache)
    print(f"{source}: cold build {cold['seconds']:.2f} s (cached={cold['cached']}), "
          f"warm load in a new process {warm['seconds']:.3f} s (cached={warm['cached']}), "
          f"builder {cold['builder']}")


if __name__ == "__main__":
    main()
