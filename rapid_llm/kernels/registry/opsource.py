"""An op declared in a notebook, written out as a Python module that declares it again.

Two places need a notebook's declaration outside the notebook: the child
process that runs a row's first ``verify`` (it knows only the library's ops
until it imports this module) and ``promote()``, which ships the op's group.
Both get the same text: the declaration's own functions (native floor,
reference, bench case), taken by their source, with what those functions use
from the notebook's globals. A module becomes an import, an object that lives
in an importable module a ``from ... import``, a function of the notebook its
source again (transitively), a ``@triton.jit`` or ``@gluon.jit`` kernel of the
notebook its decorated source, and a plain constant (or a ``constexpr`` of one) a
literal. Anything else (a
lambda, a closure, a global dict, a class of the notebook) is refused with the
reason, before anything is written. ``promote()`` writes a notebook's Gluon or
Triton row the same way (:func:`row_module_source`).
"""
from __future__ import annotations

import ast
import dis
import functools
import importlib
import importlib.metadata
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import RegistryError

__all__ = ["ExportError", "module_source", "package_sources", "needs_export", "row_module_source"]

#: The Reference fields that are functions, in the order they are written.
_REFERENCE_FUNCTIONS = ("make_inputs", "oracle", "call", "edge_cases", "magnitude")
_LITERALS = (int, float, complex, str, bytes, bool, type(None))


class ExportError(RegistryError):
    """A declaration that cannot be written out as source; the message says which function and why."""


def needs_export(op: str) -> bool:
    """Whether ``op``'s live declaration is not the library's own (a notebook declared or replaced it)."""
    return not _spec.is_library_decl(op)


@dataclass
class _Module:
    """The module being written: imports, constants and functions by the name they are bound to."""

    op: str
    local_imports: bool = False  # may import modules that are not installed (a child shares our cwd)
    imports: dict[str, str] = field(default_factory=dict)  # bound name -> import statement
    constants: dict[str, str] = field(default_factory=dict)  # bound name -> literal
    functions: dict[str, str] = field(default_factory=dict)  # bound name -> source, in dependency order
    #: bound name -> expression of an object that writes itself out (``__rapid_llm_export__``), after the functions
    objects: dict[str, str] = field(default_factory=dict)
    taken: dict[str, Any] = field(default_factory=dict)  # bound name -> the object it stands for

    def bind(self, name: str, obj: Any, why: str) -> None:
        if name in self.taken and self.taken[name] is not obj and self.taken[name] != obj:
            raise ExportError(f"op {self.op!r}: the name {name!r} stands for two different objects ({why}); "
                              "rename one of them in the notebook")
        self.taken[name] = obj

    def reference(self, obj: Any, name: str | None, why: str) -> str:
        """The name ``obj`` is written under in the module, adding what defines it."""
        if isinstance(obj, types.ModuleType):
            if not (self.local_imports or _installed(obj.__name__)):
                raise ExportError(f"op {self.op!r}: {why} uses the module {obj.__name__}, which is not an installed "
                                  "package, so the shipped op could not import it: move what it needs into the "
                                  "notebook, or install the module")
            bound = name or obj.__name__.rsplit(".", 1)[-1]
            self.bind(bound, obj, why)
            self.imports[bound] = (f"import {obj.__name__}" if bound == obj.__name__
                                   else f"import {obj.__name__} as {bound}")
            return bound
        home = _importable_home(obj)
        if home is not None:
            module, qualname = home
            bound = name or qualname
            self.bind(bound, obj, why)
            self.imports[bound] = (f"from {module} import {qualname}" if bound == qualname
                                   else f"from {module} import {qualname} as {bound}")
            return bound
        if isinstance(obj, types.FunctionType):
            return self.function(obj, why)
        kernel = _kernel_function(obj)
        if kernel is not None:  # its source carries its decorator, which makes the kernel again
            return self.function(kernel, why)
        constant = _constexpr_literal(obj)
        if constant is not None and name is not None:  # a kernel's global: Triton takes only constexpr ones
            self.bind(name, obj, why)
            self.constants[name] = f"{self.reference(importlib.import_module('triton.language'), 'tl', why)}" \
                                   f".constexpr({constant})"
            return name
        export = getattr(obj, "__rapid_llm_export__", None)
        if export is not None and name is not None:  # an object that says how it is made (a cute_launcher)
            self.bind(name, obj, why)
            self.objects[name] = ""  # reserved while what it uses is written
            self.objects[name] = export(self, name)
            return name
        literal = _literal(obj)
        if literal is not None and name is not None:
            self.bind(name, obj, why)
            if literal.startswith("torch."):
                self.reference(importlib.import_module("torch"), "torch", why)
            self.constants[name] = literal
            return name
        home = getattr(obj, "__module__", "__main__")
        kind = (("a class defined in the notebook" if home == "__main__" else f"a class of the local module {home}")
                if isinstance(obj, type) else f"a {type(obj).__name__}")
        raise ExportError(f"op {self.op!r}: {why} uses {name or obj!r}, {kind}, which cannot be written out as "
                          "source: make it a plain constant or a function, or move it into an importable module")

    def function(self, fn: types.FunctionType, why: str, source: str | None = None) -> str:
        """Write ``fn`` out by its source (``source``, where its own cannot be read as written: a CuTe DSL kernel
        once compiled has lost its decorator line to inspect), with what it uses; its name in the module."""
        name = fn.__name__
        if name in self.functions and self.taken.get(name) is fn:
            return name
        where = f"{why} ({name})" if why != name else name
        if name == "<lambda>":
            raise ExportError(f"op {self.op!r}: {why} is a lambda, which cannot be shipped: define it with def")
        if fn.__closure__:
            free = ", ".join(fn.__code__.co_freevars)
            raise ExportError(f"op {self.op!r}: {where} is a closure over {free}: define it at the top level of a "
                              "cell, taking what it needs as arguments or globals")
        if fn.__qualname__ != name:
            raise ExportError(f"op {self.op!r}: {where} is defined inside {fn.__qualname__.rsplit('.', 1)[0]}: "
                              "define it at the top level of a cell")
        try:
            source = textwrap.dedent(source if source is not None else inspect.getsource(fn))
        except (OSError, TypeError):
            raise ExportError(f"op {self.op!r}: the source of {where} cannot be found (defined with exec?)") from None
        self.bind(name, fn, why)
        self.functions[name] = ""  # reserved: a recursive function refers to itself
        for used in _global_names(fn, source):
            if used in fn.__globals__:
                value = fn.__globals__[used]
                if value is fn:
                    continue
                self.reference(value, used, name)
            elif not _is_builtin(used):
                raise ExportError(f"op {self.op!r}: {name} uses the name {used!r}, which is not defined in the "
                                  "notebook")
        del self.functions[name]
        self.functions[name] = source.rstrip() + "\n"  # after what it uses: decorators and defaults run at def
        return name


