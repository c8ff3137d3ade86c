"""scripts/run_notebooks.py keeps the committed outputs' device kind: no silent CPU overwrite of GPU outputs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def script(monkeypatch):
    """The script as a module, its kernel replaced by one that writes 'ran' into every code cell."""
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def execute(self, **_):
        for cell in self.nb.cells:
            if cell.cell_type == "code":
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
        return self.nb

    monkeypatch.setattr(mod.NotebookClient, "execute", execute)
    monkeypatch.setattr(mod, "this_device", lambda: "cpu")
    return mod


def notebook(path: Path, outputs: bool, outputs_from: str | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print('hi')")
    if outputs:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="from the GPU\n")]
    nb.cells.append(cell)
    if outputs_from is not None:
        nb.metadata["rapid_llm"] = {"outputs_from": outputs_from}
    nbformat.write(nb, path)
    return path


def stored(path: Path) -> tuple[str, str | None]:
    nb = nbformat.read(path, as_version=4)
    text = "".join(o["text"] for o in nb.cells[0].outputs)
    return text, nb.metadata.get("rapid_llm", {}).get("outputs_from")


def test_outputs_of_another_device_kind_are_refused_and_left_untouched(script, tmp_path, capsys):
    path = notebook(tmp_path / "gpu.ipynb", outputs=True, outputs_from="NVIDIA H200")
    before = path.read_bytes()
    assert script.main([str(path)]) == 1
    assert path.read_bytes() == before
    err = capsys.readouterr().err
    assert "REFUSED" in err and "'NVIDIA H200'" in err and "'cpu'" in err and "--force" in err


def test_force_replaces_them_and_records_this_device(script, tmp_path):
    path = notebook(tmp_path / "gpu.ipynb", outputs=True, outputs_from="NVIDIA H200")
    assert script.main([str(path), "--force"]) == 0
    assert stored(path) == ("ran\n", "cpu")


def test_outputs_of_unknown_origin_are_refused(script, tmp_path, capsys):
    path = notebook(tmp_path / "old.ipynb", outputs=True)
    assert script.main([str(path)]) == 1
    assert stored(path) == ("from the GPU\n", None)
    assert "unknown device" in capsys.readouterr().err


def test_same_device_and_empty_notebooks_run_and_are_labelled(script, tmp_path):
    same = notebook(tmp_path / "same.ipynb", outputs=True, outputs_from="cpu")
    empty = notebook(tmp_path / "new.ipynb", outputs=False)
    refused = notebook(tmp_path / "gpu.ipynb", outputs=True, outputs_from="NVIDIA H200")
    assert script.main([str(same), str(refused), str(empty)]) == 1  # the others still run
    assert stored(same) == ("ran\n", "cpu") and stored(empty) == ("ran\n", "cpu")
    assert stored(refused) == ("from the GPU\n", "NVIDIA H200")


def test_a_gpu_machine_replaces_cpu_outputs_but_not_another_gpus(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "this_device", lambda: "NVIDIA H200")
    cpu = notebook(tmp_path / "cpu.ipynb", outputs=True, outputs_from="cpu")
    other = notebook(tmp_path / "h100.ipynb", outputs=True, outputs_from="NVIDIA H100 80GB HBM3")
    assert script.main([str(cpu), str(other)]) == 1
    assert stored(cpu) == ("ran\n", "NVIDIA H200")
    assert stored(other) == ("from the GPU\n", "NVIDIA H100 80GB HBM3")


def test_the_committed_notebooks_say_where_their_outputs_came_from():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            assert nb.metadata.get("rapid_llm", {}).get("outputs_from"), f"{path.name}: no rapid_llm.outputs_from"
