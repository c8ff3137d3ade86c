#!/usr/bin/env python
"""Execute notebooks in place and save their outputs (nbclient + nbformat, no nbconvert).

    python scripts/run_notebooks.py notebooks/*.ipynb

Each notebook runs top to bottom in a fresh kernel whose working directory is
the notebook's folder (as in JupyterLab and under ``pytest --nbval``), and is
written back with the new outputs. Cells tagged ``raises-exception`` may
raise; any other error stops that notebook, leaves its file untouched, and
makes the script exit non-zero after the remaining notebooks have run.
Run it on the machine whose outputs should be committed (the GPU box).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def run(path: Path, timeout: int, kernel: str | None) -> bool:
    nb = nbformat.read(path, as_version=4)
    name = kernel or nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(nb, timeout=timeout, kernel_name=name, record_timing=False,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        print(f"{path}: FAILED after {time.perf_counter() - start:.0f} s\n{exc}", file=sys.stderr)
        return False
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"{path}: executed in {time.perf_counter() - start:.0f} s, outputs saved", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds a single cell may run (default 900)")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's kernelspec, else python3)")
    args = parser.parse_args(argv)
    ok = True
    for path in args.notebooks:
        ok = run(path, args.timeout, args.kernel) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
