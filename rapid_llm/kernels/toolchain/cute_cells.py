"""A CuTe DSL kernel written in a notebook cell, callable from Python through a C launcher: ``cute_launcher``.

The cell form mirrors a Triton or Gluon cell: a ``@cute.kernel`` function, a Python launcher that allocates the
output and calls it, and a ``KernelSpec`` that makes the launcher a row (``cute/<name>``)::

    @cute.kernel
    def scale_kernel(x: cute.Pointer, out: cute.Pointer, n: Int64, factor: Float32, BLOCK: cutlass.Constexpr):
        ...

    run = cute_launcher(scale_kernel, block=256, BLOCK=256)

    def scale_nb(x, factor, out=None):
        out = torch.empty_like(x) if out is None else out
        run(triton.cdiv(x.numel(), 256), x, out, x.numel(), factor)   # grid, then the kernel's arguments
        return out

``run(grid, *args)`` takes a tensor for each ``cute.Pointer`` parameter and a number for each ``Int32``,
``Int64`` or ``Float32`` one; ``Constexpr`` parameters come last and are given once, as keywords of
``cute_launcher``. The first call with a new set of tensor dtypes compiles the kernel for them (the DSL, no GPU
needed) and links a generated C launcher (rapid_llm.kernels.toolchain.cute_build), kept in the build cache under
a key of the kernel's source, the dtypes, the constants, the block and the DSL's version: an unchanged cell loads
its build in a new kernel process without compiling, and an edited one builds afresh. The launcher checks each
tensor (CUDA, one device, its dtype, the alignment the kernel was compiled to assume: ``align=16`` for 128-bit
accesses, else the element size) and launches on torch's
current stream. A kernel that does not compile raises BuildError with the DSL's diagnostic, which names the
cell's line.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import re
import textwrap
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from rapid_llm.kernels import platform
from rapid_llm.kernels.toolchain import cute_build

__all__ = ["cute_launcher", "CuteLauncher", "host_source", "written_source"]

#: torch dtype -> (the DSL's type name, rapid_llm_abi.h's dtype code).
_DTYPES = {torch.bfloat16: ("BFloat16", 2), torch.float16: ("Float16", 1), torch.float32: ("Float32", 0),
           torch.float64: ("Float64", 3), torch.int8: ("Int8", 4), torch.int32: ("Int32", 6),
           torch.int64: ("Int64", 7), torch.uint8: ("Uint8", 8)}
#: A scalar parameter's annotation -> its C type, the PTX type the build checks, the launcher's parameter type.
_SCALARS = {"Int32": ("int32_t", "u32", "int64_t"), "Int64": ("int64_t", "u64", "int64_t"),
            "Float32": ("float", "f32", "double")}


def _kind(annotation: Any) -> str:
    name = getattr(annotation, "__name__", str(annotation)).rsplit(".", 1)[-1]
    if name in ("Pointer", "Constexpr") or name in _SCALARS:
        return name
    raise TypeError(f"cute_launcher: a parameter must be annotated cute.Pointer, Int32, Int64, Float32 or "
                    f"cutlass.Constexpr, got {annotation!r}")


def _params(kernel: Callable[..., Any]) -> list[tuple[str, str]]:
    """The kernel's parameters as (name, kind); Constexpr ones last."""
    params = [(p.name, _kind(p.annotation)) for p in inspect.signature(kernel).parameters.values()]
    kinds = [k for _, k in params]
    first_const = kinds.index("Constexpr") if "Constexpr" in kinds else len(kinds)
    if any(k != "Constexpr" for k in kinds[first_const:]):
        raise TypeError(f"cute_launcher({kernel.__name__}): Constexpr parameters must come after the others")
    return params


