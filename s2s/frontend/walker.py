"""The staging walk: runs a function's AST with staged arrays in place of its array inputs.

Python values that do not depend on the array arguments — ints, shapes, tuples, strings,
module constants — stay concrete and the walk computes with them directly, so loops over
`range(n_layers)`, `if x.ndim == 2` and list building happen now, at staging time. Every
array operation (operators, `np.*` calls, methods) is staged into the active builder, even
when its inputs are constants, so `np.ones((300, 1024, 1024))` becomes a small equation,
not a 1.2 GB literal. Calls to other user functions are staged by walking their source too,
so equations point at the line of whichever file they came from.

Whenever Python itself needs a concrete value from a staged one (`if x.sum() > 0`,
`int(x)`, `range(x)`), ConcretizationError points at that line. Syntax that cannot be
staged raises UnsupportedSyntaxError at its line.
"""
from __future__ import annotations

import builtins
import functools
import inspect
import operator
import sysconfig
import threading
import types
from typing import Any

import gast
import numpy as np

from s2s import dtypes
from s2s.errors import (CONCRETE_HELP, ConcretizationError, S2SError, StagingError,
                        UnsupportedFunctionError, UnsupportedSyntaxError)
from s2s.frontend.source import (BUILTINS, FunctionSource, check_supported_scope,
                                 function_source, nested_function_source, walk_scope)
from s2s.numpy_api import NUMPY_IMPLS
from s2s.staging import Tracer, current_builder
from s2s.tree import tree_leaves, tree_map

_STDLIB = sysconfig.get_paths()["stdlib"]
MAX_STAGING_DEPTH = 200

# NumPy functions that build arrays from static arguments alone: always staged (as iota,
# broadcasts ...), never run eagerly, so their results never become baked constants.
CREATION_FUNCTIONS = {np.zeros, np.ones, np.full, np.empty, np.eye, np.identity, np.arange,
                      np.linspace, np.tri, np.zeros_like, np.ones_like, np.full_like,
                      np.empty_like, np.array, np.asarray}

# Python operators on arrays, as the NumPy functions that implement them.
BINARY_OPERATORS = {
    gast.Add: (operator.add, np.add), gast.Sub: (operator.sub, np.subtract),
    gast.Mult: (operator.mul, np.multiply), gast.Div: (operator.truediv, np.true_divide),
    gast.FloorDiv: (operator.floordiv, np.floor_divide), gast.Mod: (operator.mod, np.remainder),
    gast.Pow: (operator.pow, np.power), gast.MatMult: (operator.matmul, np.matmul),
    gast.BitAnd: (operator.and_, np.bitwise_and), gast.BitOr: (operator.or_, np.bitwise_or),
    gast.BitXor: (operator.xor, np.bitwise_xor), gast.LShift: (operator.lshift, np.left_shift),
    gast.RShift: (operator.rshift, np.right_shift),
}
UNARY_OPERATORS = {
    gast.USub: (operator.neg, np.negative), gast.UAdd: (operator.pos, np.positive),
    gast.Invert: (operator.invert, np.invert),
}
COMPARISONS = {
    gast.Eq: (operator.eq, np.equal), gast.NotEq: (operator.ne, np.not_equal),
    gast.Lt: (operator.lt, np.less), gast.LtE: (operator.le, np.less_equal),
    gast.Gt: (operator.gt, np.greater), gast.GtE: (operator.ge, np.greater_equal),
    gast.Is: (operator.is_, None), gast.IsNot: (operator.is_not, None),
    gast.In: (lambda a, b: a in b, None), gast.NotIn: (lambda a, b: a not in b, None),
}

UNSUPPORTED_STATEMENTS = {
    gast.Try: ("try/except", "s2s stages the function once; errors cannot be caught at run time. "
               "Check conditions on static values before calling"),
    gast.With: ("`with` blocks", "move the context manager outside the staged function"),
    gast.AsyncWith: ("`async with`", "staged functions are synchronous"),
    gast.AsyncFor: ("`async for`", "staged functions are synchronous"),
    gast.AsyncFunctionDef: ("async functions", "staged functions are synchronous"),
    gast.ClassDef: ("class definitions inside a staged function",
                    "define the class at module level"),
    gast.Match: ("`match` statements", "use if/elif on static values"),
}


def _direct(run, names):
    """`run` as a function with parameters named `names` (made unique: they are hints)."""
    from s2s.lax import Direct
    unique: list[str] = []
    for name in names:
        candidate, n = name, 0
        while candidate in unique:
            n += 1
            candidate = f"{name}_{n}"
        unique.append(candidate)
    return Direct(run, unique)


class _Jump(Exception):
    """`return`, `break` or `continue` leaving a block; `node` is the statement."""

    def __init__(self, node=None):
        self.node = node


class _Return(_Jump):
    def __init__(self, value, node=None):
        super().__init__(node)
        self.value = value


class _Break(_Jump):
    pass


class _Continue(_Jump):
    pass


# A `break` or `continue` in a staged loop clears a flag instead of leaving the body, and
# the statements after it run under `if flag:`. `break` clears `running`, which the loop
# carries and stops on; `continue` clears `live`, which is set again at the start of each
# iteration. Flags live among the variables under names no Python variable can have; the
# hints name them in emitted code.
_FLAG_HINTS = {"<running>": "running", "<live>": "live"}
_RUNNING, _LIVE = _FLAG_HINTS

# What to write instead of a jump under an array test, in a `while` on a Python value.
_PYTHON_WHILE_JUMP_HELP = {
    "break": "a `while` on a Python value runs while staging, so it cannot stop on an array: put "
             "the array condition in the `while` (`while not done:`), or bound the loop: "
             "`for _ in range(n): ... if done: break`",
    "continue": "a `while` on a Python value runs while staging, so it cannot skip the rest of a "
                "pass on an array: put that rest under `if not skip:` instead",
}


class Scope:
    """The variables of one function activation, with lexical parents for nested defs."""

    def __init__(self, source: FunctionSource, fn_globals: dict, closure: dict,
                 parent: Scope | None):
        self.source = source
        self.vars: dict[str, Any] = {}
        self.globals = fn_globals
        self.closure = closure
        self.parent = parent

    def lookup(self, name: str, node) -> Any:
        scope = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            if name in scope.source.local_names:
                raise StagingError(f"local variable {name!r} is used before it is assigned",
                                   f"assign {name} before this line")
            if name in scope.closure:
                return scope.closure[name]
            scope = scope.parent
        if name in self.globals:
            return self.globals[name]
        if name in BUILTINS:
            return BUILTINS[name]
        raise StagingError(f"name {name!r} is not defined", "define it or import it")

    def bound_names_of(self, value) -> list[str]:
        """Names in this activation bound to exactly this object (for aliasing checks)."""
        return [n for n, v in self.vars.items() if v is value]


