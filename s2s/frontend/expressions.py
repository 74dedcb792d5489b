"""Expressions: what the walker computes from each expression node.

Python values that do not depend on the array arguments stay concrete and are computed
directly; every operation on an array (operators, comparisons, subscripts of array
constants) is staged as the NumPy function that implements it. Where Python itself needs
a concrete value from a staged one (`truth`), ConcretizationError points at the line.
"""
from __future__ import annotations

import ast
import operator
import types
from typing import Any, Protocol

import numpy as np

from s2s.errors import (CONCRETE_HELP, ConcretizationError, S2SError, StagingError, StagingTypeError,
                        StagingValueError, UnsupportedFunctionError, UnsupportedSyntaxError)
from s2s.frontend.guards import record_attribute, record_items, record_module_attribute
from s2s.frontend.source import FunctionSource
from s2s.frontend.staged_once import checked_iterable, made_in_body
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api.indexing import getitem
from s2s.numpy_api.shaping import index_concatenation
from s2s.staging import Tracer, current_builder

# Python operators on arrays, as the NumPy functions that implement them.
BINARY_OPERATORS = {
    ast.Add: (operator.add, np.add), ast.Sub: (operator.sub, np.subtract),
    ast.Mult: (operator.mul, np.multiply), ast.Div: (operator.truediv, np.true_divide),
    ast.FloorDiv: (operator.floordiv, np.floor_divide), ast.Mod: (operator.mod, np.remainder),
    ast.Pow: (operator.pow, np.power), ast.MatMult: (operator.matmul, np.matmul),
    ast.BitAnd: (operator.and_, np.bitwise_and), ast.BitOr: (operator.or_, np.bitwise_or),
    ast.BitXor: (operator.xor, np.bitwise_xor), ast.LShift: (operator.lshift, np.left_shift),
    ast.RShift: (operator.rshift, np.right_shift),
}
UNARY_OPERATORS = {
    ast.USub: (operator.neg, np.negative), ast.UAdd: (operator.pos, np.positive),
    ast.Invert: (operator.invert, np.invert),
}
COMPARISONS = {
    ast.Eq: (operator.eq, np.equal), ast.NotEq: (operator.ne, np.not_equal),
    ast.Lt: (operator.lt, np.less), ast.LtE: (operator.le, np.less_equal),
    ast.Gt: (operator.gt, np.greater), ast.GtE: (operator.ge, np.greater_equal),
    ast.Is: (operator.is_, None), ast.IsNot: (operator.is_not, None),
    ast.In: (lambda a, b: a in b, None), ast.NotIn: (lambda a, b: a not in b, None),
}


def is_array_constant(value) -> bool:
    """An array from outside the function (a global, a closure): staged where it is used."""
    return isinstance(value, np.ndarray) and value.ndim > 0


def static_part(constant: np.ndarray, index):
    """`constant[index]` read now, where `index` is basic indexing by static values only
    (ints, slices of ints, None, `...`) and the part is an array: the staging then captures
    that part alone, not all of `constant`. A minibatch `train_images[k * 256:(k + 1) * 256]`
    of a global training set captures 256 rows, where staging the subscript would bake the
    whole set into every staging (one per static `k`) and emit it again. Not folded (None):
    any staged or array index, a bool (a new axis, in NumPy), an index NumPy refuses (the
    staged subscript says what is wrong), and a single element (a 0-d result stages as the
    subscript always has). The part is a view: what reads it later sees what the global
    holds then, as reading the global itself would."""
    entries = index if type(index) is tuple else (index,)
    if type(constant) is not np.ndarray or not all(_static_basic_entry(e) for e in entries):
        return None   # (a subclass, np.matrix, indexes by rules of its own)
    try:
        part = constant[index]
    except IndexError:
        return None
    return part if is_array_constant(part) else None


def _static_basic_entry(entry) -> bool:
    if entry is None or entry is Ellipsis:
        return True
    if type(entry) is slice:
        return all(_static_int(b) for b in (entry.start, entry.stop, entry.step) if b is not None)
    return _static_int(entry)


def _static_int(value) -> bool:
    return type(value) is int or isinstance(value, np.integer)   # (a bool's type is not int)


