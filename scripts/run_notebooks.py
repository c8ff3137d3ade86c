#!/usr/bin/env python
"""Execute notebooks in place and save their outputs (nbclient + nbformat, no nbconvert).

    python scripts/run_notebooks.py notebooks/*.ipynb [--force]

Each notebook runs top to bottom in a fresh kernel whose working directory is
the notebook's folder (as in JupyterLab and under ``pytest --nbval``), and is
written back with the new outputs. Cells tagged ``raises-exception`` may
raise; any other error stops that notebook, leaves its file untouched, and
makes the script exit non-zero after the remaining notebooks have run.
Run it on the machine whose outputs should be committed (the GPU box).

The saved notebook records where its outputs came from, as
``metadata.rapid_llm.outputs_from``: this machine's device label ("NVIDIA
H200", or "cpu"). The committed outputs are the tutorials' figures, so a
notebook whose stored outputs came from another device kind is refused
(before anything runs) unless ``--force``: re-running the notebooks on a
laptop must not silently replace the GPU outputs with CPU ones, nor one
GPU's with another's. Two cases may run: CPU outputs on a GPU machine (they
stand in until the GPU box replaces them, which is what it is for), and a
notebook with no outputs at all (nothing to lose). Stored outputs without
that record are of unknown origin and are refused like another device's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

#: metadata[META][OUTPUTS_FROM]: the device label the stored outputs were produced on.
META, OUTPUTS_FROM = "rapid_llm", "outputs_from"


def this_device() -> str:
    """The device label of this machine, as measurements name it (the kernels run here too)."""
    import torch

    from rapid_llm.kernels import platform

    return platform.device_label("cuda" if torch.cuda.is_available() else "cpu")


def outputs_from(nb: nbformat.NotebookNode) -> str | None:
    """The device label the notebook's stored outputs came from, or None when it was not recorded."""
    return nb.metadata.get(META, {}).get(OUTPUTS_FROM)


def has_outputs(nb: nbformat.NotebookNode) -> bool:
    return any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")


def refusal(nb: nbformat.NotebookNode, device: str) -> str | None:
    """Why re-running would replace outputs of another device kind, or None when it may run."""
    if not has_outputs(nb):
        return None
    source = outputs_from(nb)
    if source == device or (source == "cpu" and device != "cpu"):
        return None
    where = f"came from {source!r}" if source else f"have no metadata.{META}.{OUTPUTS_FROM} (unknown device)"
    return f"its stored outputs {where} and this machine is {device!r}; pass --force to replace them"


def run(path: Path, timeout: int, kernel: str | None, device: str, force: bool = False) -> bool:
    nb = nbformat.read(path, as_version=4)
    why = refusal(nb, device)
    if why is not None and not force:
        print(f"{path}: REFUSED, left untouched: {why}", file=sys.stderr)
        return False
    name = kernel or nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(nb, timeout=timeout, kernel_name=name, record_timing=False,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        print(f"{path}: FAILED after {time.perf_counter() - start:.0f} s\n{exc}", file=sys.stderr)
        return False
    nb.metadata.setdefault(META, {})[OUTPUTS_FROM] = device
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"{path}: executed in {time.perf_counter() - start:.0f} s on {device}, outputs saved", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds a single cell may run (default 900)")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's kernelspec, else python3)")
    parser.add_argument("--force", action="store_true",
                        help="replace stored outputs that came from another device kind (or an unknown one)")
    args = parser.parse_args(argv)
    device = this_device()
    ok = True
    for path in args.notebooks:
        ok = run(path, args.timeout, args.kernel, device, args.force) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