class StagedFunction:
    """A def or lambda created while staging: calling it stages its body in place."""

    def __init__(self, source: FunctionSource, parent: Scope, defaults: list, kw_defaults: dict):
        self.source = source
        self.parent = parent
        self.signature = _signature_of(source.node.args, defaults, kw_defaults)

    def __call__(self, *args, **kwargs):
        bound = _bind(self.signature, args, kwargs, self.source.name)
        scope = Scope(self.source, self.parent.globals, {}, self.parent)
        return FunctionWalker(scope).run(bound)

    def __repr__(self):
        return f"<staged function {self.source.name}>"


def _signature_of(args: gast.arguments, defaults: list, kw_defaults: dict) -> inspect.Signature:
    P = inspect.Parameter
    params = []
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(defaults)
    for i, a in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        default = defaults[i - first_default] if i >= first_default else P.empty
        params.append(P(a.id, kind, default=default))
    if args.vararg:
        params.append(P(args.vararg.id, P.VAR_POSITIONAL))
    for a in args.kwonlyargs:
        params.append(P(a.id, P.KEYWORD_ONLY, default=kw_defaults.get(a.id, P.empty)))
    if args.kwarg:
        params.append(P(args.kwarg.id, P.VAR_KEYWORD))
    return inspect.Signature(params)


def _bind(signature: inspect.Signature, args, kwargs, name: str) -> dict:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise StagingError(f"{name}() called with the wrong arguments: {e}",
                           f"call it as {name}{signature}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def stage_python_function(fn, args, kwargs, self_arg=None):
    """Stages a call of a plain Python function (module-level, nested, lambda, method)."""
    source = function_source(fn)
    check_supported_scope(source)
    if fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise UnsupportedSyntaxError(f"{source.name} is a generator or coroutine, which cannot be staged",
                                     "return a list or tuple instead of yielding",
                                     source.info(source.node))
    closure = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # an empty cell: the name is not bound yet
                pass
    if self_arg is not None:
        args = (self_arg,) + tuple(args)
    signature = inspect.signature(fn, follow_wrapped=False)
    bound = _bind(signature, args, kwargs, source.name)
    scope = Scope(source, fn.__globals__, closure, None)
    return FunctionWalker(scope).run(bound)


_staging_state = threading.local()


def _call_stack() -> list:
    """(function node, static arguments) of the calls being staged, innermost last."""
    if not hasattr(_staging_state, "stack"):
        _staging_state.stack = []
    return _staging_state.stack


def _is_staged(value) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, (list, tuple)):
        return any(_is_staged(v) for v in value)
    if isinstance(value, dict):
        return any(_is_staged(v) for v in value.values())
    return False


def _is_array_constant(value) -> bool:
    return isinstance(value, np.ndarray) and value.ndim > 0


def _is_static_scalar_tree(value) -> bool:
    """Python/NumPy scalars, strings, None, dtypes and containers of them: never staged."""
    if isinstance(value, (list, tuple)):
        return all(_is_static_scalar_tree(v) for v in value)
    if isinstance(value, dict):
        return all(_is_static_scalar_tree(v) for v in value.values())
    return not (isinstance(value, Tracer) or _is_array_constant(value))


