"""``%%cuda_jit``: a notebook cell becomes a compiled, bound, registered op.

The magic only orchestrates; each step lives in its own module:
workspace (where the cell is saved: ``csrc/``, the cells' workspace, never the
package's shipped sources), ``rapid_llm.kernels.toolchain.jit`` (the builders, over the
content-keyed cache of ``rapid_llm.kernels.toolchain.cache``), progress (the elapsed line),
compile_errors (the compiler's errors at cell line numbers), cell_rows (the
launcher and the KernelSpec row; the out-first call is
``rapid_llm.kernels.toolchain.jit_row.JitRow``'s). torch and the toolchain are touched
only when a cell runs.
"""
from __future__ import annotations

import difflib
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import List, Unicode

from rapid_llm.kernels.registry import out_rules
from rapid_llm.notebook import cell_rows, workspace
from rapid_llm.notebook.progress import StatusLine, run_with_progress

__all__ = ["CudaJitMagics"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@magics_class
class CudaJitMagics(Magics):
    """The %%cuda_jit cell magic; its defaults are traits (``%config CudaJitMagics``)."""

    csrc_dir = Unicode(
        "",
        help="Folder that cells are saved under. Empty: <project>/csrc, the project being the nearest "
             "folder at or above the working directory with a pyproject.toml (else the working directory).",
    ).tag(config=True)
    default_group = Unicode(
        "", help="Subfolder of csrc/ used when a cell gives no --group (empty: the --op's group, which is the "
                 "op's name for an op of the notebook's, else 'scratch')."
    ).tag(config=True)
    default_flags = List(
        Unicode(), default_value=["-O3"],
        help="device-compiler flags every cell is built with (nvcc, or NVRTC on the fast path, which ignores -O; "
             "-D/-I reach the host pass too); --flags adds to them (e.g. '--use_fast_math').",
    ).tag(config=True)
    default_dtypes = List(
        Unicode(), default_value=list(cell_rows.DEFAULT_DTYPES),
        help="dtypes of an --op row when the cell gives no --dtypes.",
    ).tag(config=True)
    builder = Unicode(
        "", help="Build path, a key given to rapid_llm.kernels.toolchain.jit.register_builder (empty: by the source, "
                 "'torch' when it includes torch's headers, else 'fast'). --builder overrides it per cell.",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        #: NAME -> the jit.BuildResult of its last good build in this kernel.
        self.builds: dict[str, Any] = {}
        self._bound: dict[str, dict[str, Any]] = {}

    @magic_arguments("%cuda_jit")  # shown with a '%' prefix: %%cuda_jit
    @argument("name", metavar="NAME", help="module name, a plain identifier: the cell is saved as csrc/<group>/NAME.cu "
                                           "(csrc/: the cells' workspace, not shipped sources)")
    @argument("--group", "-g", default=None, help="subfolder of csrc/ (a plain identifier), e.g. elementwise")
    @argument("--op", default=None,
              help="register the build as row jit/NAME of this op: op(input, *args, out=None) "
                   "allocates out like input and calls the launcher as launcher(out, input, *args)")
    @argument("--fn", default=None,
              help="the launcher for --op (default: the function called NAME, else the only exported one)")
    @argument("--dtypes", default=None,
              help="dtypes of the --op row, comma-separated (default: CudaJitMagics.default_dtypes)")
    @argument("--flags", default="",
              help="extra device-compiler flags, after CudaJitMagics.default_flags, in quotes: "
                   "--flags \"-lineinfo --use_fast_math\"")
    @argument("--not-graph-safe", action="store_true",
              help="mark the row unsafe under CUDA-graph capture (the launcher syncs or reads host values)")
    @argument("--out", default=out_rules.DEFAULT, choices=tuple(out_rules.OUT_RULES),
              help="how the row makes out: like its input (default), with the last dim halved, or none (in place)")
    @argument("--builder", default=None, help="build path to use (default: CudaJitMagics.builder)")
    @argument("--verbose", "-v", action="store_true", help="show the build commands and the full compiler log")
    @cell_magic
    def cuda_jit(self, line: str, cell: str) -> None:
        """Save the cell as CUDA C++, build it, bind its functions, and with --op register a row.

        The cell is saved as csrc/<group>/NAME.cu: csrc/ at the project root
        is the cells' workspace, not the package's shipped sources (those live
        in rapid_llm/kernels/ops/<group>/<op>/; promote() makes a cell one). An unchanged cell re-run loads from the build cache at once; an edited
        one rebuilds and its new code is what runs, no restart needed. A
        compile error shows the compiler's errors at the cell's line numbers
        and the last good build keeps serving. Without a GPU or nvcc the cell
        is still saved and its row registered as unavailable, with the reason.
        A row made here stays golden-unverified, out of dispatch, until it is
        verified against its baseline.
        """
        self._started = time.perf_counter()  # what the cell really takes, imports and CUDA start-up included
        try:
            args = parse_argstring(self.cuda_jit, line)
        except ValueError as exc:  # the line's own quoting
            raise UsageError(f"%%cuda_jit {line.strip()}: {exc}") from None
        except UsageError as exc:
            raise UsageError(f"{exc}{_option_hint(str(exc), self.cuda_jit)}") from None
        try:
            return self._run(args, cell)
        except (workspace.WorkspaceError, cell_rows.RowError) as exc:
            raise UsageError(str(exc)) from None

    def _csrc(self) -> Path:
        if self.csrc_dir:
            return Path(os.path.abspath(Path(self.csrc_dir).expanduser()))  # a link keeps its name (workspace)
        return workspace.default_csrc()

    def _run(self, args: Any, cell: str) -> None:
        name = workspace.check_identifier(args.name, "NAME")
        if args.op is not None:
            workspace.check_identifier(args.op, "--op")
            _check_op_declared(args.op)
        elif args.fn is not None:
            raise UsageError("--fn picks the launcher of the --op row; give --op too")
        group = args.group if args.group is not None else (self.default_group or _group_of(args.op))
        if not cell.strip():
            raise UsageError(f"the cell is empty: write the CUDA C++ source of {name} below the %%cuda_jit line")
        _check_torch_cell(name, cell)
        dtypes = cell_rows.parse_dtypes(args.dtypes, tuple(self.default_dtypes))
        try:
            flags = (*self.default_flags, *shlex.split(args.flags))
        except ValueError as exc:
            raise UsageError(f"--flags: {exc}") from None
        builder = args.builder or self.builder or None
        if builder is not None:
            from rapid_llm.kernels.toolchain import jit

            if builder not in jit.builders():
                raise UsageError(f"unknown builder {builder!r}; registered: {', '.join(jit.builders())}")
        if args.op is not None:
            cell_rows.check_can_register(name, args.op)

        csrc = self._csrc()
        path = workspace.cell_path(csrc, group, name)
        shown = path.relative_to(csrc.parent).as_posix()
        workspace.write_atomic(path, cell)
        from rapid_llm.kernels.toolchain import jit
        from rapid_llm.kernels.toolchain.jit_row import source_digest

        digest = source_digest(cell, flags)

        availability = jit.available()
        compile_only = None
        if not availability:
            compile_only = jit.can_compile(path, builder)
            if not compile_only:
                self._without_build(args, name, path, shown, digest, dtypes,
                                    f"{availability.reason}; {compile_only.reason}")
                return
        status = StatusLine(live=getattr(self.shell, "kernel", None) is not None)
        result = self._build(args, name, path, cell, shown, flags, builder, status)
        if compile_only is not None:
            self._compiled_only(args, name, path, shown, digest, dtypes, result, status, availability.reason)
            return
        self._expose(args, name, shown, digest, dtypes, result, status, flags)

    def _without_build(self, args: Any, name: str, path: Path, shown: str, digest: str, dtypes: tuple[str, ...],
                       reason: str) -> None:
        line = f"saved {shown}; not built: {reason}"
        if args.op is not None:
            row = cell_rows.row_name(name)
            from rapid_llm.kernels.toolchain.jit_row import JitRow

            probe = cell_rows.not_built(f"not built: {reason}")
            target = JitRow(path, args.fn or name, not_built=f"not built: {reason}", out=args.out)
            cell_rows.register_cell_row(
                name, args.op, target=target, available=probe, dtypes=dtypes,
                graph_safe=not args.not_graph_safe, digest=digest,
                description=f"%%cuda_jit {name} ({shown}), not built here",
            )
            line += f"; row {row} registered for op {args.op!r} (unavailable until built; golden unverified)"
        elif cell_rows.drop_cell_row(name):
            line += f"; row {cell_rows.row_name(name)} removed (this run has no --op)"
        print(line)
        self._hint_native(args.op)

    def _compiled_only(self, args: Any, name: str, path: Path, shown: str, digest: str, dtypes: tuple[str, ...],
                       result: Any, status: StatusLine, reason: str) -> None:
        """A cell built where it cannot run (no CUDA device): compiler errors were checked, nothing is bound."""
        from rapid_llm.kernels.toolchain import jit
        from rapid_llm.kernels.toolchain.jit_row import JitRow

        how = "loaded from cache" if result.cached else f"built in {result.seconds:.1f} s"
        line = (f"{how} for {jit.target_arch_name()} (a compile check: {reason}, so nothing is bound); "
                f"saved {shown}")
        functions = cell_rows.exported_functions(result.module)
        if args.op is not None:
            launcher = cell_rows.pick_launcher(functions, name, args.fn)
            row = cell_rows.row_name(name)
            why = f"compiled here for {jit.target_arch_name()}, cannot run here: {reason}"
            probe = cell_rows.not_built(why)
            cell_rows.register_cell_row(
                name, args.op, target=JitRow(path, launcher, not_built=why, out=args.out), available=probe,
                dtypes=dtypes, graph_safe=not args.not_graph_safe, digest=digest,
                description=f"%%cuda_jit {name} ({shown}), launcher {launcher}(), compiled without a GPU",
            )
            line += f"; row {row} registered for op {args.op!r} (unavailable here; golden unverified)"
        elif cell_rows.drop_cell_row(name):
            line += f"; row {cell_rows.row_name(name)} removed (this run has no --op)"
        self._bind(name, {})  # nothing can run here; a later failed edit keeps this build's row
        self.builds[name] = result
        status.finish(line + _overwritten_note(result, shown))

    def _build(self, args: Any, name: str, path: Path, cell: str, shown: str, flags: tuple[str, ...],
               builder: str | None, status: StatusLine) -> Any:
        """The jit.BuildResult, or a CellBuildError telling the compiler's errors at cell lines."""
        from rapid_llm.kernels.toolchain import jit

        verbose = bool(args.verbose)
        captured = None

        def work() -> Any:
            nonlocal captured
            if not verbose:
                return jit.build_jit(name, path, extra_cuda_cflags=flags, builder=builder, text=cell)
            from rapid_llm.notebook.build_log import capture_fds

            with capture_fds() as captured:
                return jit.build_jit(name, path, extra_cuda_cflags=flags, builder=builder, verbose=True, text=cell)

        if verbose:
            print(f"source {path}\nflags  {' '.join(flags) or '(none)'}\nbuilder {builder or jit.default_builder(path)}")
        try:
            result, _ = run_with_progress(work, f"building {shown}", status)
        except jit.BuildError as exc:
            log = captured.text if captured is not None and captured.text.strip() else exc.log
            if verbose:
                print(log)
            raise self._build_failed(name, path, shown, log, status) from None
        except ImportError as exc:  # compiled and linked, but the loader refused it (an undefined symbol)
            raise self._build_failed(name, path, shown, f"loading the built module failed: {exc}", status) from None
        except jit.CacheError as exc:  # the cache refused an entry, or the disk did (one line: path and fix)
            status.close(f"building {shown}: failed")
            raise UsageError(f"{exc} (the last good build of {name}, if any, keeps serving)") from None
        if verbose:
            if captured is not None and captured.text.strip():
                print(captured.text.rstrip())
            print(f"cache  {result.build_dir}")
        return result

    def _build_failed(self, name: str, path: Path, shown: str, log: str, status: StatusLine) -> Exception:
        from rapid_llm.notebook.compile_errors import CellBuildError, cell_diagnostics, first_error

        diagnostics, count = cell_diagnostics(log, path)
        what = _plural(count, "error") if count else "the end of the log"
        if count:
            block, hint = first_error(diagnostics)
            more = f"({_plural(count - 1, 'more error')}; --verbose shows the full log)" if count > 1 else ""
            what += ", the first:" if count > 1 else ""
            diagnostics = [*block, hint, *([more] if more else [])]
        status.close(f"building {shown}: failed")
        previous = self._bound.get(name)
        if previous is not None:
            bound = ", ".join(f"{f}()" for f in previous) or "nothing"
            row = cell_rows.row_name(name)
            row_text = f" and row {row}" if self._has_cell_row(name) else ""
            keeps = f"the last good build of {name} keeps serving: {bound}{row_text} unchanged."
        else:
            keeps = f"{name} has no earlier good build in this kernel: nothing was bound or registered."
        message = "\n".join([f"{name}: compile failed ({shown}), {what}" + ("" if what.endswith(":") else ":"),
                             *diagnostics, keeps, "Run with --verbose for the full compiler log."])
        return CellBuildError(message, log=log, source=path)

    @staticmethod
    def _has_cell_row(name: str) -> bool:
        from rapid_llm.kernels.registry import spec

        try:
            spec.get_row(cell_rows.row_name(name))
        except spec.RegistryError:
            return False
        return True

    def _expose(self, args: Any, name: str, shown: str, digest: str, dtypes: tuple[str, ...],
                result: Any, status: StatusLine, flags: tuple[str, ...]) -> None:
        functions = cell_rows.exported_functions(result.module)
        launcher = cell_rows.pick_launcher(functions, name, args.fn) if args.op is not None else None
        self._bind(name, functions)
        self.builds[name] = result
        cell_s = time.perf_counter() - getattr(self, "_started", time.perf_counter() - result.seconds)
        how = (f"loaded from cache in {result.seconds:.2f} s" if result.cached
               else f"built in {result.seconds:.1f} s")
        if cell_s - result.seconds > 0.2:  # a new kernel: torch's import and CUDA start-up come first
            how += f" (the cell took {cell_s:.1f} s: importing torch and starting CUDA)"
        bound = ", ".join(f"{f}()" for f in functions) or "no functions"
        line = f"{how} -> {bound} bound"
        from rapid_llm.kernels.toolchain.buildfacts import notable

        worth_knowing = notable(getattr(result.module, "__build_facts__", None) or {})
        if worth_knowing:  # spills or low occupancy: said at once; inspect(row) has the rest
            line += " [" + "; ".join(worth_knowing[:2]) + (f"; +{len(worth_knowing) - 2} more" if len(worth_knowing) > 2
                                                          else "") + "]"
        if launcher is not None:
            row = cell_rows.row_name(name)
            from rapid_llm.kernels.toolchain.jit_row import JitRow

            spec, kept = cell_rows.register_cell_row(
                name, args.op, target=JitRow(result.source, launcher, launcher=functions[launcher], digest=digest,
                                                out=args.out, flags=tuple(flags), built_from=result.compiled_source),
                available="rapid_llm.kernels.toolchain.jit:available", dtypes=dtypes,
                graph_safe=not args.not_graph_safe, digest=digest,
                description=f"%%cuda_jit {name} ({shown}), launcher {launcher}()",
            )
            golden = ("golden verified (kept: source unchanged)" if kept
                      else "golden unverified: verify it to let dispatch use it")
            probe = spec.probe("cuda")
            state = "available" if probe else f"unavailable: {probe.reason}"
            line += f"; row {row} registered for op {args.op!r} ({golden}; {state})"
        elif cell_rows.drop_cell_row(name):
            line += f"; row {cell_rows.row_name(name)} removed (this run has no --op)"
        status.finish(line + _overwritten_note(result, shown))
        self._hint_native(args.op)

    def _bind(self, name: str, functions: dict[str, Any]) -> None:
        """Bind the new build's functions; unbind those of the last build that it no longer has."""
        ns = self.shell.user_ns
        for fname, obj in self._bound.get(name, {}).items():
            if fname not in functions and ns.get(fname) is obj:
                del ns[fname]
        ns.update(functions)
        self._bound[name] = dict(functions)

    @staticmethod
    def _hint_native(op: str | None) -> None:
        if op is not None and cell_rows.native_row(op) is None:
            print(cell_rows.native_row_hint(op))


def _option_hint(message: str, magic: Any) -> str:
    """What to do about a line argparse refused: the option meant, or quotes around compiler flags."""
    match = re.search(r"unrecognized arguments: (.+)", message)
    if match is None:
        return ' (put nvcc flags in quotes: --flags "-lineinfo --use_fast_math")' if "--flags" in message else ""
    options = sorted({o for action in magic.parser._actions for o in action.option_strings if o.startswith("--")})
    hints = []
    for word in match[1].split():
        close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.7)
        if close:
            hints.append(f"did you mean {close[0]}?")
    if hints:
        return " (" + "; ".join(hints) + " %%cuda_jit? lists the options)"
    if match[1].startswith("-"):
        return ' (put nvcc flags in quotes: --flags "-lineinfo --use_fast_math")'
    return ""


def _check_op_declared(op: str) -> None:
    """A row needs its op declared first: a typo must not quietly start a new op."""
    from rapid_llm.kernels.registry import spec

    ops = spec.all_ops()
    if op in ops:
        return
    close = difflib.get_close_matches(op, ops, n=3, cutoff=0.6)
    near = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UsageError(f"--op {op}: no op {op!r} is declared. {near}A new op is declared first, with its native floor, "
                     f"reference and bench case: K.declare_op({op!r}, native=..., reference=K.Reference(...), "
                     f"bench=...) (declared ops: {', '.join(ops)})")


def _group_of(op: str | None) -> str:
    """The folder of a cell given no --group: its op's group (its name for a notebook's op), else scratch."""
    if op is None:
        return "scratch"
    from rapid_llm.kernels.registry import spec

    return spec.op_group(op) or op


#: A cell for torch's extension loader: its headers included, at the start of a line.
_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:torch|ATen|c10|pybind11)/', re.M)
_BINDINGS = re.compile(r"\b(?:PYBIND11_MODULE|TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?)\s*\(")


def _check_torch_cell(name: str, cell: str) -> None:
    """A torch-header cell without bindings would compile for a minute and then fail to import: say so now."""
    if _TORCH_INCLUDE.search(cell) and not _BINDINGS.search(cell):
        raise UsageError(
            f"{name}: the cell includes torch's headers, so it builds through torch's extension loader (about a "
            "minute), which needs bindings to import it, and it defines none. Add them at the end:\n"
            "  PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"" + name + "\", &" + name + "); }\n"
            "or include \"common/rapid_llm.cuh\" instead of torch's headers and export the launcher with "
            "RL_EXPORT(" + name + "): the fast path builds that in under a second.")


def _overwritten_note(result: Any, shown: str) -> str:
    """What to add to the status line when the cell's file changed under its build (another process saved a
    cell of the same name there): the build is this cell's content all the same (toolchain.snapshot)."""
    snap = getattr(result, "snapshot", None)
    if snap is None:
        return ""
    try:
        if Path(result.source).read_bytes() == snap.files[0][1]:
            return ""
    except OSError:
        pass
    return (f"; {shown} changed during the build (another process saved other content there): built this cell's "
            f"content, kept at {result.compiled_source}")
