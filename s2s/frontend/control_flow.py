"""Control flow: `if`, `return`, `break` and `continue`, and the blocks staged as bodies.

On a Python value an `if` just runs the branch it takes. On a staged array it becomes a
`cond` (`structured.switch`): the names a branch passes on (assigned in it and read after
it, or by a loop's next iteration: the def-use chains say which) become the cond's
outputs; everything else a branch reads it takes from the enclosing function directly
(closure conversion makes those explicit operands). An `if` on an array that can `return`
takes the statements after it into its branches, so each path ends in its own `return`.
A `with np.errstate(...)` block runs its body under that errstate (`stmt_With`).
`return`, `break` and `continue` are exceptions (`Jump`) that leave the blocks being run;
in a staged loop `break` and `continue` clear flags instead (see `FLAG_HINTS`). The loops
themselves are in `loops.py`.
"""
from __future__ import annotations

from typing import Any, Protocol

import ast
import numpy as np

from s2s.errors import ConcretizationError, S2SError, StagingError, UnsupportedSyntaxError
from s2s.frontend import structured
from s2s.frontend.in_place import (changes_existing_objects, mutates_containers, updated_arrays,
                                   walk_statements)
from s2s.frontend.source import FunctionSource, under_errstate, walk_scope
from s2s.frontend.staged_once import staging_once
from s2s.numpy_api import NUMPY_IMPLS
from s2s.staging import Tracer, current_builder
from s2s.tree import tree_leaves, tree_map


class Jump(Exception):
    """`return`, `break` or `continue` leaving a block; `node` is the statement."""

    def __init__(self, node=None):
        self.node = node


class Return(Jump):
    def __init__(self, value, node=None):
        super().__init__(node)
        self.value = value


class Break(Jump):
    pass


class Continue(Jump):
    pass


# A `break` or `continue` in a staged loop clears a flag instead of leaving the body, and
# the statements after it run under `if flag:`. `break` clears `running`, which the loop
# carries and stops on; `continue` clears `live`, which is set again at the start of each
# iteration. Flags live among the variables under names no Python variable can have; the
# hints name them in emitted code.
FLAG_HINTS = {"<running>": "running", "<live>": "live"}
RUNNING, LIVE = FLAG_HINTS


def direct_body(run, names):
    """`run` as a function with parameters named `names` (made unique: they are hints)."""
    unique: list[str] = []
    for name in names:
        candidate, n = name, 0
        while candidate in unique:
            n += 1
            candidate = f"{name}_{n}"
        unique.append(candidate)
    return structured.Direct(run, unique)


class ControlFlowNeeds(Protocol):
    """What ControlFlow calls on the walker's core (the rule is in FunctionWalker's
    docstring)."""

    scope: Any                  # the activation (walker.Scope): saved and restored around a staged body
    source: FunctionSource      # locates errors; its def-use chains say what a branch passes on
    in_staged_loop: bool        # whether `break` and `continue` set their loop's flags

    def assign_name(self, name: str, value: Any) -> None:
        """Binds a cond's results, and a staged body's parameters, to their names."""

    def block(self, statements: list[ast.stmt]) -> None:
        """Runs a branch's statements: statement dispatch is the core's."""

    def stmt(self, node: ast.stmt) -> None:
        """Runs one statement where what follows depends on it: the rest of a function
        after an `if` that can return, of a staged loop's body after a jump."""