def _unsupported(walker, node):
    raise UnsupportedSyntaxError(
        f"`{type(node).__name__}` expressions are not supported in staged functions",
        "rewrite the expression with supported syntax")


# Expression nodes `expr` does not locate: a name stages nothing (nor does a constant, which
# `expr` reads first); an attribute locates itself, unless it is a module's (`expr_Attribute`).
_NOT_LOCATED = frozenset((ast.Name, ast.Attribute))

# (walker class, node class) -> the walker's method for it (`expr_BinOp`, ...), found once.
_EXPR_METHODS: dict = {}


class ExpressionsNeeds(Protocol):
    """What Expressions, the lowest room, calls on the walker's core (the rule is in
    FunctionWalker's docstring)."""

    scope: Any                  # the activation (walker.Scope): names resolve in it
    source: FunctionSource      # locates equations and errors

    def assign(self, target: ast.expr, value: Any) -> None:
        """Binds a comprehension's targets and a walrus's: any target, a store into an
        array too, which the core hands to InPlaceUpdates, a room above this one."""

    def call(self, fn: Any, args: list, kwargs: dict) -> Any:
        """A call in the source: `call_user`, which stages a user function with a walker
        of its own, so it lives beside the walker."""

    def _make_function(self, node: ast.Lambda) -> Any:
        """A lambda, as a StagedFunction: calling it walks its body with a new walker."""