class FunctionWalker:
    """Walks one function body. Statements are executed; expressions return values."""

    def __init__(self, scope: Scope):
        self.scope = scope
        self.source = scope.source
        self.arguments: set[int] = set()   # ids of the staged arguments, for in-place warnings
        self.in_staged_loop = False        # whether `break`/`continue` set flags (see _FLAG_HINTS)

    # --- entry -------------------------------------------------------------------------

    def run(self, bound_args: dict):
        node = self.source.node
        for name, value in bound_args.items():
            self.assign_name(name, value)
        self.arguments = {id(v) for v in bound_args.values() if isinstance(v, Tracer)}
        key = (id(node), tuple((k, _static_key(v)) for k, v in bound_args.items()))
        stack = _call_stack()
        if key in stack or len(stack) >= MAX_STAGING_DEPTH:
            raise UnsupportedSyntaxError(
                f"{self.source.name} calls itself with the same static arguments: "
                "recursion on staged values cannot be unrolled",
                "recursion must end on static values (e.g. a Python int depth); "
                "otherwise write a loop")
        stack.append(key)
        try:
            if isinstance(node, gast.Lambda):
                return self.expr(node.body)
            try:
                self._tail_block(node.body)
            except _Return as r:
                return r.value
            return None
        finally:
            stack.pop()

    # --- statements --------------------------------------------------------------------

    def block(self, statements):
        for stmt in statements:
            self.stmt(stmt)

    def stmt(self, node):
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                what, help = UNSUPPORTED_STATEMENTS.get(
                    type(node), (f"`{type(node).__name__}` statements", "rewrite without it"))
                raise UnsupportedSyntaxError(f"{what} are not supported in staged functions",
                                             help)
            method(node)
        except (_Return, _Break, _Continue):
            raise
        except S2SError as e:
            raise e.at(self.source.info(node))

    def stmt_Expr(self, node):
        self.expr(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Return(self, node):
        raise _Return(None if node.value is None else self.expr(node.value), node)

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node):
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def stmt_AugAssign(self, node):
        target = node.target
        python_op, numpy_fn = BINARY_OPERATORS[type(node.op)]
        if isinstance(target, gast.Name):
            current = self.scope.lookup(target.id, target)
            new = self.operate(python_op, numpy_fn, current, self.expr(node.value), node)
            if isinstance(current, Tracer):
                new = self._in_place_result(target.id, current, new)
            self.assign_name(target.id, new)
            return
        if isinstance(target, gast.Subscript):
            obj = self.expr(target.value)
            index = self.expr(target.slice)
            updated = self.operate(python_op, numpy_fn, obj[index], self.expr(node.value), node)
            if isinstance(obj, Tracer):
                self._store(target, obj, index, updated)
                return
            self._reject_array_store(obj, target)
            obj[index] = updated
            return
        if isinstance(target, gast.Attribute):
            obj = self.expr(target.value)
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

    def stmt_If(self, node):
        test = self.expr(node.test)
        if isinstance(test, Tracer):
            return self._staged_if(node, test)
        taken = node.body if self.truth(test, node.test, "an `if` condition") else node.orelse
        # In a staged loop a jump under an array condition in here guards what follows it.
        self._guarded_block(taken) if self.in_staged_loop else self.block(taken)

    # --- control flow on staged values: cond, while_loop and scan -----------------------
    #
    # The names a branch or loop body passes on (assigned in it and read after it, or by
    # the next iteration: the def-use chains say which) become the outputs of a `cond`
    # or the carry of a loop. Everything else the body reads it takes from the enclosing
    # function directly (closure conversion makes those explicit operands).

    def _tail_block(self, statements):
        """Statements that end the function: its body, and the paths through an `if` that
        can return. An `if` on an array with a `return` in it takes the statements after it
        into its branches, so each path ends in its own `return` and the `if` is one cond
        of the value returned (`if r < delta: return r * r` then `return delta * r`)."""
        for k, statement in enumerate(statements):
            if not (isinstance(statement, gast.If) and _has_return(statement)):
                self.stmt(statement)
                continue
            rest = statements[k + 1:]
            try:
                test = self.expr(statement.test)
                if isinstance(test, Tracer):
                    self._returning_if(statement, test, rest)
                taken = statement.body if self.truth(test, statement.test, "an `if` condition") else statement.orelse
            except S2SError as e:
                raise e.at(self.source.info(statement))
            return self._tail_block(taken + rest)

    def _returning_if(self, node, test, rest):
        """Raises _Return with the cond of what each path through `node` and `rest` returns."""
        from s2s import lax
        if _changes_existing_objects(node.body + node.orelse + rest, self.scope.vars):
            raise UnsupportedSyntaxError(
                "an `if` on an array that can `return`, in a function that changes Python lists, "
                "dicts or attributes made before it: each path would change them",
                "assign the result to a name in both branches and return it after the `if`, "
                "or build the list before the `if`", self.source.info(node))
        pred = self._scalar_test(test, node.test, "an `if` condition")

        def path(statements):
            def run():
                saved = dict(self.scope.vars)
                try:
                    self._tail_block(statements)
                except _Return as returned:
                    return returned.value
                finally:
                    self.scope.vars = saved
                return None
            return _direct(run, [])
        with current_builder().at(self.source.info(node)):
            value = lax.switch(pred, [path(node.orelse + rest), path(node.body + rest)])
        for leaf in tree_leaves(value):
            if isinstance(leaf, Tracer) and leaf.variable.hint is None:
                leaf.variable.hint = "result"
        raise _Return(value, node)

    def _scalar_test(self, test, node, what: str):
        if test.shape != ():
            raise ConcretizationError(
                f"{what} on an array of shape {test.shape}: its truth value is ambiguous",
                "reduce it to one bool first, e.g. with .any() or .all()", self.source.info(node))
        return test if test.dtype == np.dtype(bool) else test != 0

    def _run_block(self, statements, what: str):
        """Runs statements staged in a body: `return` cannot leave it, and `break` and
        `continue` only set their staged loop's flags."""
        try:
            if self.in_staged_loop:
                self._guarded_block(statements)
            else:
                self.block(statements)
        except _Return as jump:
            raise UnsupportedSyntaxError(f"`return` inside {what}",
                                         "assign the result to a name and return after it",
                                         self.source.info(jump.node)) from None
        except (_Break, _Continue) as jump:
            if self.in_staged_loop:
                self.scope.vars[_RUNNING if isinstance(jump, _Break) else _LIVE] = np.bool_(False)
                return
            keyword = "break" if isinstance(jump, _Break) else "continue"
            error = UnsupportedSyntaxError(
                f"`{keyword}` inside {what}, in a loop that is unrolled while staging",
                "loop over range(n) or an array with an index that stays an array (not "
                "`params[i]` of a list), so the loop is staged and can stop on an array "
                "condition; or carry a flag and test it", self.source.info(jump.node))
            error.unrolled_jump = keyword  # the loop may say why it is unrolled
            raise error from None

    def _guarded_block(self, statements):
        """Statements of a staged loop's body: after one that may have cleared a loop flag
        (`break` or `continue` under a staged condition), the rest run under `if flag:`."""
        for k, statement in enumerate(statements):
            self.stmt(statement)
            rest = statements[k + 1:]
            if not rest or not _loop_jumps([statement]):
                continue
            flags = [self.scope.vars[f] for f in _FLAG_HINTS if f in self.scope.vars]
            staged = [f for f in flags if isinstance(f, Tracer)]
            if staged:
                go_on = staged[0] if len(staged) == 1 else NUMPY_IMPLS[np.logical_and](*staged)
                self._stage_branches(_region(rest), rest, [], go_on, rest[0], guard=True)
                return

    def _values_of(self, names, node, what: str) -> tuple:
        values = []
        for name in names:
            if name not in self.scope.vars:
                raise StagingError(f"`{name}` is assigned in {what} and read after it or in its "
                                   "next pass, but has no value before it",
                                   f"give `{name}` a value before the loop (e.g. "
                                   f"`{name} = np.zeros_like(...)`)", self.source.info(node))
            values.append(self.scope.vars[name])
        return tuple(values)

    def _body(self, names, statements, results, what: str):
        """A function of the carried values: binds `names` to them, runs `statements`,
        returns `results()` (scope restored afterwards)."""
        def run(*values):
            saved = dict(self.scope.vars)
            try:
                for name, value in zip(names, values):
                    self.assign_name(name, value)
                self._run_block(statements, what)
                return results()
            finally:
                self.scope.vars = saved
        return _direct(run, _hints(names))

    def _staged_if(self, node, test):
        pred = self._scalar_test(test, node.test, "an `if` condition")
        self._stage_branches(node, node.body, node.orelse, pred, node)

    def _stage_branches(self, region, body, orelse, pred, node, guard: bool = False):
        """`if pred: body else: orelse` as a cond. `region` is the AST node holding both
        (the `if`, or, with `guard`, a made-up one around the statements after a `break` or
        `continue`, run under the loop's flags: there a name first assigned in them gets
        zeros on the path that skips them, which nothing reads, since what follows is
        skipped too)."""
        from s2s import lax
        if _mutates_containers(body + orelse, self.scope.vars):
            raise UnsupportedSyntaxError(
                "an `if` on an array whose branches change Python lists, dicts or attributes",
                "assign new values to names in the branches instead (they become the `if`'s "
                "results), or choose with np.where", self.source.info(node))
        outputs = self.source.used_outside(region, self.source.stored_names(body + orelse))
        outputs += [n for n in _updated_arrays(body + orelse, self.scope.vars) if n not in outputs]
        if self.in_staged_loop and _loop_jumps(body + orelse):
            outputs += [f for f in _FLAG_HINTS if f in self.scope.vars]
        unset = []
        for name in outputs:
            assigned_in_both = (name in self.source.stored_names(body)
                                and name in self.source.stored_names(orelse))
            if not assigned_in_both and name not in self.scope.vars:
                if not guard:
                    raise StagingError(
                        f"`{name}` is assigned in only one branch of this `if` on an array and used "
                        "after it, so it would have no value when the other branch runs",
                        f"assign `{name}` in both branches, or give it a value before the `if`",
                        self.source.info(node))
                unset.append(name)

        def results_or(placeholders: dict):
            return lambda: tuple(placeholders[n] if n in placeholders else self.scope.lookup(n, node)
                                 for n in outputs)
        taken = self._body((), body, results_or({}), "an `if` on an array")
        placeholders = {}
        if unset:   # the other branch gives zeros of the types this one gives
            taken = lax.staged_branch(taken, "an `if` on an array")
            placeholders = {n: tree_map(_zeros_like_type, t)
                            for n, t in zip(outputs, taken.out_types) if n in unset}
        branches = [self._body((), orelse, results_or(placeholders), "an `if` on an array"), taken]
        with current_builder().at(self.source.info(node)):
            values = lax.switch(pred, branches)
        for name, value in zip(outputs, values):
            self.assign_name(name, value)

    def _loop_body(self, body) -> bool:
        """Runs one iteration of a static loop; False when it ends with `break`."""
        in_staged_loop, self.in_staged_loop = self.in_staged_loop, False
        try:
            self.block(body)
        except _Break:
            return False
        except _Continue:
            pass
        finally:
            self.in_staged_loop = in_staged_loop
        return True

    def stmt_While(self, node):
        builder = current_builder()
        mark = len(builder.eqns) if builder is not None else 0
        test = self.expr(node.test)
        if isinstance(test, Tracer):
            del builder.eqns[mark:]   # the loop evaluates its test itself
            return self._staged_while(node)
        while self.truth(test, node.test, "a `while` condition"):
            try:
                if not self._loop_body(node.body):
                    return
            except UnsupportedSyntaxError as e:
                jump = getattr(e, "unrolled_jump", None)
                if jump:
                    e.help = _PYTHON_WHILE_JUMP_HELP[jump]
                    e.unrolled_jump = None     # said by the loop the jump belongs to
                raise
            test = self.expr(node.test)
            if isinstance(test, Tracer):
                raise ConcretizationError(
                    "this `while` condition became an array after the first iterations",
                    "make the condition an array from the start (so the loop is staged), "
                    "or keep it a Python bool", self.source.info(node.test))
        self.block(node.orelse)

    def _loop_carry(self, node, body, loop_targets=()) -> list[str]:
        carry = self.source.used_outside(node, self.source.stored_names(body))
        carry += [n for n in _updated_arrays(body, self.scope.vars) if n not in carry]
        return [n for n in carry if n not in loop_targets]

    def _staged_while(self, node):
        """A `while` on an array test as a while_loop (on `running and test` if it can
        `break`)."""
        from s2s import lax
        jumps = _loop_jumps(node.body)
        carry = self._loop_carry(node, node.body)
        init = self._values_of(carry, node, "this `while` loop")
        if "break" in jumps:
            carry, init = carry + [_RUNNING], init + (np.bool_(True),)

        def condition():
            holds = self._scalar_test(self.expr(node.test), node.test, "a `while` condition")
            if "break" not in jumps:
                return holds
            return NUMPY_IMPLS[np.logical_and](self.scope.vars[_RUNNING], holds)
        keep_going = _direct(lambda values: self._body(carry, (), condition, "")(*values), _hints(carry))
        step = _direct(lambda values: self._iteration(node, carry, jumps, values), _hints(carry))
        with current_builder().at(self.source.info(node)):
            results = lax.while_loop(keep_going, step, init)
        self._end_loop(node, dict(zip(carry, results)))

    def _iteration(self, node, carry, jumps, values, item=None):
        """Stages one iteration of a staged loop: binds the carried names (`break`'s flag
        among them if the loop has one) and the loop's target, runs the body with `break`
        and `continue` setting flags, and returns the carried names' new values."""
        saved, in_staged_loop = dict(self.scope.vars), self.in_staged_loop
        try:
            for flag in _FLAG_HINTS:      # an enclosing loop's flags are not this loop's
                self.scope.vars.pop(flag, None)
            for name, value in zip(carry, values):
                self.assign_name(name, value)
            if "continue" in jumps:
                self.scope.vars[_LIVE] = np.bool_(True)
            if item is not None:
                self.assign(node.target, item)
            self.in_staged_loop = True
            self._run_block(node.body, "a staged loop")
            return tuple(self.scope.lookup(n, node) for n in carry)
        finally:
            self.scope.vars, self.in_staged_loop = saved, in_staged_loop

    def _end_loop(self, node, results: dict, last_item=None):
        """Binds a staged loop's results and (from `last_item()`) its loop variable, then
        runs its `else` block unless it broke."""
        running = results.pop(_RUNNING, np.bool_(True))
        for name, value in results.items():
            self.assign_name(name, value)
        if last_item is not None:
            self._bind_loop_variable(node, last_item)
        if not node.orelse:
            return
        if isinstance(running, Tracer):
            self._stage_branches(_region(node.orelse), node.orelse, [], running, node.orelse[0])
        elif running:
            self.block(node.orelse)

    def _bind_loop_variable(self, node, last_item):
        """Python leaves the loop variable at the last item the loop reached: bound when
        something reads it after the loop (or in its `else`)."""
        targets = self.source.stored_names([node.target])
        read_in_else = any(isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load) and n.id in targets
                           for n in _walk_statements(node.orelse))
        if not (read_in_else or self.source.used_outside(node, targets)):
            return
        rebound = [t for t in targets if t in self.source.stored_names(node.body)]
        if rebound:
            raise StagingError(
                f"`{rebound[0]}` is this loop's variable, the body assigns it too, and it is read "
                "after the loop: a staged loop does not carry its variable",
                f"give the body's new value another name than `{rebound[0]}`", self.source.info(node))
        self.assign(node.target, last_item())

    def stmt_For(self, node):
        from s2s.lax import unroll
        iterable = self._range_call(node.iter)
        if isinstance(iterable, tuple):
            return self._staged_range_for(node, *iterable)
        if iterable is None:
            iterable = self.expr(node.iter)
        if isinstance(iterable, unroll):        # the user asked for the loop unrolled
            iterable = iterable.iterable
        elif isinstance(iterable, range) or (isinstance(iterable, Tracer) and iterable.shape):
            unstaged_because = self._staged_for(node, iterable)
            if unstaged_because is None:
                return
            try:
                return self._unrolled_for(node, iterable)
            except UnsupportedSyntaxError as e:
                if getattr(e, "unrolled_jump", None):
                    e.help = (f"this loop is unrolled because staging it as one loop failed: "
                              f"{unstaged_because.what}; fix that and the jump works")
                    e.unrolled_jump = None     # said by the loop the jump belongs to
                raise
        if isinstance(iterable, Tracer) and not iterable.shape:
            raise StagingError("iteration over a 0-d array",
                               "loop over a 1-d or higher array, or over range(n)")
        self._unrolled_for(node, iterable)

    def _unrolled_for(self, node, iterable):
        try:
            iterator = iter(iterable)
        except TypeError as e:
            raise StagingError(f"cannot loop over this value: {e}",
                               "loop over a list, tuple, range or array") from None
        for item in iterator:
            self.assign(node.target, item)
            if not self._loop_body(node.body):
                return
        self.block(node.orelse)

    def _staged_for(self, node, iterable) -> S2SError | None:
        """`for i in range(n)` or `for row in x` as one scan (one bounded while_loop if it
        can `break`), so a long loop stays one equation. When the loop must be unrolled
        instead, nothing is staged and the reason is returned: its index is used as a
        Python value (`params[i]` of a list, `range(i)`), its values change type from one
        iteration to the next, it mutates Python containers or carries Python ints, or it
        can `return`."""
        from s2s import lax
        length = len(iterable) if isinstance(iterable, range) else iterable.shape[0]
        targets = self.source.stored_names([node.target])
        carry = self._loop_carry(node, node.body, targets)
        reason = self._unstageable_loop(node, carry, length)
        if reason is not None:
            return StagingError(reason)
        init = tuple(self.scope.vars[name] for name in carry)
        jumps = _loop_jumps(node.body)
        builder = current_builder()
        mark = len(builder.eqns)
        try:
            with builder.at(self.source.info(node)):
                if isinstance(iterable, range):
                    xs = NUMPY_IMPLS[np.arange](iterable.start, iterable.stop, iterable.step)
                else:
                    xs = iterable
                if "break" not in jumps:
                    def step(values, item):
                        return self._iteration(node, carry, jumps, values, item), None
                    values, _ = lax.scan(_direct(step, _hints(carry) + targets[:1]), init, xs)
                    results, last = dict(zip(carry, values)), length - 1
                else:
                    results, last = self._breaking_for(node, carry, init, jumps, iterable, xs, length)
        except S2SError as failure:
            del builder.eqns[mark:]       # unroll instead; drop what the attempt staged
            if length >= LONG_LOOP:
                _warn_unrolled(self.source, node, length, failure)
            return failure
        def last_item():
            if not isinstance(iterable, range):
                return xs[last]
            return iterable[last] if isinstance(last, int) else iterable.start + last * iterable.step
        self._end_loop(node, results, last_item if last is not None else None)
        return None

    def _unstageable_loop(self, node, carry, length) -> str | None:
        """Why a `for` loop cannot be one staged loop, found before staging it, or None."""
        if length == 0:
            return "it has no steps"
        if _mutates_containers(node.body, self.scope.vars):
            return "its body changes Python lists, dicts or attributes"
        if _returns(node.body):
            return "it can `return`"
        missing = [name for name in carry if name not in self.scope.vars]
        if missing:
            return f"`{missing[0]}` has no value before it"
        if not _carriable(tuple(self.scope.vars[name] for name in carry)):
            return "it carries Python numbers or objects, not arrays"
        return None

    def _range_call(self, expr):
        """For `range(...)`: the range, or (start, stop, step) when a bound is a staged array
        (Python's range needs ints; such a loop is a while_loop). None for anything else,
        which is left unevaluated."""
        if not (isinstance(expr, gast.Call) and isinstance(expr.func, gast.Name) and expr.func.id == "range"
                and not expr.keywords and 1 <= len(expr.args) <= 3
                and not any(isinstance(a, gast.Starred) for a in expr.args)
                and self.scope.lookup("range", expr.func) is range):
            return None
        bounds = [self.expr(a) for a in expr.args]
        staged = [b for b in bounds if isinstance(b, Tracer)]
        if not staged:
            return self.call(range, bounds, {}, expr)
        for bound in bounds:
            if isinstance(bound, Tracer) and (bound.shape != () or np.dtype(bound.dtype).kind not in "iu"):
                raise StagingError(f"range() needs integer scalars, got an array of type {bound.aval.str_short()}",
                                   "pass an integer scalar (e.g. `n.astype(int)` or `int(...)` of a static value)")
            if not isinstance(bound, (Tracer, int, np.integer)) or isinstance(bound, bool):
                raise StagingError(f"range() needs integers, got {type(bound).__name__}", "pass ints")
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if not isinstance(step, Tracer) and step == 0:
            raise StagingError("range() step must not be zero", "pass a nonzero step")
        return start, stop, step

    def _staged_range_for(self, node, start, stop, step):
        """`for i in range(start, stop, step)` with an array bound: a while_loop on `i`
        (forward mode only, like lax.fori_loop with traced bounds)."""
        from s2s import lax
        jumps = _loop_jumps(node.body)
        carry = self._loop_carry(node, node.body, self.source.stored_names([node.target]))
        init = self._values_of(carry, node, "this `for` loop")
        if "break" in jumps:
            carry, init = carry + [_RUNNING], init + (np.bool_(True),)
        dtype = next(b.dtype for b in (start, stop, step) if isinstance(b, Tracer))
        if np.dtype(dtype).kind == "u":     # the index may step below zero: count signed
            dtype = dtypes.default_int()
            start, stop, step = (b.astype(dtype) if isinstance(b, Tracer) else b for b in (start, stop, step))
        first = start.astype(dtype) if isinstance(start, Tracer) else np.asarray(start, dtype)

        def keep_going(state):
            i, values = state
            if isinstance(step, Tracer):
                more = NUMPY_IMPLS[np.where](step > 0, i < stop, i > stop)
            else:
                more = i < stop if step > 0 else i > stop
            return NUMPY_IMPLS[np.logical_and](values[-1], more) if "break" in jumps else more

        def step_to_next(state):
            i, values = state
            return i + step, self._iteration(node, carry, jumps, values, i)
        names = ["i"] + _hints(carry)
        with current_builder().at(self.source.info(node)):
            after, values = lax.while_loop(_direct(keep_going, names), _direct(step_to_next, names), (first, init))
        def last_item():   # the last value the loop took; if it never ran, what it was before
            before = self.scope.vars.get(self.source.stored_names([node.target])[0])
            if isinstance(before, (int, np.integer)) or (isinstance(before, Tracer) and before.shape == ()
                                                        and np.dtype(before.dtype).kind in "iu"):
                return NUMPY_IMPLS[np.where](after != first, after - step, before)
            return after - step
        self._end_loop(node, dict(zip(carry, values)), last_item)

    def _breaking_for(self, node, carry, init, jumps, iterable, xs, length) -> tuple[dict, Any]:
        """A `for` loop that can `break`: a while_loop bounded by the loop's length (so it
        has reverse mode) on `running`, carrying the position in the loop. Returns the
        results and the position of the last step run (None if nothing reads it)."""
        from s2s import lax
        carry = carry + [_RUNNING]

        def item_at(k):
            if isinstance(iterable, range):     # i = start + k * step, without reading xs
                return k if (iterable.start, iterable.step) == (0, 1) else iterable.start + k * iterable.step
            return xs[k]

        if isinstance(iterable, range) and not self.source.is_read(node.target):
            def step(values):     # `for _ in range(n):` needs no position
                return self._iteration(node, carry, jumps, values)
            values = lax.while_loop(_direct(lambda values: values[-1], _hints(carry)), _direct(step, _hints(carry)),
                                    init + (np.bool_(True),), max_iters=length)
            return dict(zip(carry, values)), None

        def keep_going(state):
            return state[1][-1]

        def step_at(state):
            k, values = state
            return k + 1, self._iteration(node, carry, jumps, values, item_at(k))
        position = np.zeros((), xs.dtype if isinstance(iterable, range) else dtypes.default_int())
        names = ["k"] + _hints(carry)
        steps, values = lax.while_loop(_direct(keep_going, names), _direct(step_at, names),
                                       (position, init + (np.bool_(True),)), max_iters=length)
        return dict(zip(carry, values)), steps - 1

    def stmt_Break(self, node):
        raise _Break(node)

    def stmt_Continue(self, node):
        raise _Continue(node)

    def stmt_Assert(self, node):
        if not self.truth(self.expr(node.test), node.test, "an `assert`"):
            message = "" if node.msg is None else f": {self.expr(node.msg)}"
            raise StagingError(f"assertion failed while staging{message}",
                               "the assert checks static values (shapes, Python numbers) of "
                               "these arguments; call the function with arguments it accepts")

    def stmt_Raise(self, node):
        exc = None if node.exc is None else self.expr(node.exc)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        description = f"{type(exc).__name__}: {exc}" if exc is not None else "an exception"
        error = StagingError(f"the function raised {description} while being staged",
                             "this `raise` ran for the arguments given (their static values "
                             "and shapes); call the function with arguments it accepts")
        error.original = exc
        raise error

    def stmt_FunctionDef(self, node):
        if node.decorator_list:
            raise UnsupportedSyntaxError("decorators on nested functions are not supported",
                                         "apply the decorator at module level")
        self.assign_name(node.name, self._make_function(node))

    def stmt_Import(self, node):
        for alias in node.names:
            module = __import__(alias.name)
            if alias.asname:
                for part in alias.name.split(".")[1:]:
                    module = getattr(module, part)
            self.assign_name(alias.asname or alias.name.split(".")[0], module)

    def stmt_ImportFrom(self, node):
        module = __import__(node.module, fromlist=[a.name for a in node.names], level=node.level
                            ) if node.level == 0 else None
        if module is None:
            raise UnsupportedSyntaxError("relative imports inside staged functions are not supported",
                                         "import at module level")
        for alias in node.names:
            self.assign_name(alias.asname or alias.name, getattr(module, alias.name))

    def stmt_Delete(self, node):
        for target in node.targets:
            if isinstance(target, gast.Name):
                self.scope.vars.pop(target.id, None)
            else:
                obj = self.expr(target.value)
                self._reject_array_store(obj, target)
                del obj[self.expr(target.slice)]

    # --- assignment --------------------------------------------------------------------

    def assign(self, target, value):
        if isinstance(target, gast.Name):
            self.assign_name(target.id, value)
        elif isinstance(target, (gast.Tuple, gast.List)):
            self._unpack(target, value)
        elif isinstance(target, gast.Subscript):
            obj = self.expr(target.value)
            if isinstance(obj, Tracer):
                self._store(target, obj, self.expr(target.slice), value)
                return
            self._reject_array_store(obj, target)
            obj[self.expr(target.slice)] = value
        elif isinstance(target, gast.Attribute):
            setattr(self.expr(target.value), target.attr, value)
        elif isinstance(target, gast.Starred):
            raise UnsupportedSyntaxError("a starred target must be inside a tuple or list")
        else:
            raise UnsupportedSyntaxError(f"cannot assign to {type(target).__name__}")

    def _unpack(self, target, value):
        if isinstance(value, Tracer):
            value = list(value)
        try:
            items = list(value)
        except TypeError:
            raise StagingError(f"cannot unpack a {type(value).__name__}",
                               "unpack a tuple, list or array") from None
        starred = [i for i, e in enumerate(target.elts) if isinstance(e, gast.Starred)]
        n = len(target.elts)
        if not starred:
            if len(items) != n:
                raise StagingError(f"cannot unpack {len(items)} values into {n} names",
                                   f"use {len(items)} names, or a starred name (`a, *rest = ...`)")
            for elt, item in zip(target.elts, items):
                self.assign(elt, item)
            return
        s = starred[0]
        after = n - s - 1
        if len(items) < n - 1:
            raise StagingError(f"not enough values to unpack (expected at least {n - 1}, got {len(items)})",
                               "use fewer names on the left")
        for elt, item in zip(target.elts[:s], items[:s]):
            self.assign(elt, item)
        self.assign(target.elts[s].value, items[s:len(items) - after])
        for elt, item in zip(target.elts[s + 1:], items[len(items) - after:]):
            self.assign(elt, item)

    def assign_name(self, name: str, value):
        if isinstance(value, Tracer) and value.variable.hint is None:
            value.variable.hint = _FLAG_HINTS.get(name, name)
        self.scope.vars[name] = value

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
        from s2s.numpy_api.indexing import setitem
        holder = target.value
        shown = gast.unparse(holder) if hasattr(gast, "unparse") else "the array"
        others = [n for n in self.scope.bound_names_of(obj)
                  if not (isinstance(holder, gast.Name) and n == holder.id)]
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

    # --- expressions -------------------------------------------------------------------

    def expr(self, node):
        builder = current_builder()
        saved = builder.source_info if builder is not None else None
        if builder is not None:
            builder.source_info = self.source.info(node)
        try:
            method = getattr(self, "expr_" + type(node).__name__, None)
            if method is None:
                raise UnsupportedSyntaxError(
                    f"`{type(node).__name__}` expressions are not supported in staged functions",
                    "rewrite the expression with supported syntax")
            return method(node)
        except S2SError as e:
            raise e.at(self.source.info(node))
        except (_Return, _Break, _Continue):
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError) as e:
            error = StagingError(f"{type(e).__name__}: {e}",
                                 "this Python error was raised while s2s ran the expression "
                                 "above; fix the expression (or the values it was given)")
            error.original = e
            raise error.at(self.source.info(node)) from None
        finally:
            if builder is not None:
                builder.source_info = saved

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        value = self.scope.lookup(node.id, node)
        if _is_array_constant(value):
            builder = current_builder()
            if builder is not None:
                builder.name_constant(value, node.id)
        return value

    def expr_Attribute(self, node):
        obj = self.expr(node.value)
        if isinstance(obj, Tracer) and not hasattr(obj, node.attr):
            raise UnsupportedFunctionError(
                f"the ndarray attribute or method `.{node.attr}` is not supported on staged arrays",
                "see the README's table of supported NumPy functions and methods")
        return getattr(obj, node.attr)

    def expr_Subscript(self, node):
        obj = self.expr(node.value)
        index = self.expr(node.slice)
        if _is_array_constant(obj) and current_builder() is not None:
            from s2s.numpy_api.indexing import getitem
            return getitem(obj, index)
        return obj[index]

    def expr_Slice(self, node):
        part = lambda n: None if n is None else self.expr(n)
        return slice(part(node.lower), part(node.upper), part(node.step))

    def expr_Tuple(self, node):
        return tuple(self._elements(node.elts))

    def expr_List(self, node):
        return list(self._elements(node.elts))

    def expr_Set(self, node):
        return set(self._elements(node.elts))

    def _elements(self, elts):
        out = []
        for e in elts:
            if isinstance(e, gast.Starred):
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
        return out

    def expr_JoinedStr(self, node):
        parts = []
        for v in node.values:
            parts.append(v.value if isinstance(v, gast.Constant) else self.expr(v))
        return "".join(str(p) for p in parts)

    def expr_FormattedValue(self, node):
        value = self.expr(node.value)
        if isinstance(value, Tracer):
            raise UnsupportedSyntaxError("formatting a staged array into a string is not supported",
                                         "format static values (shapes, Python numbers) only")
        spec = "" if node.format_spec is None else self.expr(node.format_spec)
        conv = {-1: lambda v: v, 115: str, 114: repr, 97: ascii}[node.conversion]
        return format(conv(value), spec)

    def expr_BinOp(self, node):
        python_op, numpy_fn = BINARY_OPERATORS[type(node.op)]
        return self.operate(python_op, numpy_fn, self.expr(node.left), self.expr(node.right), node)

    def expr_UnaryOp(self, node):
        operand = self.expr(node.operand)
        if isinstance(node.op, gast.Not):
            return not self.truth(operand, node.operand, "`not`")
        python_op, numpy_fn = UNARY_OPERATORS[type(node.op)]
        if self._stages(operand):
            return self._numpy(numpy_fn)(operand)
        return python_op(operand)

    def expr_BoolOp(self, node):
        what = "`and`" if isinstance(node.op, gast.And) else "`or`"
        value = None
        for operand in node.values:
            value = self.expr(operand)
            truth = self.truth(value, operand, what, logical=True)
            if isinstance(node.op, gast.And) and not truth:
                return value
            if isinstance(node.op, gast.Or) and truth:
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
        return self._comprehension(node, lambda out, n: out.append(self.expr(n.elt)), [])

    def expr_SetComp(self, node):
        return self._comprehension(node, lambda out, n: out.add(self.expr(n.elt)), set())

    def expr_GeneratorExp(self, node):
        # Evaluated eagerly: `sum(x ** 2 for x in xs)` means the same with a list.
        return iter(self.expr_ListComp(node))

    def expr_DictComp(self, node):
        def add(out, n):
            out[self.expr(n.key)] = self.expr(n.value)
        return self._comprehension(node, add, {})

    def _comprehension(self, node, add, out):
        # Comprehension variables are local to the comprehension, as in Python 3.
        saved = dict(self.scope.vars)

        def loop(generators):
            if not generators:
                add(out, node)
                return
            gen = generators[0]
            for item in self.expr(gen.iter):
                self.assign(gen.target, item)
                if all(self.truth(self.expr(c), c, "a comprehension filter") for c in gen.ifs):
                    loop(generators[1:])
        try:
            loop(node.generators)
        finally:
            targets = {n.id for g in node.generators for n in gast.walk(g.target)
                       if isinstance(n, gast.Name)}
            for name in targets:
                if name in saved:
                    self.scope.vars[name] = saved[name]
                else:
                    self.scope.vars.pop(name, None)
        return out

    def expr_NamedExpr(self, node):
        value = self.expr(node.value)
        self.assign(node.target, value)
        return value

    def expr_Yield(self, node):
        raise UnsupportedSyntaxError("generators (`yield`) cannot be staged",
                                     "return a list or tuple instead")

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
        return self.call(fn, args, kwargs, node)

    # --- calls -------------------------------------------------------------------------

    def call(self, fn, args, kwargs, node):
        numpy_impl = NUMPY_IMPLS.get(fn) if _hashable(fn) else None
        if numpy_impl is not None:
            if fn not in CREATION_FUNCTIONS and _is_static_scalar_tree((args, kwargs)):
                result = fn(*args, **kwargs)   # e.g. np.sqrt(d_k), np.prod(x.shape)
                if not _is_array_constant(result):
                    return result
            return numpy_impl(*args, **kwargs)
        module = getattr(fn, "__module__", None) or ""
        if module == "numpy.random" or module.startswith("numpy.random."):
            raise UnsupportedFunctionError(
                f"np.random.{getattr(fn, '__name__', '?')} inside a staged function would be "
                "frozen at staging time",
                "draw random numbers outside and pass them in as an argument")
        if (module == "numpy" or module.startswith("numpy.")) and not isinstance(fn, type):
            if _is_static_scalar_tree((args, kwargs)):
                return fn(*args, **kwargs)
            name = getattr(fn, "__name__", repr(fn))
            raise UnsupportedFunctionError(
                f"np.{name} is not supported on arrays by s2s",
                "see the README's table of supported NumPy functions; "
                "write it with supported functions")
        if fn is builtins.print and _is_staged((args, kwargs)):
            raise UnsupportedSyntaxError(
                "print() of a staged array: its value is only known when the function runs",
                "print shapes and dtypes (x.shape, x.dtype) instead, or print the result outside")
        if fn in (builtins.min, builtins.max) and _is_staged(args):
            name = fn.__name__
            raise ConcretizationError(
                f"the builtin {name}() compares staged arrays as Python bools",
                f"use np.{'minimum' if name == 'min' else 'maximum'}(a, b) or np.{name}(x)")
        if isinstance(fn, functools.partial):
            return self.call(fn.func, list(fn.args) + list(args), {**fn.keywords, **kwargs}, node)
        if isinstance(fn, StagedFunction):
            return fn(*args, **kwargs)
        if isinstance(fn, types.MethodType) and _is_user_function(fn.__func__):
            return stage_python_function(fn.__func__, args, kwargs, self_arg=fn.__self__)
        if _is_user_function(fn):
            return stage_python_function(fn, args, kwargs)
        if (not isinstance(fn, (type, types.BuiltinFunctionType, types.FunctionType,
                                types.MethodType)) and callable(fn)):
            call_method = getattr(type(fn), "__call__", None)
            if _is_user_function(call_method):
                return stage_python_function(call_method, args, kwargs, self_arg=fn)
        if getattr(fn, "__module__", "") == "math" and _is_staged((args, kwargs)):
            raise ConcretizationError(
                f"math.{fn.__name__} needs a Python number, but got a staged array",
                f"use np.{fn.__name__} for arrays")
        return fn(*args, **kwargs)

    # --- helpers -----------------------------------------------------------------------

    def _stages(self, value) -> bool:
        return isinstance(value, Tracer) or (_is_array_constant(value)
                                             and current_builder() is not None)

    def _numpy(self, numpy_fn):
        impl = NUMPY_IMPLS.get(numpy_fn)
        if impl is None:
            raise UnsupportedFunctionError(f"the operator for np.{numpy_fn.__name__} is not supported on arrays")
        return impl

    def operate(self, python_op, numpy_fn, left, right, node):
        if self._stages(left) or self._stages(right):
            return self._numpy(numpy_fn)(left, right)
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

    def _make_function(self, node) -> StagedFunction:
        source = nested_function_source(self.source, node)
        check_supported_scope(source)
        defaults = [self.expr(d) for d in node.args.defaults]
        kw_defaults = {a.id: self.expr(d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)
                       if d is not None}
        return StagedFunction(source, self.scope, defaults, kw_defaults)


