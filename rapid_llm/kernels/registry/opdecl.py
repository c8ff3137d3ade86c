"""An op's one declaration: its rows, its float64 reference, its benchmark case.

A group package lists each of its ops once, in its ``__init__.py``::

    DECLARATIONS = [
        define_op(
            "scale",
            rows=[KernelSpec(name="native/scale", ...), KernelSpec(name="triton/scale", ...)],
            reference=Reference(make_inputs=..., oracle=..., call=..., edge_cases=...),
            bench=scale_case,            # (numel, dtype, device) -> CaseArgs
        ),
    ]

The rows need not repeat ``op=`` or ``backend=``: the declaration and the
name's prefix say them. ``define_op`` only builds the declaration; the
registry reads ``DECLARATIONS`` when it discovers the groups.

``verify`` checks rows against the reference, ``bench_op`` times them on the
bench case, tests are parametrized over the registry, and the op is reachable
as ``rapid_llm.kernels.<name>``: nothing outside the group names the op. A
``.cu`` row of the op declares itself in its own file (see jit_row), and a
notebook declares a brand-new op with the same call, its native row given as
a plain function, with ``declare_op`` (``define_op`` and add it now).

A notebook that declares an op the library ships says so:
``declare_op(name, ..., shadow_library=True)`` hides the library's declaration
and rows behind its own, and ``restore_op(name)`` brings them back.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from rapid_llm.kernels.registry import spec as _spec
from rapid_llm.kernels.registry.spec import KernelSpec, RegistryError

__all__ = ["CaseArgs", "Reference", "OpDecl", "define_op", "declare_op", "restore_op", "get_decl"]


@dataclass
class CaseArgs:
    """Positional and keyword arguments for one timed call, and the work it does."""

    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)
    bytes_moved: int | None = None
    flops: int | None = None


@dataclass(frozen=True)
class Reference:
    """How to check an op: inputs, the exact answer, and how to call a row.

    ``make_inputs(shape, dtype, device, generator)`` returns positional args;
    ``oracle(*args)`` returns the exact result in float64; ``call(fn, *args)``
    returns the tensor to compare (default ``fn(*args)``; ops with ``out=``
    pass a NaN-filled buffer and return it); ``edge_cases(dtype, device,
    generator)`` returns ``[(label, args), ...]``. ``magnitude(*args)``
    (float64 args) gives, per output element, the scale its relative
    tolerance is taken against wherever the oracle sums terms that cancel, so
    ``|exact|`` is far below the rounding of its terms: the sum of the terms'
    magnitudes (a rotation ``|x cos| + |y sin|``, GELU-tanh ``|x/2| +
    |x/2 tanh(u)|``). The tolerance rule and its
    ``ulps`` / ``baseline_factor`` are described in rapid_llm.kernels.verification.comparison.
    ``compare`` replaces that rule for a result it cannot judge (quantised values
    and their scales, special values): see rapid_llm.kernels.verification.compare_modes.
    """

    make_inputs: Callable[..., tuple]
    oracle: Callable[..., Any]
    call: Callable[..., Any] | None = None
    edge_cases: Callable[..., list[tuple[str, tuple]]] | None = None
    ulps: float = 2.0
    baseline_factor: float = 2.0
    magnitude: Callable[..., Any] | None = None
    compare: Any = None

    def __post_init__(self) -> None:
        for name in ("make_inputs", "oracle", "call", "edge_cases", "magnitude"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise RegistryError(f"Reference.{name} must be callable, got {type(fn).__name__}")
        if self.compare is not None and not (callable(getattr(self.compare, "errors", None))
                                             and callable(getattr(self.compare, "summary", None))):
            raise RegistryError("Reference.compare must have errors() and summary() "
                                "(rapid_llm.kernels.verification.compare_modes)")
        if not self.ulps > 0 or not self.baseline_factor >= 1:
            raise RegistryError("Reference: need ulps > 0 and baseline_factor >= 1")


@dataclass(frozen=True)
class OpDecl:
    """What the registry knows about an op besides its rows."""

    name: str
    reference: Reference
    bench: Callable[[int, Any, Any], CaseArgs]
    doc: str = ""
    dispatch_arg: int = 0
    token_numel: int | None = None
    schema: str | None = None
    rows: tuple[KernelSpec, ...] = ()
    #: Other forms of the op whose best row may differ (fp8 quant per tensor vs per token): label -> bench case.
    forms: Mapping[str, Callable[[int, Any, Any], CaseArgs]] = field(default_factory=dict)
    #: A call's form: its label in ``forms``, or None for the form ``bench`` times (what dispatch ranks by).
    form_of: Callable[..., str | None] | None = None


#: Forms an op may declare besides its bench case's (the compiled dispatcher keys on 6 bits).
MAX_FORMS = 63


def define_op(name: str, *, reference: Reference, bench: Callable[[int, Any, Any], CaseArgs],
              rows: Sequence[KernelSpec] = (), native: Callable[..., Any] | None = None,
              dtypes: Sequence[str] = ("bf16", "fp16", "fp32"), devices: Sequence[str] = ("cpu", "cuda"),
              doc: str = "", dispatch_arg: int = 0, token_numel: int | None = None,
              schema: str | None = None, forms: Mapping[str, Callable[[int, Any, Any], CaseArgs]] | None = None,
              form_of: Callable[..., str | None] | None = None) -> OpDecl:
    """Op ``name``'s declaration: its rows, reference and bench case, checked; it registers nothing.

    ``dispatch_arg`` is the positional argument whose dtype, device, size and
    layout pick the row (rope's query, not its integer positions).
    ``token_numel`` is that argument's elements per token at the bench
    shapes: benchmarks of an LLM op are swept over tokens, and the bench case
    gets ``tokens * token_numel`` elements.

    ``native`` is a shortcut for a notebook: a plain-torch function that
    becomes the row ``native/<name>`` over ``dtypes`` (by default the
    project's bf16/fp16/fp32, as KernelSpec's) and ``devices``.

    The op becomes ``torch.ops.rapid_llm.<name>`` too (rapid_llm.kernels.dispatch.custom_ops),
    its schema derived from one native call on ``make_inputs``'s example, or
    ``schema`` (``"(Tensor x, float eps) -> Tensor"``) where that cannot run.

    ``forms`` and ``form_of`` are for an op whose calls come in forms with
    different best rows (fp8 quantisation per token, per tensor, per group):
    each form's bench case by label, and ``form_of(*args, **kwargs)``, the
    label of a call's form (None: the form ``bench`` times). Dispatch keys
    on the form and ranks by that form's figures; a form without figures
    ranks as the declared one. ``form_of`` runs on every call of the op,
    before any row's checks: keep it to a few attribute reads, and let it
    answer None rather than raise for a call it cannot read.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise RegistryError(f"declare_op: the op name must be an identifier, got {name!r}")
    if not isinstance(reference, Reference):
        raise RegistryError(f"declare_op({name!r}): reference must be a rapid_llm.kernels.Reference")
    if not callable(bench):
        raise RegistryError(f"declare_op({name!r}): bench must be callable (numel, dtype, device) -> CaseArgs")
    all_rows = list(rows)
    if native is not None:
        all_rows.append(KernelSpec(name=f"native/{name}", op=name, backend="native", target=native,
                                   dtypes=tuple(dtypes), devices=tuple(devices), priority=0,
                                   description=(native.__doc__ or "").strip().splitlines()[0] if native.__doc__ else ""))
    for i, row in enumerate(all_rows):
        if not isinstance(row, KernelSpec):
            raise RegistryError(f"declare_op({name!r}): rows must be KernelSpecs, got {type(row).__name__}")
        if row.op and row.op != name:
            raise RegistryError(f"declare_op({name!r}): row {row.name!r} belongs to op {row.op!r}")
        all_rows[i] = row if row.op else dataclasses.replace(row, op=name)
    if not isinstance(dispatch_arg, int) or dispatch_arg < 0:
        raise RegistryError(f"declare_op({name!r}): dispatch_arg must be a non-negative int, got {dispatch_arg!r}")
    if token_numel is not None and (not isinstance(token_numel, int) or token_numel < 1):
        raise RegistryError(f"declare_op({name!r}): token_numel must be a positive int, got {token_numel!r}")
    forms = dict(forms or {})
    if (form_of is None) != (not forms):
        raise RegistryError(f"declare_op({name!r}): give forms and form_of together")
    well_formed = all(isinstance(label, str) and label and callable(make) for label, make in forms.items())
    if not well_formed or (form_of is not None and not callable(form_of)) or len(forms) > MAX_FORMS:
        raise RegistryError(f"declare_op({name!r}): forms must map at most {MAX_FORMS} labels to bench cases "
                            "(numel, dtype, device) -> CaseArgs, and form_of must be callable")
    return OpDecl(name, reference, bench, doc, dispatch_arg, token_numel, schema, tuple(all_rows), forms, form_of)


def declare_op(name: str, *, reference: Reference, bench: Callable[[int, Any, Any], CaseArgs],
               rows: Sequence[KernelSpec] = (), native: Callable[..., Any] | None = None,
               dtypes: Sequence[str] = ("bf16", "fp16", "fp32"), devices: Sequence[str] = ("cpu", "cuda"),
               doc: str = "", replace: bool = False, dispatch_arg: int = 0,
               token_numel: int | None = None, schema: str | None = None,
               forms: Mapping[str, Callable[[int, Any, Any], CaseArgs]] | None = None,
               form_of: Callable[..., str | None] | None = None, shadow_library: bool = False) -> OpDecl:
    """Declare op ``name`` now (a notebook's op): :func:`define_op`, added to the live registry.

    ``replace=True`` lets a re-run notebook cell declare its own op again
    (rows registered for it since stay).

    ``shadow_library=True`` is required to declare an op the library ships,
    and refused for any other: the name then means your declaration in this
    process (``K.<name>``, ``torch.ops.rapid_llm.<name>``, ``verify``,
    ``bench_op``), and the library's declaration and rows are set aside whole
    until :func:`restore_op` (its rows were checked against the library's
    reference, not yours). Without the keyword a name collision is an error,
    not a silent swap under code that calls the library's op. A re-run of the
    cell replaces the shadow. The shadow keeps the library's ``dispatch_arg``;
    a different signature leaves ``torch.ops.rapid_llm.<name>`` unusable until
    the restore (torch keeps an op's first schema), and ``promote`` refuses its
    rows (see rapid_llm.kernels.toolchain.promote).
    """
    decl = define_op(name, reference=reference, bench=bench, rows=rows, native=native, dtypes=dtypes,
                     devices=devices, doc=doc, dispatch_arg=dispatch_arg, token_numel=token_numel, schema=schema,
                     forms=forms, form_of=form_of)
    _spec.add_op(decl, replace=replace, shadow_library=shadow_library)
    return decl


def restore_op(name: str) -> list[str]:
    """Undo ``declare_op(name, ..., shadow_library=True)``: the library's declaration and rows of ``name`` come
    back as they were, and ``K.<name>`` and ``torch.ops.rapid_llm.<name>`` serve them again.

    Rows registered while the shadow was live stay, golden-unverified (they were
    checked against the shadow's reference): the names returned. ``verify`` them
    again to let dispatch use them. A library op that is not shadowed is left as it is.
    """
    return _spec.restore(name)


def get_decl(op: str) -> OpDecl:
    return _spec.get_decl(op)