class Expressions:
    """The walker's expressions (a mixin of FunctionWalker, needing `ExpressionsNeeds` of
    it): `expr(node)` returns the node's value."""

    # The variables of the comprehensions whose step is running, outermost first: each a
    # (names, values) pair, the values its own (see `_comprehension_items`).
    comprehensions_running: tuple = ()

    def expr(self, node):
        # Equations staged while `node` is walked come from it; names and constants stage
        # nothing, so they are not located (they are half of the nodes staging walks). A
        # constant is its value, read here: nothing can fail.
        kind = type(node)
        if kind is ast.Constant:
            return node.value
        builder = current_builder() if kind not in _NOT_LOCATED else None
        if builder is not None:
            saved = builder.source_info
            builder.source_info = self.source.info(node)
        try:
            key = (type(self), kind)
            method = _EXPR_METHODS.get(key)
            if method is None:
                method = _EXPR_METHODS[key] = getattr(type(self), "expr_" + kind.__name__, _unsupported)
            return method(self, node)
        except S2SError as e:
            raise e.at(self.source.info(node))
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError) as e:
            # a TypeError or ValueError stays one (as it would be in JAX), with the location
            kind = StagingTypeError if isinstance(e, TypeError) else \
                StagingValueError if isinstance(e, ValueError) else StagingError
            error = kind(f"{type(e).__name__}: {e}",
                         "this Python error was raised while s2s ran the expression "
                         "above; fix the expression (or the values it was given)")
            error.original = e
            raise error.at(self.source.info(node)) from None
        finally:
            if builder is not None:
                builder.source_info = saved

    def expr_Name(self, node):
        value = self.scope.lookup(node.id, node)
        if is_array_constant(value):
            builder = current_builder()
            if builder is not None:
                builder.name_constant(value, node.id)
        return value

    def expr_Attribute(self, node):
        """`obj.attr`, located at `node` once `obj` is known (`x.T` stages a transpose).
        A module's attribute (`np.tanh`, one in most NumPy calls) is read with no location
        set: reading it stages nothing (it is guarded only on the user's own modules)."""
        obj = self.expr(node.value)
        if type(obj) is types.ModuleType:
            value = getattr(obj, node.attr)
            record_module_attribute(obj, node.attr, value)
            return value
        builder = current_builder()
        if builder is None:
            return self._attribute(obj, node.attr)
        with builder.at(self.source.info(node)):
            return self._attribute(obj, node.attr)

    @staticmethod
    def _attribute(obj, attr: str):
        if isinstance(obj, Tracer) and not hasattr(obj, attr):
            raise UnsupportedFunctionError(
                f"the ndarray attribute or method `.{attr}` is not supported on staged arrays",
                "see the README's table of supported NumPy functions and methods")
        value = getattr(obj, attr)
        record_attribute(obj, attr, value)
        return value

    def expr_Subscript(self, node):
        obj = self.expr(node.value)
        index = self.expr(node.slice)
        if (obj is np.r_ or obj is np.c_) and any(isinstance(i, Tracer)
                                                   for i in (index if isinstance(index, tuple) else (index,))):
            return index_concatenation(obj, index)
        if is_array_constant(obj) and current_builder() is not None:
            part = static_part(obj, index)
            if part is None:
                return getitem(obj, index)
            if isinstance(node.value, ast.Name):   # emitted code reads `TRAIN_part`, not a partial `TRAIN`
                current_builder().name_constant(part, f"{node.value.id}_part")
            return part
        item = obj[index]
        if type(index) is int or type(index) is str:
            record_items(obj, ((index, item),))
        return item

    def expr_Slice(self, node):
        part = lambda n: None if n is None else self.expr(n)
        return slice(part(node.lower), part(node.upper), part(node.step))

    def expr_Tuple(self, node):
        return tuple(self._elements(node.elts))

    def expr_List(self, node):
        return made_in_body(list(self._elements(node.elts)))

    def expr_Set(self, node):
        return made_in_body(set(self._elements(node.elts)))

    def _elements(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.expr(e.value))
            else:
                out.append(self.expr(e))
        return out

    def expr_Dict(self, node):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.expr(v))
            else:
                out[self.expr(k)] = self.expr(v)
        return made_in_body(out)

    def expr_JoinedStr(self, node):
        parts = []
        for v in node.values:
            parts.append(v.value if isinstance(v, ast.Constant) else self.expr(v))
        return "".join(str(p) for p in parts)

    def expr_FormattedValue(self, node):
        value = self.expr(node.value)
        if isinstance(value, Tracer):
            raise UnsupportedSyntaxError("formatting a staged array into a string is not supported",
                                         "format static values (shapes, Python numbers) only; to print "
                                         "an array when the function runs, pass it to print() as an "
                                         "argument of its own: print('loss', loss)")
        spec = "" if node.format_spec is None else self.expr(node.format_spec)
        conv = {-1: lambda v: v, 115: str, 114: repr, 97: ascii}[node.conversion]
        return format(conv(value), spec)

    def expr_BinOp(self, node):
        python_op, numpy_fn = BINARY_OPERATORS[type(node.op)]
        return self.operate(python_op, numpy_fn, self.expr(node.left), self.expr(node.right), node)

    def expr_UnaryOp(self, node):
        operand = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return not self.truth(operand, node.operand, "`not`")
        python_op, numpy_fn = UNARY_OPERATORS[type(node.op)]
        if self._stages(operand):
            return self._operator(numpy_fn)(operand)
        return python_op(operand)

    def expr_BoolOp(self, node):
        what = "`and`" if isinstance(node.op, ast.And) else "`or`"
        value = None
        for operand in node.values:
            value = self.expr(operand)
            truth = self.truth(value, operand, what, logical=True)
            if isinstance(node.op, ast.And) and not truth:
                return value
            if isinstance(node.op, ast.Or) and truth:
                return value
        return value

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            python_op, numpy_fn = COMPARISONS[type(op)]
            if numpy_fn is not None and (self._stages(left) or self._stages(right)):
                value = self._numpy(numpy_fn)(left, right)
            else:
                value = python_op(left, right)
            if len(node.ops) == 1:
                return value
            if not self.truth(value, node, "a chained comparison", logical=True):
                return value
            result, left = value, right
        return result

    def expr_IfExp(self, node):
        if self.truth(self.expr(node.test), node.test, "a conditional expression"):
            return self.expr(node.body)
        return self.expr(node.orelse)

    def expr_Lambda(self, node):
        return self._make_function(node)

    def expr_Starred(self, node):
        raise UnsupportedSyntaxError("a starred expression is only allowed in calls, lists and tuples")

    def expr_ListComp(self, node):
        return made_in_body(list(self._comprehension_items(node, lambda: self.expr(node.elt))))

    def expr_SetComp(self, node):
        return made_in_body(set(self._comprehension_items(node, lambda: self.expr(node.elt))))

    def expr_DictComp(self, node):
        items = self._comprehension_items(node, lambda: (self.expr(node.key), self.expr(node.value)))
        return made_in_body(dict(items))

    def _comprehension_items(self, node, element):
        """What `element()` gives at each innermost step of a comprehension, step by step
        as they are asked for (a generator expression's are asked for later, by the code
        using it: generators.py). The first iterable is evaluated now, in the enclosing
        scope, as Python does. The comprehension's variables are its own, as in Python 3:
        bound only while one of its steps runs, so the code between two steps of a lazy
        generator expression sees its own variables of the same names. A generator
        expression made in a step of another comprehension reads that one's variables
        as they are when its items are asked for, as a Python closure reads them: its
        steps bind those too."""
        first = iter(checked_iterable(self.expr(node.generators[0].iter)))
        names = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        layers = (*self.comprehensions_running, (names, {}))

        def bound(run):
            running = self.comprehensions_running
            enclosing = {name: self.scope.vars[name] for names, _ in layers for name in names
                         if name in self.scope.vars}
            for _, values in layers:
                self.scope.vars.update(values)
            self.comprehensions_running = layers
            try:
                return run()
            finally:
                self.comprehensions_running = running
                for k, (names, values) in enumerate(layers):   # each name to the innermost that has it
                    inner = set().union(*(n for n, _ in layers[k + 1:]))
                    values.update((name, self.scope.vars[name]) for name in names - inner
                                  if name in self.scope.vars)
                for names, _ in layers:
                    for name in names:
                        self.scope.vars.pop(name, None)
                self.scope.vars.update(enclosing)

        def steps(generators, iterator):
            generator = generators[0]

            def admits(item):
                self.assign(generator.target, item)
                return all(self.truth(self.expr(c), c, "a comprehension filter") for c in generator.ifs)
            for item in iterator:
                if not bound(lambda: admits(item)):
                    continue
                if len(generators) == 1:
                    yield bound(element)
                else:
                    inner = bound(lambda: iter(checked_iterable(self.expr(generators[1].iter))))
                    yield from steps(generators[1:], inner)
        return steps(node.generators, first)

    def expr_NamedExpr(self, node):
        value = self.expr(node.value)
        self.assign(node.target, value)
        return value

    def expr_Yield(self, node):
        """(A `yield` standing as a statement suspends the walk: generators.py.)"""
        raise UnsupportedSyntaxError(
            "a `yield` inside an expression cannot be staged: s2s suspends a generator only "
            "between statements",
            "write the `yield` as a statement of its own (`yield value`, `name = yield value`) "
            "and use the name")

    expr_YieldFrom = expr_Yield

    def expr_Await(self, node):
        raise UnsupportedSyntaxError("`await` cannot be staged", "staged functions are synchronous")

    def expr_Call(self, node):
        fn = self.expr(node.func)
        args = self._elements(node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.expr(kw.value))
            else:
                kwargs[kw.arg] = self.expr(kw.value)
        return self.call(fn, args, kwargs)

    def _stages(self, value) -> bool:
        return isinstance(value, Tracer) or (is_array_constant(value)
                                             and current_builder() is not None)

    def _numpy(self, numpy_fn):
        impl = NUMPY_IMPLS.get(numpy_fn)
        if impl is None:
            raise UnsupportedFunctionError(f"the operator for np.{numpy_fn.__name__} is not supported on arrays")
        return impl

    def _operator(self, numpy_fn):
        """The operator form of a NumPy function: on Python numbers only (weak operands)
        it gives a Python number, as `y * 2.0` and `-y` of a float y do, not an np.float64
        that would promote the float32 arrays it meets."""
        numpy_impl = self._numpy(numpy_fn)
        return getattr(numpy_impl, "operator", numpy_impl)

    def operate(self, python_op, numpy_fn, left, right, node):
        if self._stages(left) or self._stages(right):
            return self._operator(numpy_fn)(left, right)
        return python_op(left, right)

    def truth(self, value, node, what: str, logical: bool = False) -> bool:
        if isinstance(value, Tracer):
            help = CONCRETE_HELP
            if logical:
                help = ("combine array conditions with `&`, `|`, `~` or np.logical_and / "
                        "np.logical_or, and choose values with np.where(cond, a, b)")
            raise ConcretizationError(
                f"{what} needs a Python bool, but this is a staged array "
                f"({value.aval.str_short()}) whose value is only known when the function runs",
                help, self.source.info(node))
        return bool(value)
