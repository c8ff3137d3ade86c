"""CuTe DSL rows without a GPU: the probe's reasons, and (where nvidia-cutlass-dsl is installed) a build of
cute/rms_norm for sm_90a into the cache, its key, its reload, and the errors of a kernel that does not compile
or does not match its launcher. The DSL compiles without a GPU but cannot run a kernel: tests/gpu/ops/
test_rms_norm_cute.py runs it.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from rapid_llm.kernels.toolchain import cute_support
from rapid_llm.kernels.toolchain.cache import BuildError


def fake_dsl(root: Path, libs: bool = True) -> Path:
    """An installed DSL's folder: its package, and its CUDA libraries wheel's lib/ where ``libs``."""
    (root / "dsl_packages" / "cutlass").mkdir(parents=True)
    (root / "dsl_packages" / "cutlass" / "__init__.py").write_text("")
    if libs:
        (root / "cu13" / "lib").mkdir(parents=True)
    return root


@pytest.mark.parametrize("version, libs, origin, reason", [
    (None, True, None, r"^the CuTe DSL \(nvidia-cutlass-dsl\) is not installed: pip install"),
    ("leftover", True, None, r"^the CuTe DSL \(nvidia-cutlass-dsl\) is not installed: .*nvidia_cutlass_dsl is a folder "
                             r"without its distribution's metadata \(left by an uninstall\?\): pip install"),
    ("4.3.5", True, "ours", r"^nvidia-cutlass-dsl 4\.3\.5 is older than the 4\.8 the CuTe rows are written for"),
    ("4.8.1", False, "ours", r"lacks its CUDA libraries wheel \(the compiler\): pip install "
                             r"nvidia-cutlass-dsl-libs-cu13==4\.8\.1$"),
    ("4.8.1", True, None, r"^'import cutlass' finds nothing, not the CuTe DSL's package: .* put .*dsl_packages on "
                          r"PYTHONPATH$"),
    ("4.8.1", True, "elsewhere", r"^'import cutlass' finds .*other.*, not the CuTe DSL's package"),
])
def test_the_probe_says_why_a_cute_row_cannot_run(tmp_path, version, libs, origin, reason):
    root = fake_dsl(tmp_path / "nvidia_cutlass_dsl", libs)
    where = {"ours": str(root / "dsl_packages" / "cutlass" / "__init__.py"), "elsewhere": "/other/cutlass/__init__.py",
             None: None}[origin]
    answer = cute_support.check(None if version == "leftover" else version, root if version else None, where)
    assert not answer and re.search(reason, answer.reason), answer.reason


def test_the_probe_accepts_an_installed_dsl_and_refuses_cpu_tensors(tmp_path):
    root = fake_dsl(tmp_path / "nvidia_cutlass_dsl")
    assert cute_support.check("4.8.1", root, str(root / "dsl_packages" / "cutlass" / "__init__.py"))
    assert cute_support.available("cpu").reason == cute_support.NO_INTERPRETER  # installed or not


def test_explain_filters_the_cute_row_on_cpu_with_the_same_reason_with_or_without_the_dsl():
    import rapid_llm.kernels as K

    verdict = K.explain("rms_norm", dtype="bf16", device="cpu", numel=4096).verdict("cute/rms_norm")
    assert (verdict.backend, verdict.verdict, verdict.reason) == ("cute", "filtered", cute_support.NO_INTERPRETER)


def test_the_cute_row_refuses_cpu_tensors_with_the_ops_words_and_without_the_dsl():
    """Its module imports without the DSL (the kernels' module is imported only to build one). A CPU tensor gets
    the C launcher's words, so the answer is the same before a build is cached (here) and after (on a GPU)."""
    import torch

    from rapid_llm.kernels.registry import spec

    fn = spec.get_row("cute/rms_norm").load()
    with pytest.raises(ValueError, match=r"^rms_norm: CUDA tensors only, got \[2, 8\] fp32 on cpu$"):
        fn(torch.randn(2, 8), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match=r"^rms_norm: weight must be \[8\]"):
        fn(torch.randn(2, 8), torch.ones(7), 1e-6)


# ---- with the DSL installed: builds for sm_90a without a GPU

needs_dsl = pytest.mark.skipif(not cute_support.installed(),
                               reason=f"the CuTe DSL is not installed here: {cute_support.installed().reason}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPID_LLM_CACHE_DIR", str(tmp_path / "cache"))
    from rapid_llm.kernels.toolchain import cute_build

    monkeypatch.setattr(cute_build, "_LOADED", {})
    return tmp_path / "cache"


@needs_dsl
def test_cute_rms_norm_builds_for_sm90_into_the_cache_and_reloads_without_compiling(cache, monkeypatch):
    from rapid_llm.kernels.ops.norm.rms_norm import cute as row
    from rapid_llm.kernels.toolchain import cute_build

    build = row.build("bf16", 4096)
    module, cached = cute_build.load(build, "sm_90a")
    assert not cached and module.__signatures__["rms_norm"].kinds == "tttf"
    entry = next(p for p in cache.glob("jit/cute_rms_norm_bf16_4096_*") if p.is_dir())
    ptx = (entry / "kernels.ptx").read_text()
    kernels = cute_build.kernel_entries(ptx)
    assert [params for _, params in kernels] == [row.PARAMS, row.PARAMS]  # the 16-byte kernel, then the 1-element one
    wide = ptx.split(".entry")[1:][[n for n, _ in cute_build.kernel_entries(ptx)].index(kernels[0][0])]
    assert len(re.findall(r"ld\.global[.a-z0-9]*\.v4", wide)) == 4  # x twice, weight twice: 16-byte loads
    assert not list(Path.cwd().glob("cutlass_*.cubin"))  # the DSL's own copies went into the build, not the cwd
    facts = module.__build_facts__  # read from the cubin: 256 threads of 43 registers here, no local memory
    assert [(f.threads_per_block, f.stack_frame) for f in (facts[kernels[0][0]], facts[kernels[1][0]])] == \
        [(256, 0), (1024, 0)]

    monkeypatch.setattr(cute_build, "_LOADED", {})  # as a new process: found by its key, nothing compiled
    monkeypatch.setattr(cute_build.CuteBuilder, "build", lambda *a: pytest.fail("rebuilt a cached entry"))
    again, cached = cute_build.load(build, "sm_90a")
    assert cached and again.__file__ == module.__file__


@needs_dsl
def test_the_key_names_the_bytes_the_specialisation_and_the_arch(tmp_path):
    from rapid_llm.kernels.ops.norm.rms_norm import cute as row
    from rapid_llm.kernels.toolchain.cute_build import build_key

    build = row.build("bf16", 4096)
    key = build_key(build, "sm_90a")
    assert key == build_key(row.build("bf16", 4096), "sm_90a")
    assert len({key, build_key(build, "sm_100a"), build_key(row.build("fp16", 4096), "sm_90a"),
                build_key(row.build("bf16", 4097), "sm_90a")}) == 4
    edited = tmp_path / "cute_kernel.py"
    edited.write_bytes(build.kernel_source.read_bytes() + b"\n# edited\n")
    import dataclasses

    assert build_key(dataclasses.replace(build, kernel_source=edited), "sm_90a") != key


BROKEN = textwrap.dedent("""\
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int64
    from cutlass.cute.runtime import make_ptr


    @cute.kernel
    def kernel(x: cute.Pointer, n: Int64):
        tidx, _, _ = cute.arch.thread_idx()
        if tidx < n:
            j = tidx
        x[j] = Float32(0.0)


    @cute.jit
    def host(x: cute.Pointer, n: Int64):
        kernel(x, n).launch(grid=(1, 1, 1), block=(32, 1, 1))


    def compile_kernels(spec, arch, dump_dir):
        p = make_ptr(Float32, 16, cute.AddressSpace.gmem, assumed_align=16)
        c = cute.compile(host, p, Int64(1), options=f"--gpu-arch {arch} --keep-cubin --keep-ptx --dump-dir {dump_dir}")
        return c.artifacts.CUBIN, c.artifacts.PTX


    def defines(spec, symbols):
        return {"RL_K": symbols[0]}
""")


def _cell_build(tmp_path, monkeypatch, text: str, params: tuple[str, ...]):
    from rapid_llm.kernels.toolchain.cute_build import CuteBuild

    (tmp_path / "cell_kernel.py").write_text(text)
    host = tmp_path / "cell_host.cpp"
    host.write_text('#include "common/rapid_llm.cuh"\nextern "C" __global__ void RL_K(float* x, int64_t n);\n'
                    "#if RL_HOST\nvoid run(rl::Tensor x) { rl::launch(RL_K, 1, 32, 0, x.data<float>(), x.numel()); }\n"
                    "RL_EXPORT(run)\n#endif\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cell_kernel", raising=False)  # each test's own cell
    return CuteBuild("cell", tmp_path / "cell_kernel.py", host, {"n": 1}, "cell_kernel:compile_kernels",
                     "cell_kernel:defines", params)


@needs_dsl
def test_a_kernel_that_does_not_compile_names_its_file_and_line(cache, tmp_path, monkeypatch):
    from rapid_llm.kernels.toolchain import cute_build

    with pytest.raises(BuildError) as info:
        cute_build.load(_cell_build(tmp_path, monkeypatch, BROKEN, ("u64", "u64")), "sm_90a")
    assert "cell_kernel.py:12" in str(info.value), str(info.value)  # the line that reads j, not defined on every path
    assert not [p for p in cache.glob("jit/cell_*") if p.is_dir()]  # nothing published


@needs_dsl
def test_a_launcher_that_passes_other_parameters_fails_the_build(cache, tmp_path, monkeypatch):
    from rapid_llm.kernels.toolchain import cute_build

    fixed = BROKEN.replace("    if tidx < n:\n        j = tidx\n    x[j]", "    x[tidx]")
    assert fixed != BROKEN
    with pytest.raises(BuildError, match=r"the launcher passes \(u64, u32\), but\n\w+ takes \(u64, u64\)"):
        cute_build.load(_cell_build(tmp_path, monkeypatch, fixed, ("u64", "u32")), "sm_90a")
    module, _ = cute_build.load(_cell_build(tmp_path, monkeypatch, fixed, ("u64", "u64")), "sm_90a")
    assert module.__signatures__["run"].kinds == "t"


@needs_dsl
@pytest.mark.parametrize("dtype, hidden, keep", [("fp32", 20000, 2), ("bf16", 32768, 1), ("fp32", 65536, 0)])
def test_what_a_thread_keeps_fits_its_registers_without_spilling(dtype, hidden, keep, tmp_path):
    """The launch shapes' rule (cute.specialisation) at its edges: the row and the weight kept at 1024 threads
    (64 registers a thread), the row only, nothing (two passes); each kernel within its registers, no stack."""
    from rapid_llm.kernels.ops.norm.rms_norm import cute as row
    from rapid_llm.kernels.ops.norm.rms_norm.cute_kernel import compile_kernels
    from rapid_llm.kernels.toolchain.cubin_facts import kernel_facts
    from rapid_llm.kernels.toolchain.cute_build import block_sizes

    spec = row.specialisation(dtype, hidden)
    assert (spec["KEEP"], spec["THREADS"]) == (keep, 1024)
    cubin, ptx = compile_kernels(spec, "sm_90a", str(tmp_path))
    facts = kernel_facts(cubin, "sm_90a", block_sizes(ptx))
    assert len(facts) == 2 and all(f.threads_per_block == 1024 for f in facts.values())
    assert [(f.registers <= 64, f.stack_frame) for f in facts.values()] == [(True, 0), (True, 0)], facts


def test_inspect_of_a_cute_row_whose_launcher_names_no_builds_says_how_to_name_them():
    from rapid_llm.kernels.inspection import inspector as inspection
    from rapid_llm.kernels.registry import spec
    from rapid_llm.kernels.registry.spec import GoldenRecord, KernelSpec

    def scale_nb(input, factor, out=None):  # a cell's launcher over a cute_launcher
        return input * factor

    with spec.isolated(discover=True):
        spec.register(KernelSpec(name="cute/scale_nb", op="scale", target=scale_nb, devices=("cuda",),
                                 golden=GoldenRecord(verified=False, baseline="native/scale")))
        assert "cute_builds(dtype) -> CuteBuild" in inspection.inspect("cute/scale_nb").notes[0]


@needs_dsl
def test_inspect_shows_each_dtypes_build_at_the_bench_shape(cache):
    from rapid_llm.kernels.inspection import inspector as inspection

    result = inspection.inspect("cute/rms_norm")
    assert len(result.kernels()) == 6  # bf16, fp16, fp32: 16-byte and 1-element kernels
    wide = next(s for s in result.kernels() if "ptrbf16gmemalign16" in s)
    assert result.block_size(wide) == 256 and result.facts[wide].spills == 0 and result.facts[wide].stack_frame == 0
    assert result.code(wide, "ptx").count("ld.global.v4") == 4