class ControlFlow:
    """The walker's branches and jumps (a mixin of FunctionWalker, needing
    `ControlFlowNeeds` of it): `if` on Python values and on arrays, `return` (also from
    inside an `if` on an array), `break` and `continue`, and running a block as the body of
    a staged branch or loop (`_body`, `_run_block`)."""

    def stmt_Return(self, node):
        raise Return(None if node.value is None else self.expr(node.value), node)

    def stmt_If(self, node):
        test = self.expr(node.test)
        if isinstance(test, Tracer):
            return self._staged_if(node, test)
        taken = node.body if self.truth(test, node.test, "an `if` condition") else node.orelse
        # In a staged loop a jump under an array condition in here guards what follows it.
        self._guarded_block(taken) if self.in_staged_loop else self.block(taken)

    def stmt_With(self, node):
        """`with np.errstate(...):` stages its body as running under that errstate (every
        equation it stages, in functions it calls too, records it: SourceInfo.errstate), so
        the emitted Python writes the block again and the NumPy backend warns or raises as
        NumPy would; XLA reports no floating-point errors. Other context managers would run
        once, while staging: refused."""
        settings = {}
        for item in node.items:
            settings.update(self._errstate_settings(item))
        with under_errstate(settings):
            self._guarded_block(node.body) if self.in_staged_loop else self.block(node.body)

    def _errstate_settings(self, item) -> dict:
        """The keyword arguments of `with np.errstate(...)`, checked as NumPy checks them."""
        call = item.context_expr
        if not (isinstance(call, ast.Call) and self.expr(call.func) is np.errstate):
            raise UnsupportedSyntaxError(
                "`with` blocks other than `with np.errstate(...)` are not supported in staged functions: "
                "the context manager would run once, when the function is staged",
                "move the `with` outside the staged function", self.source.info(call))
        if call.args or item.optional_vars is not None:
            raise UnsupportedSyntaxError("np.errstate takes its settings by keyword, and a staged "
                                         "function cannot keep it under a name (`as`)",
                                         "write `with np.errstate(divide='ignore'):`", self.source.info(call))
        settings = {}
        for keyword in call.keywords:
            value = self.expr(keyword.value)
            settings.update(value if keyword.arg is None else {keyword.arg: value})
        if "call" in settings or not all(isinstance(v, str) or v is None for v in settings.values()):
            raise UnsupportedSyntaxError(
                "np.errstate in a staged function takes the handling of each kind of error as a "
                "string ('ignore', 'warn', 'raise', 'print', 'log'), not `call=`",
                "set the error callback outside the staged function", self.source.info(call))
        try:
            with np.errstate(**settings):
                pass
        except (TypeError, ValueError) as error:
            raise StagingError(f"np.errstate refuses these settings: {error}",
                               "write `np.errstate(divide='ignore', invalid='warn')`, each kind "
                               "'ignore', 'warn', 'raise', 'print' or 'log'", self.source.info(call)) from None
        return settings

    def _tail_block(self, statements):
        """Statements that end the function: its body, and the paths through an `if` that
        can return. An `if` on an array with a `return` in it takes the statements after it
        into its branches, so each path ends in its own `return` and the `if` is one cond
        of the value returned (`if r < delta: return r * r` then `return delta * r`)."""
        for k, statement in enumerate(statements):
            if not (isinstance(statement, ast.If) and _has_return(statement)):
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
        """Raises Return with the cond of what each path through `node` and `rest` returns."""
        if changes_existing_objects(node.body + node.orelse + rest, self.scope.vars):
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
                    with staging_once("a path through an `if` on an array"):
                        self._tail_block(statements)
                except Return as returned:
                    return returned.value
                finally:
                    self.scope.vars = saved
                return None
            return direct_body(run, [])
        with current_builder().at(self.source.info(node)):
            value = structured.switch(pred, [path(node.orelse + rest), path(node.body + rest)])
        for leaf in tree_leaves(value):
            if isinstance(leaf, Tracer) and leaf.variable.hint is None:
                leaf.variable.hint = "result"
        raise Return(value, node)

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
        except Return as jump:
            raise UnsupportedSyntaxError(f"`return` inside {what}",
                                         "assign the result to a name and return after it",
                                         self.source.info(jump.node)) from None
        except (Break, Continue) as jump:
            if self.in_staged_loop:
                self.scope.vars[RUNNING if isinstance(jump, Break) else LIVE] = np.bool_(False)
                return
            keyword = "break" if isinstance(jump, Break) else "continue"
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
            if not rest or not loop_jumps([statement]):
                continue
            flags = [self.scope.vars[f] for f in FLAG_HINTS if f in self.scope.vars]
            staged = [f for f in flags if isinstance(f, Tracer)]
            if staged:
                go_on = staged[0] if len(staged) == 1 else NUMPY_IMPLS[np.logical_and](*staged)
                self._stage_branches(region_around(rest), rest, [], go_on, rest[0], guard=True)
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
                with staging_once(what):
                    self._run_block(statements, what)
                    return results()
            finally:
                self.scope.vars = saved
        return direct_body(run, hints_of(names))

    def _staged_if(self, node, test):
        pred = self._scalar_test(test, node.test, "an `if` condition")
        self._stage_branches(node, node.body, node.orelse, pred, node)

    def _stage_branches(self, region, body, orelse, pred, node, guard: bool = False):
        """`if pred: body else: orelse` as a cond. `region` is the AST node holding both
        (the `if`, or, with `guard`, a made-up one around the statements after a `break` or
        `continue`, run under the loop's flags: there a name first assigned in them gets
        zeros on the path that skips them, which nothing reads, since what follows is
        skipped too)."""
        if mutates_containers(body + orelse, self.scope.vars):
            raise UnsupportedSyntaxError(
                "an `if` on an array whose branches change Python lists, dicts or attributes",
                "assign new values to names in the branches instead (they become the `if`'s "
                "results), or choose with np.where", self.source.info(node))
        outputs = self.source.used_outside(region, self.source.stored_names(body + orelse))
        outputs += [n for n in updated_arrays(body + orelse, self.scope.vars) if n not in outputs]
        if self.in_staged_loop and loop_jumps(body + orelse):
            outputs += [f for f in FLAG_HINTS if f in self.scope.vars]
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
            taken = structured.staged_branch(taken, "an `if` on an array")
            placeholders = {n: tree_map(_zeros_like_type, t)
                            for n, t in zip(outputs, taken.out_types) if n in unset}
        branches = [self._body((), orelse, results_or(placeholders), "an `if` on an array"), taken]
        with current_builder().at(self.source.info(node)):
            values = structured.switch(pred, branches)
        for name, value in zip(outputs, values):
            self.assign_name(name, value)

    def stmt_Break(self, node):
        raise Break(node)

    def stmt_Continue(self, node):
        raise Continue(node)