def _kernel_function(obj: Any) -> types.FunctionType | None:
    """The function a ``@triton.jit`` / ``@gluon.jit`` kernel was made from (Triton keeps it as ``.fn``)."""
    fn = getattr(obj, "fn", None)
    return fn if isinstance(fn, types.FunctionType) and hasattr(obj, "device_caches") else None


def _constexpr_literal(obj: Any) -> str | None:
    """Python source for the value of a Triton ``constexpr`` that holds a plain constant, else None."""
    cls = type(obj)
    if cls.__name__ != "constexpr" or not cls.__module__.startswith("triton."):
        return None
    return _literal(getattr(obj, "value", None))


def _is_builtin(name: str) -> bool:
    import builtins

    return hasattr(builtins, name)


@functools.cache
def _distributions() -> frozenset[str]:
    return frozenset(importlib.metadata.packages_distributions())


def _installed(module: str) -> bool:
    """Whether ``module`` comes with Python or an installed distribution (what a shipped op may import)."""
    top = module.split(".", 1)[0]
    return (top == "rapid_llm" or top in sys.stdlib_module_names or top in sys.builtin_module_names
            or top in _distributions()  # rapid_llm itself may run from a checkout on PYTHONPATH
            or _inside_a_distribution(top))


def _inside_a_distribution(top: str) -> bool:
    """A package that a distribution installs inside its own folder and puts on ``sys.path`` from there (the CuTe
    DSL's ``cutlass``, in ``nvidia_cutlass_dsl/dsl_packages/``): installed too, where it was imported."""
    file = getattr(sys.modules.get(top), "__file__", None)
    return file is not None and any(part in _distributions() for part in Path(file).parts[:-1])


