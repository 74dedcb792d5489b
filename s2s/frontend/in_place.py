"""In-place updates: `x[i] = v`, `x[i] += v`, `x += v` and `del` of entries.

s2s arrays are values, so an update rebinds the name (or container entry) holding the
array to an updated copy. That means what NumPy's in-place write means as long as nothing
else refers to the old array: when something does (another name, a view), the update is
refused rather than silently meaning something else. Branches and loops pass updated
arrays on like assigned names (`updated_arrays`); Python containers changed in place
cannot be, which the control-flow code checks with `mutates_containers`.
"""
from __future__ import annotations

import warnings
from typing import Any, Protocol

import ast
import numpy as np

from s2s.errors import StagingError, UnsupportedSyntaxError
from s2s.frontend.expressions import BINARY_OPERATORS
from s2s.frontend.source import FunctionSource, walk_scope
from s2s.frontend.staged_once import check_store
from s2s.numpy_api.indexing import setitem
from s2s.primitives.structural import NUMPY_VIEWS
from s2s.staging import CopiedTracer, Tracer


class InPlaceUpdatesNeeds(Protocol):
    """What InPlaceUpdates calls on the walker's core (the rule is in FunctionWalker's
    docstring)."""

    scope: Any                  # the activation (walker.Scope): which names hold an updated array
    source: FunctionSource      # locates errors and the warning on an argument updated in place
    arguments: set[int]         # ids of the staged arguments, whose update in place is warned of

    def assign(self, target: ast.expr, value: Any) -> None:
        """Rebinds what held an updated array (`x`, `d["k"]`, `obj.a`) to the updated copy."""

    def assign_name(self, name: str, value: Any) -> None:
        """Rebinds `x` of `x += v` to its new value (naming its variable, as any binding)."""


class InPlaceUpdates:
    """The walker's in-place updates (a mixin of FunctionWalker, needing
    `InPlaceUpdatesNeeds` of it): augmented assignment and stores into staged arrays, for
    the core's `assign` and `stmt_Delete`."""

    def stmt_AugAssign(self, node):
        target = node.target
        python_op, numpy_fn = BINARY_OPERATORS[type(node.op)]
        if isinstance(target, ast.Name):
            current = self.scope.lookup(target.id, target)
            new = self.operate(python_op, numpy_fn, current, self.expr(node.value), node)
            if isinstance(current, Tracer):
                new = self._in_place_result(target.id, current, new)
            self.assign_name(target.id, new)
            return
        if isinstance(target, ast.Subscript):
            obj = self.expr(target.value)
            index = self.expr(target.slice)
            updated = self.operate(python_op, numpy_fn, obj[index], self.expr(node.value), node)
            if isinstance(obj, Tracer):
                self._store(target, obj, index, updated)
                return
            self._reject_array_store(obj, target)
            check_store(obj, f"`{ast.unparse(node)}`")
            obj[index] = updated
            return
        if isinstance(target, ast.Attribute):
            obj = self.expr(target.value)
            check_store(obj, f"`{ast.unparse(node)}`")
            setattr(obj, target.attr, self.operate(python_op, numpy_fn, getattr(obj, target.attr),
                                                   self.expr(node.value), node))
            return
        raise UnsupportedSyntaxError("this augmented assignment target is not supported")

    def _in_place_result(self, name: str, current: Tracer, new):
        """`x += v` on an array: NumPy updates x in place, keeping its dtype.

        s2s rebinds `x` to a new value, which means the same as long as no other name
        refers to the old array; if one does, NumPy would change it too, so we refuse.
        """
        others = [n for n in self.scope.bound_names_of(current) if n != name]
        if others:
            raise UnsupportedSyntaxError(
                f"`{name}` is updated in place but the same array is also bound to "
                f"`{others[0]}`; NumPy would change `{others[0]}` too",
                f"write `{name} = {name} + ...` (a new array) or copy first: "
                f"`{others[0]} = {others[0]}.copy()`")
        if isinstance(new, Tracer) and new.dtype != current.dtype:
            if not np.can_cast(new.dtype, current.dtype, casting="same_kind"):
                raise StagingError(
                    f"in-place update cannot store {new.dtype} results into the "
                    f"{current.dtype} array `{name}` (NumPy raises UFuncTypeError here)",
                    f"write `{name} = {name} + ...` to get a new {new.dtype} array")
            new = new.astype(current.dtype)
        return new

    def _reject_array_store(self, obj, target):
        if isinstance(obj, np.ndarray):
            raise UnsupportedSyntaxError(
                "this updates an array defined outside the function in place; the staged "
                "function cannot change it",
                "copy it into the function first (`t = TABLE.copy()`) and update the copy, "
                "or pass it in as an argument")

    def _store(self, target, obj: Tracer, index, value):
        """`obj[index] = value` on a staged array: the name (or container entry) holding
        `obj` is rebound to an updated copy, which means what NumPy's in-place write means
        unless something else still refers to the old array: that is refused."""
        holder = target.value
        shown = ast.unparse(holder)
        others = [n for n in self.scope.bound_names_of(obj)
                  if not (isinstance(holder, ast.Name) and n == holder.id)]
        if others:
            raise UnsupportedSyntaxError(
                f"`{shown}` is updated in place but the same array is also bound to `{others[0]}`; "
                f"NumPy would change `{others[0]}` too", f"copy first: `{shown} = {others[0]}.copy()`")
        base = _view_base(obj)
        viewed = [n for n, v in self.scope.vars.items() if isinstance(v, Tracer) and v.variable is base]
        if viewed:
            raise UnsupportedSyntaxError(
                f"`{shown}` is a view of `{viewed[0]}` (a slice, reshape or transpose of it): "
                f"NumPy's in-place write would change `{viewed[0]}` too",
                f"update `{viewed[0]}` directly, or copy the view first (`.copy()`)")
        if id(obj) in self.arguments:
            _warn_argument_not_written_back(self.source, target, shown)
        self.assign(holder, setitem(obj, index, value))