def _view_base(value: Tracer):
    """The variable `value` is a NumPy view of (it came from a slice, reshape, transpose
    ... of it), or None."""
    from s2s.primitives.structural import NUMPY_VIEWS
    eqn = value.builder.producer(value.variable)
    return eqn.invars[0] if eqn is not None and eqn.primitive in NUMPY_VIEWS else None


_warned_arguments: set = set()

# A loop this long that must be unrolled says why, since its jaxpr and compile time grow
# with every step.
LONG_LOOP = 100
_warned_loops: set = set()


def _warn_unrolled(source, node, length: int, reason: S2SError) -> None:
    info = source.info(node)
    key = (info.file, info.line, info.col)
    if key in _warned_loops:
        return
    _warned_loops.add(key)
    import warnings
    where = f" (at line {reason.where.line})" if reason.where is not None else ""
    warnings.warn_explicit(
        f"this loop of {length} steps is unrolled into {length} copies of its body: it could "
        f"not be staged as one loop because {reason.what}{where}. Keep the loop index an array "
        "(index arrays, not Python lists) and the carried values of one type to make it one loop, "
        "or write `s2s.unroll(...)` around the iterable to ask for unrolling",
        UserWarning, info.file, info.line)


def _warn_argument_not_written_back(source, target, shown: str) -> None:
    """Once per place: an argument updated in place changes only the function's copy."""
    info = source.info(target)
    key = (info.file, info.line, info.col)
    if key in _warned_arguments:
        return
    _warned_arguments.add(key)
    import warnings
    warnings.warn_explicit(
        f"`{shown}[...] = ...` updates an argument of {source.name} in place: s2s changes the "
        "function's copy only, the caller's array is not written back (NumPy would change it)",
        UserWarning, info.file, info.line)