def _importable_home(obj: Any) -> tuple[str, str] | None:
    """``(module, qualname)`` when ``from module import qualname`` gives back ``obj`` itself and the module is
    installed; a function of a local module (a script beside the notebook, the tests) is copied instead."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" or "." in qualname \
            or "<" in qualname or not _installed(module):
        return None
    try:
        found = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        return None
    return (module, qualname) if found is obj else None


def _literal(value: Any) -> str | None:
    """Python source for a plain constant, or None."""
    try:
        import torch

        if isinstance(value, torch.dtype):
            return str(value)  # "torch.float32"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"float({str(value)!r})"
    if isinstance(value, _LITERALS):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset, set, dict)):
        text = repr(value)
        try:
            if ast.literal_eval(text) == value:
                return text
        except (ValueError, SyntaxError):
            return None
    return None


def _global_names(fn: types.FunctionType, source: str) -> list[str]:
    """Globals the function's body loads, plus names its decorators and defaults use (they run at def)."""
    names: list[str] = []

    def walk(code: types.CodeType) -> None:
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval not in names:
                names.append(ins.argval)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    walk(fn.__code__)
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        outer = [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        for expr in outer:
            for sub in ast.walk(expr):
                if isinstance(sub, ast.Name) and sub.id not in names:
                    names.append(sub.id)
    return names


def _callable_arg(mod: _Module, fn: Callable[..., Any] | None, what: str) -> str | None:
    if fn is None:
        return None
    if isinstance(fn, str):  # a "module:attr" reference
        module, attr = fn.split(":")
        return mod.reference(_spec.resolve_ref(fn), attr, what)
    return mod.reference(fn, None, what)


def _declaration_call(op: str, verb: str, floor: str, ref_args: list[str], bench: str | None,
                      forms: list[tuple[str, str]], form_of: str | None, replace: bool) -> list[str]:
    decl, native = _spec.get_decl(op), _spec.native_row(op)
    call = [f"    {op!r},", f"    doc={decl.doc!r},", f"    native={floor},",
            f"    dtypes={tuple(native.dtypes)!r},", f"    devices={tuple(native.devices)!r},",
            "    reference=Reference(" + ", ".join(ref_args) + "),", f"    bench={bench},",
            f"    dispatch_arg={decl.dispatch_arg!r},", f"    token_numel={decl.token_numel!r},",
            *([f"    schema={decl.schema!r},"] if getattr(decl, "schema", None) else [])]
    if forms:
        call += ["    forms={" + ", ".join(f"{label!r}: {make}" for label, make in forms) + "},",
                 f"    form_of={form_of},"]
    # a child process declares a shadow of a library op as the notebook did (declare_op's shadow_library)
    again = (["    shadow_library=True,"] if _spec.library_declares(op) else ["    replace=True,"]) if replace else []
    return [f"DECLARATION = {verb}(" if verb == "define_op" else f"{verb}(", *call, *again, ")", ""]


def _parts(op: str, mod: _Module, what: str, docstring: str | None = None) -> list[str]:
    """A module's text before its declaration: the docstring, imports, constants and functions it needs."""
    decl = _spec.get_decl(op)
    if docstring is None:
        docstring = (f"Op {op!r}: {what or decl.doc or 'declared in a notebook'}.\n\nWritten from the notebook "
                     "that declared it (rapid_llm.kernels.registry.opsource); an ordinary module from here on: edit "
                     "it freely.")
    parts = [f'"""{docstring}"""', "from __future__ import annotations", "",
             *sorted(set(mod.imports.values()), key=lambda s: (not s.startswith("import "), s)), ""]
    parts += [f"{name} = {text}" for name, text in mod.constants.items()]
    for text in mod.functions.values():
        parts += ["", "", text.rstrip()]
    if mod.objects:  # made from the functions above
        parts += ["", "", *(f"{name} = {text}" for name, text in mod.objects.items())]
    return parts


def _checked(text: str, where: str) -> str:
    compile(text, where, "exec")  # what is written must at least parse
    return text


def _reference_args(op: str, mod: _Module) -> tuple[list[str], str | None, list[tuple[str, str]], str | None]:
    decl = _spec.get_decl(op)
    ref = decl.reference
    ref_args = [f"{f}={_callable_arg(mod, getattr(ref, f), f'the reference {f}')}"
                for f in _REFERENCE_FUNCTIONS if getattr(ref, f) is not None]
    ref_args += [f"ulps={ref.ulps!r}", f"baseline_factor={ref.baseline_factor!r}"]
    bench = _callable_arg(mod, decl.bench, "the bench case")
    forms = [(label, _callable_arg(mod, make, f"the bench case of form {label!r}"))
             for label, make in (decl.forms or {}).items()]
    form_of = _callable_arg(mod, decl.form_of, "the form function") if decl.forms else None
    return ref_args, bench, forms, form_of


def _native_of(op: str):  # noqa: ANN202 - a KernelSpec
    native = _spec.native_row(op)
    if native is None:
        raise ExportError(f"op {op!r} has no native row: declare it with declare_op({op!r}, native=...)")
    return native


def module_source(op: str, *, ship: bool, local_imports: bool = False) -> str:
    """The text of one module that declares ``op`` as the live registry has it (its native floor, reference and
    bench case). ``ship``: it defines ``DECLARATION`` (``define_op``); else it declares the op when imported
    (``declare_op(..., replace=True)``, ``shadow_library=True`` for a library op: what a child
    process runs). ``local_imports`` lets it import modules that
    are not installed (a child process started here can)."""
    native = _native_of(op)
    mod = _Module(op, local_imports)
    verb = "define_op" if ship else "declare_op"
    for name in (verb, "Reference"):
        mod.reference(getattr(importlib.import_module("rapid_llm.kernels.registry.opdecl"), name), name, "the declaration")
    floor = _callable_arg(mod, native.target, "the native floor")
    ref_args, bench, forms, form_of = _reference_args(op, mod)
    text = "\n".join([*_parts(op, mod, ""), "", "",
                      *_declaration_call(op, verb, floor, ref_args, bench, forms, form_of, replace=not ship)])
    return _checked(text, f"<declaration of {op}>")


def row_module_source(op: str, launcher: Callable[..., Any], docstring: str) -> str:
    """The text of a module holding a notebook row's ``launcher`` (a function of the notebook) with the kernels,
    functions, imports and constants it uses, as :func:`module_source` writes a declaration's."""
    if not isinstance(launcher, types.FunctionType):
        raise ExportError(f"op {op!r}: a row's target must be a launcher function defined with def, got "
                          f"{type(launcher).__name__}")
    mod = _Module(op)
    mod.function(launcher, "the row's launcher")
    return _checked("\n".join([*_parts(op, mod, "", docstring), ""]), f"<row module of {op}>")


def package_sources(op: str, package: str) -> dict[str, str]:
    """An op folder's modules for ``op`` as the live registry has it, by file name: ``native.py`` (the floor and
    what it uses), ``reference.py`` (the oracle's functions and the bench case, and what they use) and
    ``__init__.py`` (``DECLARATION``, importing both): the shape of every op folder. ``package`` is the folder's
    module name (``rapid_llm.kernels.ops.<group>.<op>``)."""
    native = _native_of(op)
    floor_mod, ref_mod = _Module(op), _Module(op)
    floor = _callable_arg(floor_mod, native.target, "the native floor")
    ref_args, bench, forms, form_of = _reference_args(op, ref_mod)
    used = [arg.split("=", 1)[1] for arg in ref_args if not arg.startswith(("ulps=", "baseline_factor="))]
    ref_names = [n for n in (*used, bench, *(make for _, make in forms), form_of) if n is not None]
    head = [f'"""Op {op!r}: {_spec.get_decl(op).doc or "declared in a notebook"}.\n\nWritten by promote() from the notebook '
            'that declared it; native.py holds the floor, reference.py the oracle and bench case. Edit freely."""',
            "from __future__ import annotations", "",
            "from rapid_llm.kernels.registry.opdecl import Reference, define_op",
            f"from {package}.native import {floor}",
            *([f"from {package}.reference import {', '.join(sorted(set(ref_names)))}"] if ref_names else []), "", ""]
    files = {
        "native.py": "\n".join([*_parts(op, floor_mod, "the native floor"), ""]),
        "reference.py": "\n".join([*_parts(op, ref_mod, "the oracle's functions and the bench case"), ""]),
        "__init__.py": "\n".join([*head, "#: The op, read by the registry (rapid_llm.kernels.registry.spec).",
                                  *_declaration_call(op, "define_op", floor, ref_args, bench, forms, form_of,
                                                     replace=False)]),
    }
    return {name: _checked(text, f"<{package}.{name}>") for name, text in files.items()}
