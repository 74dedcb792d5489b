"""Loops: `while` and `for`, unrolled while staging or staged as one loop.

A loop on Python values (`for layer in layers`, `while n > 1` on an int) runs while
staging: one copy of its body per iteration. A `while` on an array test is one
`while_loop`; a `for` over `range(n)` or an array is one `scan` (a bounded while_loop if it
can `break`, so reverse mode still works), unless its index is used as a Python value or
its carried values change type, in which case it is unrolled, with a warning when it is
long. A `for` over a range with an array bound is a while_loop on its index. The names a
body passes on to the next iteration or past the loop (the def-use chains say which) are
the loop's carry.
"""
from __future__ import annotations

import itertools
import types
import warnings
from typing import Any, Protocol

import ast
import numpy as np

from s2s import dtypes
from s2s.errors import ConcretizationError, S2SError, StagingError, UnsupportedSyntaxError
from s2s.frontend import structured
from s2s.frontend.checkpointed import checkpointed
from s2s.frontend.control_flow import (FLAG_HINTS, LIVE, RUNNING, Break, Continue, can_return, direct_body,
                                       hints_of, loop_jumps, region_around)
from s2s.frontend.guards import record_items
from s2s.frontend.in_place import mutates_containers, updated_arrays, walk_statements
from s2s.frontend.source import FunctionSource
from s2s.frontend.staged_once import ChecksItsOwnStaging, checked_iterable, is_iterator, staging_once
from s2s.numpy_api import NUMPY_IMPLS
from s2s.staging import Tracer, current_builder

# What to write instead of a jump under an array test, in a `while` on a Python value.
_PYTHON_WHILE_JUMP_HELP = {
    "break": "a `while` on a Python value runs while staging, so it cannot stop on an array: put "
             "the array condition in the `while` (`while not done:`), or bound the loop: "
             "`for _ in range(n): ... if done: break`",
    "continue": "a `while` on a Python value runs while staging, so it cannot skip the rest of a "
                "pass on an array: put that rest under `if not skip:` instead",
}


# Iterators whose items are made as they are taken, possibly without end: a loop over one
# that stops on an array condition cannot take them all while staging.
_ENDLESS_OR_LAZY = (types.GeneratorType, ChecksItsOwnStaging, itertools.count, itertools.cycle, itertools.repeat)

class LoopsNeeds(Protocol):
    """What Loops calls on the walker's core (the rule is in FunctionWalker's docstring)."""

    scope: Any                  # the activation (walker.Scope): saved and restored around each staged step
    source: FunctionSource      # locates errors; its def-use chains say what a loop carries
    in_staged_loop: bool        # set while a staged loop's body is staged, cleared in a static loop's

    def assign(self, target: ast.expr, value: Any) -> None:
        """Binds the loop's target (any target: `for i, row in ...`) to each item, and to
        the last one after a staged loop."""

    def assign_name(self, name: str, value: Any) -> None:
        """Binds a staged loop's carried values and results to their names."""

    def block(self, statements: list[ast.stmt]) -> None:
        """Runs a static loop's body and a loop's `else`: statement dispatch is the core's."""


