"""Declaring what to emit: `@s2s.export(...)`, for `s2s emit`, `s2s check` (and compile).

    @s2s.export("{'W': f32[784,10], 'b': f32[10]}, f32[128,784], f32[128,10]",
                transforms=("primal", "grad", "jvp", "vjp"))
    def loss(params, x, y):
        ...

The decorator records the argument types and the transforms wanted on the function and
returns it unchanged, so the module stays plain NumPy. `s2s emit mod.py --out DIR` writes
one file per (function, transform) — `loss.py`, `grad_loss.py`, `jvp_loss.py`,
`vjp_loss.py`, `per_example_grad_loss.py` (the gradient of each example's loss, vmapped
over the leading axis of the data arguments) — and `s2s check mod.py --against DIR` regenerates them in memory and fails
with a unified diff when a committed file is stale or missing, when a generated file of
this module is no longer produced by any export (an orphan, say after a rename), or when
the module exports nothing. `write_npz` writes the
sidecar files of constants, for `s2s emit` and `s2s compile` alike.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import keyword
import linecache
import sys
import unicodedata
import zipfile
from typing import Any, Callable, Sequence

import numpy as np

from s2s import autodiff, vmapped
from s2s.eager import emitted_module
from s2s.transformed import TransformedFunction, staged_or_error
from s2s.emit.python import EmitOptions, EmittedModule
from s2s.emit.signature import TANGENT_PARAMETER
from s2s.errors import StagingError, api_boundary
from s2s.frontend import stage
from s2s.frontend.args import ShapeDtype, aval_of_arg, is_staged_leaf, normalize_argnums, parse_arg_specs
from s2s.pmap import Pmapped
from s2s.source_info import SourceInfo
from s2s.tree import tree_map

TRANSFORMS = ("primal", "grad", "value_and_grad", "jvp", "vjp", "per_example_grad")


@dataclasses.dataclass
class Export:
    fn: object
    args: tuple
    transforms: tuple[str, ...]
    name: str
    argnums: int | tuple[int, ...]
    where: SourceInfo | None = None   # the decorator's line, for errors about the declaration

    def targets(self):
        """(file stem, function to emit) for each transform, in a fixed order."""
        for transform in self.transforms:
            if transform == "primal":
                yield self.name, self.fn
            elif transform == "per_example_grad":
                yield f"{transform}_{self.name}", self.per_example_grad()
            elif transform in ("grad", "value_and_grad"):
                maker = autodiff.grad if transform == "grad" else autodiff.value_and_grad
                yield f"{transform}_{self.name}", maker(self.fn, argnums=self.argnums)
            else:
                maker = jvp_function if transform == "jvp" else vjp_function
                yield f"{transform}_{self.name}", maker(self.fn)

    def per_example_grad(self):
        """`vmap(grad(fn))` over the leading axis of the data: the arguments grad does not
        differentiate, where they are arrays with an axis (a static int, a scalar such as a
        temperature, and the differentiated parameters are shared by every example). The emitted file is the gradient of every example's
        loss at once, for review like any other derivative."""
        argnums = set(normalize_argnums(self.argnums, len(self.args)))
        in_axes = tuple(None if i in argnums else tree_map(_data_axis, arg) for i, arg in enumerate(self.args))
        return vmapped.vmap(autodiff.grad(self.fn, argnums=self.argnums), in_axes=in_axes)

    def check_transform(self, transform: str) -> None:
        """Refuses, at the decorator's line, a gradient of a function whose output is not one
        scalar: the default transforms include grad, which a function returning an array
        (a layer, a prediction) cannot have."""
        if transform not in ("grad", "value_and_grad"):
            return
        out_avals = stage(self.fn, self.args).closed.out_avals
        if len(out_avals) != 1 or out_avals[0].size != 1:
            returned = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in out_avals)
            raise StagingError(
                f"{self.fn.__qualname__} is exported with the transform {transform!r}, but it returns {returned}: "
                "a gradient needs one scalar output",
                "export only the function itself: @s2s.export(..., transforms=(\"primal\",)) (the default "
                "transforms are (\"primal\", \"grad\")); or return a scalar loss", self.where)

    def example_args(self, transform: str) -> tuple:
        """The emit-time arguments: jvp takes tangents too, vjp the output cotangent."""
        if transform == "jvp":
            return self.args + self.args
        if transform == "vjp":
            staged = stage(self.fn, self.args)
            cotangent = staged.out_tree.unflatten(
                [ShapeDtype(a.shape, a.dtype) for a in staged.closed.out_avals])
            return self.args + (cotangent,)
        return self.args


def _data_axis(leaf):
    """A data leaf's batch axis for per_example_grad: the leading one, if it has one."""
    return 0 if is_staged_leaf(leaf) and aval_of_arg(leaf).ndim > 0 else None