def host_source(name: str, params: Sequence[tuple[str, str]], block: tuple[int, int, int]) -> str:
    """The C++ launcher of a kernel with ``params``: grid first, then a tensor per pointer and a number per scalar.
    The kernel's symbol, and each tensor's dtype code and assumed alignment, come from the build (RL_CUTE_KERNEL,
    RL_CUTE_DTYPE_<i>, RL_CUTE_ALIGN_<i>)."""
    runtime = [(n, k) for n, k in params if k != "Constexpr"]
    decl = ", ".join("void*" if k == "Pointer" else _SCALARS[k][0] for _, k in runtime)
    args = ", ".join(f"rl::Tensor {n}" if k == "Pointer" else f"{_SCALARS[k][2]} {n}" for n, k in runtime)
    tensors = [n for n, k in runtime if k == "Pointer"]
    checks = [f'  rl::check_cuda("{name}", {{{", ".join(tensors)}}});'] if tensors else []
    for i, t in enumerate(tensors):
        checks.append(f'  RL_CHECK({t}.dtype() == RL_CUTE_DTYPE_{i}, "{name}: {t} must be ", '
                      f'rl::dtype_name(RL_CUTE_DTYPE_{i}), " (the dtype this build is for), got ", {t}.describe());')
        checks.append(f'  RL_CHECK(reinterpret_cast<uintptr_t>({t}.data_ptr()) % RL_CUTE_ALIGN_{i} == 0, "{name}: {t} '
                      f'must start ", RL_CUTE_ALIGN_{i}, "-byte aligned (the kernel is compiled assuming it), got ", '
                      f'{t}.describe());')
    passed = ", ".join(n + ".data_ptr()" if k == "Pointer" else f"static_cast<{_SCALARS[k][0]}>({n})"
                       for n, k in runtime)
    lines = [f"// The launcher of the CuTe DSL kernel {name}, generated by rapid_llm.kernels.toolchain.cute_cells.",
             '#include "common/rapid_llm.cuh"',
             f'extern "C" __global__ void RL_CUTE_KERNEL({decl});',
             "#if RL_HOST",
             f"void launch(int64_t grid_x, int64_t grid_y, int64_t grid_z{', ' if args else ''}{args}) {{",
             *checks,
             f"  rl::launch(RL_CUTE_KERNEL, dim3(grid_x, grid_y, grid_z), dim3({block[0]}, {block[1]}, {block[2]}), 0"
             f"{', ' if passed else ''}{passed});",
             "}",
             f'RL_EXPORT(launch, "launch(grid_x, grid_y, grid_z, ...): the CuTe DSL kernel {name}")',
             "#endif"]
    return "\n".join(lines) + "\n"


def _source_of(fn: Callable[..., Any]) -> str:
    """A function's source from its ``def`` on: once the DSL has compiled a kernel, ``inspect.getsource`` returns
    it without its decorator line, and the key must be the same before and after."""
    text = textwrap.dedent(inspect.getsource(fn))
    match = re.search(r"^(async\s+)?def\s", text, re.M)
    return text[match.start():] if match else text


def written_source(fn: Callable[..., Any]) -> str:
    """A function's source as its file or cell holds it, decorators included: the DSL compiles a kernel into a
    new code object that starts at its ``def``, so ``inspect.getsource`` loses the decorator lines; they are read
    back from the lines above."""
    text = textwrap.dedent(inspect.getsource(fn))
    if text.lstrip().startswith("@"):
        return text
    code = inspect.unwrap(fn).__code__  # the DSL's decorator wraps the function it compiles
    lines = linecache.getlines(code.co_filename)
    above = code.co_firstlineno - 2
    decorators = []
    while 0 <= above < len(lines) and lines[above].strip().startswith("@"):
        decorators.insert(0, lines[above])
        above -= 1
    return textwrap.dedent("".join(decorators) + textwrap.indent(text, " " * _indent(decorators)))


def _annotation_names(source: str) -> list[str]:
    """The first name of each dotted name in a function's parameter and return annotations."""
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg]
    found = []
    for node in [a.annotation for a in args if a is not None and a.annotation is not None] + [fn.returns]:
        for sub in ast.walk(node) if node is not None else ():
            if isinstance(sub, ast.Name) and sub.id not in found:
                found.append(sub.id)
    return found


def _indent(lines: Sequence[str]) -> int:
    return len(lines[0]) - len(lines[0].lstrip()) if lines else 0


def _kept(text: str, suffix: str) -> Path:
    """``text`` in a content-named file of the cache (a build reads its sources from files, and hashes them)."""
    folder = platform.cache_dir("cute-sources")
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}{suffix}"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        platform.write_atomic(path, text)
    return path