def _zeros_like_type(aval):
    """Zeros of `aval`'s type: a Python number when it is weakly typed (`y = 3`), so it
    still takes the type of whatever it meets, as the value it stands for would."""
    if aval.weak_type and aval.shape == ():
        return aval.dtype.type(0).item()
    return np.zeros(aval.shape, aval.dtype)


def hints_of(names) -> list[str]:
    """Names as they should read in emitted code (flags by their hints)."""
    return [FLAG_HINTS.get(n, n) for n in names]


def _has_return(node) -> bool:
    """Whether `node` holds a `return` of the function it is in (not of a nested one)."""
    return any(isinstance(n, ast.Return) for n in walk_scope([node]))


def can_return(statements) -> bool:
    return any(isinstance(n, (ast.Return, ast.Yield)) for n in walk_statements(statements))


def loop_jumps(statements) -> set[str]:
    """The `break`s and `continue`s of the loop the statements are in: not those of loops
    nested in them (whose `else` blocks do belong to it), nor of nested functions."""
    found = set()
    stack = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            found.add("break")
        elif isinstance(node, ast.Continue):
            found.add("continue")
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            stack.extend(node.orelse)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return found


def region_around(statements):
    """A made-up `if` around statements, as the region whose def-use chains say what the
    statements pass on."""
    return ast.If(test=ast.Constant(value=True), body=list(statements), orelse=[])