_MUTATING_METHODS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                     "add", "discard", "popitem", "sort", "reverse"}


def _mutates_containers(statements, variables: dict) -> bool:
    """Whether statements change Python objects in place (`out.append(h)`, `d[k] = v`,
    `obj.attr = v`): a staged body would leak its values into them, so such loops unroll.
    `x[i] = v` on a staged array is not one: it rebinds `x` (see `_updated_arrays`)."""
    for node in _walk_statements(statements):
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) \
                and node.func.attr in _MUTATING_METHODS:
            return True
        if isinstance(node, gast.Subscript) and isinstance(node.ctx, (gast.Store, gast.Del)):
            if not (isinstance(node.value, gast.Name) and isinstance(variables.get(node.value.id), Tracer)):
                return True
        if isinstance(node, gast.Attribute) and isinstance(node.ctx, (gast.Store, gast.Del)):
            return True
    return False


def _changes_existing_objects(statements, variables: dict) -> bool:
    """Whether statements change, in place, Python objects bound to names in `variables`
    (made before them), or attributes; not counting nested functions, nor objects made
    by the statements themselves."""
    for node in walk_scope(statements):
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) \
                and node.func.attr in _MUTATING_METHODS and isinstance(node.func.value, gast.Name) \
                and node.func.value.id in variables:
            return True
        if isinstance(node, gast.Subscript) and isinstance(node.ctx, (gast.Store, gast.Del)) \
                and isinstance(node.value, gast.Name) and node.value.id in variables \
                and not isinstance(variables[node.value.id], Tracer):
            return True
        if isinstance(node, gast.Attribute) and isinstance(node.ctx, (gast.Store, gast.Del)):
            return True
    return False


