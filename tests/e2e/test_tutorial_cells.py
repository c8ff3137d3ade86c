"""No two tutorial cells save different sources to one csrc/ path.

The tutorials run in any order (nbval, JupyterLab, a user's own session), and a cell saves itself to
csrc/<group>/<NAME>.cu: two cells that disagree there would leave the checkout changed by whichever ran last
(.ci/run fails on a changed checkout after the tests).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from IPython.core.magic_arguments import parse_argstring

from rapid_llm.notebook.magics import CudaJitMagics, _group_of

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def _cuda_jit_cells():
    for notebook in NOTEBOOKS:
        for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("%%cuda_jit"):
                line, _, body = source.partition("\n")
                args = parse_argstring(CudaJitMagics.cuda_jit, line.split(None, 1)[1])
                group = args.group if args.group is not None else _group_of(args.op)
                saved = body if body.endswith("\n") else body + "\n"  # IPython ends every cell with a newline
                yield f"csrc/{group}/{args.name}.cu", saved, f"{notebook.name} cell {index}"


def test_the_tutorials_have_cuda_jit_cells():
    assert len(list(_cuda_jit_cells())) >= 9


def test_no_two_tutorial_cells_save_different_sources_to_one_path():
    bodies: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, body, where in _cuda_jit_cells():
        bodies[path][body].append(where)
    clashes = {path: [wheres for wheres in versions.values()] for path, versions in bodies.items()
               if len(versions) > 1}
    assert not clashes, "cells saving different sources to one path: " + "; ".join(
        f"{path}: {' vs '.join(', '.join(w) for w in wheres)}" for path, wheres in clashes.items())