class CuteLauncher:
    """A ``@cute.kernel`` callable as ``launcher(grid, *args)``; one build per set of tensor dtypes."""

    def __init__(self, kernel: Callable[..., Any], block: int | Sequence[int], align: int | None = None,
                 depends: Sequence[Callable[..., Any]] = (), **constexprs: Any) -> None:
        self.kernel = kernel
        self.name = kernel.__name__
        self.params = _params(kernel)
        consts = [n for n, k in self.params if k == "Constexpr"]
        missing, extra = set(consts) - set(constexprs), set(constexprs) - set(consts)
        if missing or extra:
            raise TypeError(f"cute_launcher({self.name}): give each Constexpr parameter once as a keyword "
                            f"(missing: {sorted(missing)}, not parameters: {sorted(extra)})")
        self.constexprs = [constexprs[n] for n in consts]
        self.block = tuple((list(block) if isinstance(block, (list, tuple)) else [block]) + [1, 1])[:3]
        self.align = align
        self.depends = tuple(depends)
        self.tensor_positions = [i for i, (_, k) in enumerate(p for p in self.params if p[1] != "Constexpr")
                                 if k == "Pointer"]
        source = "\n".join(_source_of(f) for f in (kernel, *depends))
        self.kernel_source = _kept(source, ".py")
        self.host_source = _kept(host_source(self.name, self.params, self.block), ".cpp")
        self._launchers: dict[tuple[torch.dtype, ...], Any] = {}

    def build(self, dtypes: Sequence[torch.dtype], arch: str | None = None) -> cute_build.CuteBuild:
        """The build for tensors of ``dtypes`` (one per pointer parameter, in order)."""
        for d in dtypes:
            if d not in _DTYPES:
                raise ValueError(f"{self.name}: no CuTe DSL type for {d}; use one of "
                                 f"{', '.join(str(t) for t in _DTYPES)}")
        aligns = [self.align or d.itemsize for d in dtypes]
        spec = {"dtypes": [_DTYPES[d][0] for d in dtypes], "codes": [_DTYPES[d][1] for d in dtypes],
                "aligns": aligns, "constexprs": [repr(c) for c in self.constexprs], "block": list(self.block)}
        params = tuple("u64" if k == "Pointer" else _SCALARS[k][1] for _, k in self.params if k != "Constexpr")
        name = "cute_" + re.sub(r"\W", "_", self.name)
        return cute_build.CuteBuild(name, self.kernel_source, self.host_source, spec, self._compile, _defines, params)

    def _compile(self, spec: Mapping[str, Any], arch: str, dump_dir: str) -> tuple[bytes, str]:
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import make_ptr

        kernel, block, consts = self.kernel, self.block, self.constexprs
        pointers = iter(zip(spec["dtypes"], spec["aligns"]))
        fakes = []
        for _, kind in (p for p in self.params if p[1] != "Constexpr"):
            if kind == "Pointer":
                dtype, align = next(pointers)
                fakes.append(make_ptr(getattr(cutlass, dtype), align, cute.AddressSpace.gmem, assumed_align=align))
            else:
                fakes.append(getattr(cutlass, kind)(1))

        @cute.jit
        def host(*args):
            kernel(*args, *consts).launch(grid=(1, 1, 1), block=block)

        options = f"--gpu-arch {arch} --keep-cubin --keep-ptx --dump-dir {dump_dir}"
        compiled = cute.compile(host, *fakes, options=options)
        return compiled.artifacts.CUBIN, compiled.artifacts.PTX

    def __rapid_llm_export__(self, mod: Any, name: str) -> str:
        """How promote() writes this launcher out (rapid_llm.kernels.registry.opsource): its kernel (and
        ``depends``) by their source as written, decorators included, then the ``cute_launcher(...)`` call."""
        kernel, *depends = [self._export_function(mod, f, name) for f in (self.kernel, *self.depends)]
        make = mod.reference(cute_launcher, "cute_launcher", name)
        consts = [n for n, k in self.params if k == "Constexpr"]
        args = [kernel, f"block={self.block!r}", *([f"align={self.align!r}"] if self.align else []),
                *([f"depends=({', '.join(depends)},)"] if depends else []),
                *(f"{n}={v!r}" for n, v in zip(consts, self.constexprs))]
        return f"{make}({', '.join(args)})"

    @staticmethod
    def _export_function(mod: Any, fn: Callable[..., Any], why: str) -> str:
        """``fn`` written out, and the names its annotations use (``cutlass.Constexpr``): the DSL reads them, and
        a function's own code does not name them."""
        source = written_source(fn)
        plain = inspect.unwrap(fn)
        for used in _annotation_names(source):
            if used in plain.__globals__:
                mod.reference(plain.__globals__[used], used, why)
        return mod.function(plain, why, source=source)

    def __call__(self, grid: int | Sequence[int], *args: Any) -> None:
        key = tuple(args[i].dtype for i in self.tensor_positions)
        fn = self._launchers.get(key)
        if fn is None:
            if len(args) != len(self.params) - len(self.constexprs):
                raise TypeError(f"{self.name}: takes the grid and {len(self.params) - len(self.constexprs)} "
                                f"arguments, got {len(args)}")
            module, _ = cute_build.load(self.build(key))
            fn = self._launchers[key] = module.launch
        if isinstance(grid, int):
            fn(grid, 1, 1, *args)
        else:
            g = (*grid, 1, 1)
            fn(g[0], g[1], g[2], *args)


def _defines(spec: Mapping[str, Any], symbols: Sequence[str]) -> dict[str, str]:
    values = {f"RL_CUTE_DTYPE_{i}": code for i, code in enumerate(spec["codes"])}
    values |= {f"RL_CUTE_ALIGN_{i}": align for i, align in enumerate(spec["aligns"])}
    return cute_build.defines_of(values, symbols, ("RL_CUTE_KERNEL",))


def cute_launcher(kernel: Callable[..., Any], block: int | Sequence[int], align: int | None = None,
                  depends: Sequence[Callable[..., Any]] = (), **constexprs: Any) -> CuteLauncher:
    """``kernel`` (a ``@cute.kernel``) callable as ``launcher(grid, *args)`` through a C launcher; see the module
    docstring. ``block``: threads per CTA; ``align``: the alignment in bytes the kernel may assume of every tensor
    (checked per call; default: its element size, which every tensor has: give 16 for 128-bit accesses);
    ``depends``: functions the kernel calls whose source should name the build too; the keywords: the kernel's
    Constexpr parameters."""
    return CuteLauncher(kernel, block, align, depends, **constexprs)