class Loops:
    """The walker's loops (a mixin of FunctionWalker, needing `LoopsNeeds` of it, and
    using ControlFlow's staged blocks): `while` and `for`, each unrolled or staged as one
    loop."""

    def _loop_body(self, body) -> bool:
        """Runs one iteration of a static loop; False when it ends with `break`."""
        in_staged_loop, self.in_staged_loop = self.in_staged_loop, False
        try:
            self.block(body)
        except Break:
            return False
        except Continue:
            pass
        finally:
            self.in_staged_loop = in_staged_loop
        return True

    def stmt_While(self, node):
        builder = current_builder()
        mark = len(builder.eqns) if builder is not None else 0
        test = self.expr(node.test)
        if isinstance(test, Tracer):
            builder.drop_equations_from(mark)   # the loop evaluates its test itself
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
        carry += [n for n in updated_arrays(body, self.scope.vars) if n not in carry]
        return [n for n in carry if n not in loop_targets]

    def _staged_while(self, node):
        """A `while` on an array test as a while_loop (on `running and test` if it can
        `break`)."""
        jumps = loop_jumps(node.body)
        carry = self._loop_carry(node, node.body)
        init = self._values_of(carry, node, "this `while` loop")
        if "break" in jumps:
            carry, init = carry + [RUNNING], init + (np.bool_(True),)

        def condition():
            holds = self._scalar_test(self.expr(node.test), node.test, "a `while` condition")
            if "break" not in jumps:
                return holds
            return NUMPY_IMPLS[np.logical_and](self.scope.vars[RUNNING], holds)
        test = self._body(carry, (), condition, "the test of a `while` on an array")
        keep_going = direct_body(lambda values: test(*values), hints_of(carry))
        step = direct_body(lambda values: self._iteration(node, carry, jumps, values), hints_of(carry))
        with current_builder().at(self.source.info(node)):
            results = structured.while_loop(keep_going, step, init)
        self._end_loop(node, dict(zip(carry, results)))

    def _iteration(self, node, carry, jumps, values, item=None):
        """Stages one iteration of a staged loop: binds the carried names (`break`'s flag
        among them if the loop has one) and the loop's target, runs the body with `break`
        and `continue` setting flags, and returns the carried names' new values."""
        saved, in_staged_loop = dict(self.scope.vars), self.in_staged_loop
        try:
            for flag in FLAG_HINTS:      # an enclosing loop's flags are not this loop's
                self.scope.vars.pop(flag, None)
            for name, value in zip(carry, values):
                self.assign_name(name, value)
            if "continue" in jumps:
                self.scope.vars[LIVE] = np.bool_(True)
            if item is not None:
                self.assign(node.target, item)
            self.in_staged_loop = True
            with staging_once("a loop staged as one loop"):
                self._run_block(node.body, "a staged loop")
            return tuple(self.scope.lookup(n, node) for n in carry)
        finally:
            self.scope.vars, self.in_staged_loop = saved, in_staged_loop

    def _end_loop(self, node, results: dict, last_item=None):
        """Binds a staged loop's results and (from `last_item()`) its loop variable, then
        runs its `else` block unless it broke."""
        running = results.pop(RUNNING, np.bool_(True))
        for name, value in results.items():
            self.assign_name(name, value)
        if last_item is not None:
            self._bind_loop_variable(node, last_item)
        if not node.orelse:
            return
        if isinstance(running, Tracer):
            self._stage_branches(region_around(node.orelse), node.orelse, [], running, node.orelse[0])
        elif running:
            self.block(node.orelse)

    def _loop_variable_read_after(self, node) -> bool:
        """Whether the loop variable is read after the loop or in its `else`."""
        targets = self.source.stored_names([node.target])
        read_in_else = any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in targets
                           for n in walk_statements(node.orelse))
        return read_in_else or bool(self.source.used_outside(node, targets))

    def _bind_loop_variable(self, node, last_item):
        """Python leaves the loop variable at the last item the loop reached: bound when
        something reads it after the loop (or in its `else`)."""
        if not self._loop_variable_read_after(node):
            return
        targets = self.source.stored_names([node.target])
        rebound = [t for t in targets if t in self.source.stored_names(node.body)]
        if rebound:
            raise StagingError(
                f"`{rebound[0]}` is this loop's variable, the body assigns it too, and it is read "
                "after the loop: a staged loop does not carry its variable",
                f"give the body's new value another name than `{rebound[0]}`", self.source.info(node))
        self.assign(node.target, last_item())

    def stmt_For(self, node):
        iterable = self._range_call(node.iter)
        if isinstance(iterable, tuple):
            return self._staged_range_for(node, *iterable)
        if iterable is None:
            iterable = self.expr(node.iter)
        if isinstance(iterable, structured.unroll):        # the user asked for the loop unrolled
            iterable = iterable.iterable
        elif isinstance(iterable, checkpointed):
            return self._checkpointed_for(node, iterable)
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
        self._unrolled_for(node, iterable)

    def _checkpointed_for(self, node, iterable):
        """`for t in s2s.checkpointed(range(n), k):` is one scan with `checkpoints=k`; a loop
        that cannot be one scan is an error, not unrolled: unrolled, it would keep every
        step's residuals, which is what the user asked to avoid."""
        if "break" in loop_jumps(node.body):
            raise StagingError("a checkpointed loop cannot `break`: it runs all its steps",
                               "move the condition into the body (`x = np.where(done, x, step(x))`), "
                               "or drop s2s.checkpointed", self.source.info(node))
        if len(iterable) == 0:                   # nothing to run, nothing to keep
            return self._unrolled_for(node, iterable.iterable)
        failure = self._staged_for(node, iterable.iterable, iterable.checkpoints)
        if failure is not None:
            raise StagingError(f"this checkpointed loop cannot be staged as one loop: {failure.what}",
                               "fix that, or drop s2s.checkpointed to let the loop unroll",
                               self.source.info(node))

    def _static_iterator(self, iterable):
        """The items of a loop run while staging (a generator's `yield from` too), a list's
        or tuple's guarded (`for layer in self.layers`: each layer's attributes)."""
        if isinstance(iterable, Tracer) and not iterable.shape:
            raise StagingError("iteration over a 0-d array",
                               "loop over a 1-d or higher array, or over range(n)")
        try:
            iterator = iter(checked_iterable(iterable))
        except TypeError as e:
            raise StagingError(f"cannot loop over this value: {e}",
                               "loop over a list, tuple, range or array") from None
        if isinstance(iterable, (list, tuple)):
            record_items(iterable, enumerate(iterable))
        return iterator

    def _unrolled_for(self, node, iterable):
        iterator = self._static_iterator(iterable)
        if loop_jumps(node.body) and not can_return(node.body):
            return self._masked_unrolled_for(node, iterator, self._items_outlive_loop(node, iterable))
        for item in iterator:
            self.assign(node.target, item)
            if not self._loop_body(node.body):
                return
        self.block(node.orelse)

    def _items_outlive_loop(self, node, iterable) -> bool:
        """Whether a `break` must leave the items after it to Python: the loop runs over an
        iterator that may be read after it (`for c in it:`, `enumerate(it)`), or one that
        may never end (a generator, `itertools.count()`)."""
        if not is_iterator(iterable):
            return False   # a container: a new iterator of it, which nothing else sees
        if not isinstance(node.iter, ast.Call) or isinstance(iterable, _ENDLESS_OR_LAZY):
            return True
        return any(isinstance(arg, ast.Name) and is_iterator(self.scope.vars.get(arg.id))
                   for arg in node.iter.args)

    def _masked_unrolled_for(self, node, iterator, items_outlive_loop: bool):
        """An unrolled `for` (its steps are known while staging) that can `break` or
        `continue`, under array conditions too. Each step runs as a staged loop's body does,
        its jumps clearing the `running` and `live` flags; once `running` is an array (a
        `break` under an array condition), every later step runs under `if running:`, so
        after the break the steps leave every value unchanged: a masked carry."""
        jumps = loop_jumps(node.body)
        outer_flags = {flag: self.scope.vars.pop(flag) for flag in FLAG_HINTS if flag in self.scope.vars}
        in_staged_loop, self.in_staged_loop = self.in_staged_loop, True
        self.scope.vars[RUNNING] = np.bool_(True)
        try:
            for item in iterator:
                running = self.scope.vars[RUNNING]
                if isinstance(running, Tracer):
                    self._check_loop_variable_unread(node)
                    if items_outlive_loop:
                        raise UnsupportedSyntaxError(
                            "a loop over an iterator (a generator, or one the code can read after the "
                            "loop) that can `break` on an array condition: staging it takes every item, "
                            "where Python leaves those after the break in the iterator (and one that "
                            "never ends would be staged without end)",
                            "loop over a list of the items (`for c in list(it)`, or "
                            "`itertools.islice(gen, n)` for an endless one), or over `range(n)`",
                            self.source.info(node))
                self.assign(node.target, item)
                if "continue" in jumps:
                    self.scope.vars[LIVE] = np.bool_(True)
                if isinstance(running, Tracer):
                    self._stage_branches(region_around(node.body), node.body, [], running, node.body[0],
                                         guard=True)
                else:
                    self._run_block(node.body, "a loop")
                stopped = self.scope.vars[RUNNING]
                if not isinstance(stopped, Tracer) and not stopped:
                    break   # before taking the next item, which Python's `break` leaves in an iterator
            running = self.scope.vars[RUNNING]
        finally:
            for flag in FLAG_HINTS:
                self.scope.vars.pop(flag, None)
            self.scope.vars.update(outer_flags)
            self.in_staged_loop = in_staged_loop
        if isinstance(running, Tracer):
            if node.orelse:
                self._stage_branches(region_around(node.orelse), node.orelse, [], running, node.orelse[0])
        elif running:
            self.block(node.orelse)

    def _check_loop_variable_unread(self, node):
        """Python leaves the loop variable at the item a `break` stopped on, which an
        unrolled loop with a `break` on an array does not know while staging."""
        if self._loop_variable_read_after(node):
            targets = self.source.stored_names([node.target])
            raise UnsupportedSyntaxError(
                f"`{targets[0]}`, the variable of a loop unrolled while staging that can `break` on "
                "an array condition, is read after the loop: which item the loop stopped on is "
                "only known when the function runs",
                "assign what you need to another name in the body, before the `break`",
                self.source.info(node))

    def _staged_for(self, node, iterable, checkpoints=None) -> S2SError | None:
        """`for i in range(n)` or `for row in x` as one scan (one bounded while_loop if it
        can `break`), so a long loop stays one equation. When the loop must be unrolled
        instead, nothing is staged and the reason is returned: its index is used as a
        Python value (`params[i]` of a list, `range(i)`), its values change type from one
        iteration to the next, it mutates Python containers or carries Python ints, it
        can `return`, or staging it would change a Python object made before it once
        rather than on every pass (`next(it)`: staged_once.py)."""
        length = len(iterable) if isinstance(iterable, range) else iterable.shape[0]
        targets = self.source.stored_names([node.target])
        carry = self._loop_carry(node, node.body, targets)
        reason = self._unstageable_loop(node, carry, length)
        if reason is not None:
            return StagingError(reason)
        init = tuple(self.scope.vars[name] for name in carry)
        jumps = loop_jumps(node.body)
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
                    values, _ = structured.scan(direct_body(step, hints_of(carry) + targets[:1]), init, xs,
                                                checkpoints=checkpoints)
                    results, last = dict(zip(carry, values)), length - 1
                else:
                    results, last = self._breaking_for(node, carry, init, jumps, iterable, xs, length)
        except S2SError as failure:
            builder.drop_equations_from(mark)   # unroll instead; drop what the attempt staged
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
        if mutates_containers(node.body, self.scope.vars):
            return "its body changes Python lists, dicts or attributes"
        if can_return(node.body):
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
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "range"
                and not expr.keywords and 1 <= len(expr.args) <= 3
                and not any(isinstance(a, ast.Starred) for a in expr.args)
                and self.scope.lookup("range", expr.func) is range):
            return None
        bounds = [self.expr(a) for a in expr.args]
        staged = [b for b in bounds if isinstance(b, Tracer)]
        if not staged:
            return range(*bounds)
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
        (like lax.fori_loop with traced bounds)."""
        jumps = loop_jumps(node.body)
        carry = self._loop_carry(node, node.body, self.source.stored_names([node.target]))
        init = self._values_of(carry, node, "this `for` loop")
        if "break" in jumps:
            carry, init = carry + [RUNNING], init + (np.bool_(True),)
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
        names = ["i"] + hints_of(carry)
        with current_builder().at(self.source.info(node)):
            after, values = structured.while_loop(direct_body(keep_going, names),
                                                  direct_body(step_to_next, names), (first, init))
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
        carry = carry + [RUNNING]

        def item_at(k):
            if isinstance(iterable, range):     # i = start + k * step, without reading xs
                return k if (iterable.start, iterable.step) == (0, 1) else iterable.start + k * iterable.step
            return xs[k]

        if isinstance(iterable, range) and not self.source.is_read(node.target):
            def step(values):     # `for _ in range(n):` needs no position
                return self._iteration(node, carry, jumps, values)
            values = structured.while_loop(direct_body(lambda values: values[-1], hints_of(carry)),
                                           direct_body(step, hints_of(carry)), init + (np.bool_(True),),
                                           max_iters=length)
            return dict(zip(carry, values)), None

        def keep_going(state):
            return state[1][-1]

        def step_at(state):
            k, values = state
            return k + 1, self._iteration(node, carry, jumps, values, item_at(k))
        position = np.zeros((), xs.dtype if isinstance(iterable, range) else dtypes.default_int())
        names = ["k"] + hints_of(carry)
        steps, values = structured.while_loop(direct_body(keep_going, names), direct_body(step_at, names),
                                              (position, init + (np.bool_(True),)), max_iters=length)
        return dict(zip(carry, values)), steps - 1


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
    where = f" (at line {reason.where.line})" if reason.where is not None else ""
    warnings.warn_explicit(
        f"this loop of {length} steps is unrolled into {length} copies of its body: it could "
        f"not be staged as one loop because {reason.what}{where}. Keep the loop index an array "
        "(index arrays, not Python lists) and the carried values of one type to make it one loop, "
        "or write `s2s.unroll(...)` around the iterable to ask for unrolling",
        UserWarning, info.file, info.line)


def _carriable(values) -> bool:
    """Whether a staged loop can carry these values (not Python ints, bools or strings,
    which code after the loop may need static)."""
    return not any(isinstance(v, (bool, int, str)) or not _is_stageable(v) for v in values)


def _is_stageable(value) -> bool:
    """Arrays, staged values and floats (and tuples of them) can be a scan's carry."""
    if isinstance(value, (tuple, list)):
        return all(_is_stageable(v) for v in value)
    return isinstance(value, (Tracer, np.ndarray, np.generic, float, complex))