NAME_HELP = ("use a Python identifier such as `loss_v2` (letters, digits and underscores, "
             "not starting with a digit, not a keyword): it names the emitted function and "
             "its files, which are always written inside the output folder")


def is_valid_name(name) -> bool:
    """Whether `name` may name an emitted function and the files written for it: a Python
    identifier as Python itself would spell it (NFKC-stable, so no look-alike letters), not
    a keyword. Such a name has no path separator, no `..` and is never empty or absolute."""
    return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and unicodedata.normalize("NFKC", name) == name)


def _caller_location(depth: int, keyword: str) -> SourceInfo:
    """Where the user called us from (`depth` frames up), for an error with a caret: at
    `keyword` where the line has it, else at the line's first character."""
    frame = sys._getframe(depth + 1)
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    column = text.find(keyword) + 1 or len(text) - len(text.lstrip()) + 1
    return SourceInfo(frame.f_code.co_filename, frame.f_lineno, column, frame.f_code.co_name)


def _refuse_name(name, where: SourceInfo) -> None:
    raise StagingError(f"the export name {name!r} is not a Python identifier", NAME_HELP, where)


DEFAULT_TRANSFORMS = ("primal", "grad")


@api_boundary
def export(*args: Any, transforms: str | Sequence[str] = DEFAULT_TRANSFORMS, name: str | None = None,
           argnums: int | Sequence[int] = 0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares a function for `s2s emit`, `s2s check` and `s2s compile`. `args`: one spec
    string ('f32[128,784], f32[784]') or example arguments (ShapeDtypes, arrays, static
    values: Python ints stay static, as everywhere). `transforms`: a tuple of the names in
    `TRANSFORMS`, by default ("primal", "grad"): the function itself and its gradient,
    which needs one scalar output (a function returning an array exports
    transforms=("primal",)). `argnums` is what grad differentiates. `name` (default: the
    function's) must be a Python identifier: it names files."""
    where = _caller_location(2, "transforms=")   # past the boundary's frame
    if name is not None and not is_valid_name(name):
        _refuse_name(name, _caller_location(2, "name="))
    if len(args) == 1 and isinstance(args[0], str):
        args = tuple(parse_arg_specs(args[0]))
    if isinstance(transforms, str):
        raise StagingError(f"transforms={transforms!r} is a string, and s2s.export takes a tuple of transform names",
                           f"write transforms=({transforms!r},): a tuple of one name needs its comma", where)
    unknown = [t for t in transforms if t not in TRANSFORMS]
    if unknown:
        raise StagingError(f"unknown transforms {unknown}",
                           f"choose from {', '.join(map(repr, TRANSFORMS))}", where)

    @api_boundary
    def declare(fn):
        if name is None and not is_valid_name(fn.__name__):
            _refuse_name(fn.__name__, _caller_location(2, "name="))
        record = Export(fn, tuple(args), tuple(transforms), name or fn.__name__, argnums, where)
        exports = fn.__dict__.setdefault("__s2s_exports__", [])
        exports.append(record)
        return fn
    return declare


def emit_exports(module, source_comments: bool = True,
                 records: list[Export] | None = None) -> dict[str, EmittedModule]:
    """File name -> emitted module, for every (function, transform) `module` exports, or
    for `records` alone (of the module's exports: `s2s check mod.py:loss`). A module that
    exports nothing is an error: checking it would pass having checked nothing."""
    if records is None:
        records = exports_of(module)
    if not records:
        raise StagingError(f"{module.__file__} declares no @s2s.export, so there is nothing to emit or check",
                           "decorate the functions whose derivatives you review with "
                           "@s2s.export('<argument types>', transforms=(...)), or pass the module "
                           "that declares them")
    files = {}
    for record in records:
        for transform, (stem, target) in zip(record.transforms, record.targets()):
            record.check_transform(transform)
            if isinstance(target, Pmapped):   # written as its semantics on NumPy, as emit_python does
                target = target.reference()
            staged = staged_or_error(target, record.example_args(transform), {})
            options = EmitOptions(source_comments=source_comments, const_mode="sidecar",
                                  sidecar_name=f"{stem}.npz")
            files[f"{stem}.py"] = emitted_module(staged, stem, options)
    return files


def exports_of(module) -> list[Export]:
    """Every export declared by functions of `module`, in source order."""
    found = []
    for value in vars(module).values():
        for record in getattr(value, "__s2s_exports__", ()):
            if getattr(value, "__module__", None) == module.__name__:
                found.append(record)
    found.sort(key=lambda r: (inspect.getsourcelines(r.fn)[1], r.name))
    names = [stem for r in found for stem, _ in r.targets()]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise StagingError(f"two exports would write the same files: {duplicates}",
                           "give one of them a different name=... in @s2s.export")
    return found


class _DerivedWithSignature(TransformedFunction):
    """jvp/vjp of `fn` as one function with an explicit signature, for emission.

    `call(args, defaults)` gets the positional arguments and the values of `fn`'s
    parameters with defaults (keyword-only here, so they never shift the positions of
    the tangents or of `out_bar`)."""

    def __init__(self, fn, transform: str, parameters, call):
        super().__init__(fn, transform)
        self.__signature__ = inspect.Signature(parameters)
        self._call = call

    def __call__(self, *args, **kwargs):
        bound = self.__signature__.bind(*args, **kwargs)
        bound.apply_defaults()
        defaults = {name: bound.arguments.pop(name) for name, p in self.__signature__.parameters.items()
                    if p.kind is p.KEYWORD_ONLY}
        return self._call(tuple(bound.arguments.values()), defaults)


def _split_parameters(fn, transform: str):
    """`fn`'s parameters without defaults (the ones differentiated) and those with them
    (passed on as they are: a default is part of the function, and stays static)."""
    required, defaulted = [], []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise StagingError(
                f"{transform} export of {getattr(fn, '__qualname__', fn)!r}: its `{p}` parameter "
                "cannot be given tangents or cotangents by name",
                "give each value a named parameter in the function's def",
                SourceInfo(inspect.getsourcefile(fn) or "<unknown>", inspect.getsourcelines(fn)[1], 1,
                           getattr(fn, "__name__", "f")))
        if p.default is p.empty and p.kind is not p.KEYWORD_ONLY:
            required.append(inspect.Parameter(p.name, p.POSITIONAL_OR_KEYWORD))
        else:
            defaulted.append(p.replace(kind=p.KEYWORD_ONLY))
    return required, defaulted


def _with_defaults(fn, defaults: dict):
    """`fn` with its defaulted parameters bound by keyword (still defaults to its staging)."""
    return functools.partial(fn, **defaults) if defaults else fn


def jvp_function(fn):
    """`jvp_f(*primals, *tangents, **defaulted) -> (out, out_dot)`: tangents named
    `<arg>_dot`. The tangent of a static primal (an int) is a `TANGENT_PARAMETER`, which
    the emitted function leaves out: the primal appears once, checked."""
    required, defaulted = _split_parameters(fn, "jvp")
    tangents = [inspect.Parameter(f"{p.name}_dot", p.POSITIONAL_OR_KEYWORD, annotation=TANGENT_PARAMETER)
                for p in required]
    n = len(required)
    return _DerivedWithSignature(
        fn, "jvp", required + tangents + defaulted,
        lambda args, defaults: autodiff.jvp(_with_defaults(fn, defaults), args[:n], args[n:]))


def vjp_function(fn):
    """`vjp_f(*primals, out_bar, **defaulted) -> (out, (arg_bar, ...))`: the forward pass,
    then the backward pass for the given output cotangent."""
    required, defaulted = _split_parameters(fn, "vjp")

    def call(args, defaults):
        out, vjp_fn = autodiff.vjp(_with_defaults(fn, defaults), *args[:-1])
        return out, vjp_fn(args[-1])
    out_bar = inspect.Parameter("out_bar", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return _DerivedWithSignature(fn, "vjp", required + [out_bar] + defaulted, call)


def write_npz(path: str | io.BytesIO, arrays: dict[str, np.ndarray]) -> None:
    """An .npz whose bytes depend only on the arrays (fixed timestamps, sorted names), so
    that regenerated files are byte for byte the same; into a file, or a buffer for a
    writer that names the file by its content (`s2s compile`)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, buffer.getvalue())