def _updated_arrays(statements, variables: dict) -> list[str]:
    """Names of staged arrays the statements update in place (`h[t + 1] = ...`): each is
    rebound to its updated copy, so a branch or loop passes it on."""
    names = []
    for node in _walk_statements(statements):
        if isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Store) \
                and isinstance(node.value, gast.Name) and isinstance(variables.get(node.value.id), Tracer) \
                and node.value.id not in names:
            names.append(node.value.id)
    return names


def _zeros_like_type(aval):
    """Zeros of `aval`'s type: a Python number when it is weakly typed (`y = 3`), so it
    still takes the type of whatever it meets, as the value it stands for would."""
    if aval.weak_type and aval.shape == ():
        return aval.dtype.type(0).item()
    return np.zeros(aval.shape, aval.dtype)


def _hints(names) -> list[str]:
    """Names as they should read in emitted code (flags by their hints)."""
    return [_FLAG_HINTS.get(n, n) for n in names]


def _has_return(node) -> bool:
    """Whether `node` holds a `return` of the function it is in (not of a nested one)."""
    return any(isinstance(n, gast.Return) for n in walk_scope([node]))


def _returns(statements) -> bool:
    return any(isinstance(n, (gast.Return, gast.Yield)) for n in _walk_statements(statements))


def _loop_jumps(statements) -> set[str]:
    """The `break`s and `continue`s of the loop the statements are in: not those of loops
    nested in them (whose `else` blocks do belong to it), nor of nested functions."""
    found = set()
    stack = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, gast.Break):
            found.add("break")
        elif isinstance(node, gast.Continue):
            found.add("continue")
        elif isinstance(node, (gast.For, gast.AsyncFor, gast.While)):
            stack.extend(node.orelse)
        elif not isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)):
            stack.extend(gast.iter_child_nodes(node))
    return found