def _view_base(value: Tracer):
    """The variable `value` is a NumPy view of (it came from a slice, reshape, transpose
    ... of it), or None; a copy of a view is no view."""
    if isinstance(value, CopiedTracer):
        return None
    eqn = value.builder.producer(value.variable)
    return eqn.invars[0] if eqn is not None and eqn.primitive in NUMPY_VIEWS else None


_warned_arguments: set = set()


def _warn_argument_not_written_back(source, target, shown: str) -> None:
    """Once per place: an argument updated in place changes only the function's copy."""
    info = source.info(target)
    key = (info.file, info.line, info.col)
    if key in _warned_arguments:
        return
    _warned_arguments.add(key)
    warnings.warn_explicit(
        f"`{shown}[...] = ...` updates an argument of {source.name} in place: s2s changes the "
        "function's copy only, the caller's array is not written back (NumPy would change it)",
        UserWarning, info.file, info.line)


MUTATING_METHODS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                     "add", "discard", "popitem", "sort", "reverse"}


def mutates_containers(statements, variables: dict) -> bool:
    """Whether statements change Python objects in place (`out.append(h)`, `d[k] = v`,
    `obj.attr = v`): a staged body would leak its values into them, so such loops unroll.
    `x[i] = v` on a staged array is not one: it rebinds `x` (see `updated_arrays`)."""
    for node in walk_statements(statements):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATING_METHODS:
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if not (isinstance(node.value, ast.Name) and isinstance(variables.get(node.value.id), Tracer)):
                return True
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
    return False


def changes_existing_objects(statements, variables: dict) -> bool:
    """Whether statements change, in place, Python objects bound to names in `variables`
    (made before them), or attributes; not counting nested functions, nor objects made
    by the statements themselves."""
    for node in walk_scope(statements):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATING_METHODS and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in variables:
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and isinstance(node.value, ast.Name) and node.value.id in variables \
                and not isinstance(variables[node.value.id], Tracer):
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
    return False


def updated_arrays(statements, variables: dict) -> list[str]:
    """Names of staged arrays the statements update in place (`h[t + 1] = ...`): each is
    rebound to its updated copy, so a branch or loop passes it on."""
    names = []
    for node in walk_statements(statements):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and isinstance(variables.get(node.value.id), Tracer) \
                and node.value.id not in names:
            names.append(node.value.id)
    return names


def walk_statements(statements):
    """Every node of the statements, nested functions included."""
    for statement in statements:
        yield from ast.walk(statement)