def _region(statements):
    """A made-up `if` around statements, as the region whose def-use chains say what the
    statements pass on."""
    return gast.If(test=gast.Constant(value=True, kind=None), body=list(statements), orelse=[])


def _walk_statements(statements):
    for statement in statements:
        yield from gast.walk(statement)


def _carriable(values) -> bool:
    """Whether a staged loop can carry these values (not Python ints, bools or strings,
    which code after the loop may need static)."""
    return not any(isinstance(v, (bool, int, str)) or not _is_stageable(v) for v in values)


def _is_stageable(value) -> bool:
    """Arrays, staged values and floats (and tuples of them) can be a scan's carry."""
    if isinstance(value, (tuple, list)):
        return all(_is_stageable(v) for v in value)
    return isinstance(value, (Tracer, np.ndarray, np.generic, float, complex))


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def _is_user_function(fn) -> bool:
    """Pure-Python functions outside NumPy, s2s and the standard library are staged."""
    if not isinstance(fn, types.FunctionType):
        return False
    module = fn.__module__ or ""
    if module.split(".")[0] in ("numpy", "s2s", "s2s_runtime"):
        return False
    return not fn.__code__.co_filename.startswith(_STDLIB)


def _static_key(value):
    """A hashable stand-in for an argument, for detecting unbounded recursion."""
    if isinstance(value, Tracer):
        return ("staged", value.aval)
    try:
        hash(value)
        return value
    except TypeError:
        return ("unhashable", id(value))
