"""Generators: a function with `yield` in it, called in a staged function, stages lazily.

Calling a generator function gives a Python generator, as it does in Python: nothing of
its body runs until an item is asked for (by a `for` over it, `zip`, `next`, `list` ...),
and then its body is staged up to the next `yield`, into whichever builder is active, and
the staged value is the item. So an endless `while True: yield` zipped with a finite
`range` stages only the items taken, items are staged values that gradients flow through,
and the emitted code holds the generator's body inlined where its items were used.

The walker runs statements by recursion, which cannot stop halfway. So the statements on
the way to a `yield` (the loops, `if`s and `else`s around it) are run by generator
versions of their runners here, which suspend the walk at each `yield`; every statement
holding no `yield` runs as the walker runs it. How many items a generator yields is
decided while staging, so a loop or `if` around a `yield` tests static values, and a
`yield` stands as a statement of its own (`yield x`, `y = yield x`, `yield from xs`).
A generator expression is lazy the same way (its steps: `_comprehension_items`).
"""
from __future__ import annotations

from typing import Any, Protocol

import ast

from s2s.errors import StagingError, UnsupportedSyntaxError
from s2s.frontend.control_flow import Break, Continue, Return
from s2s.frontend.source import FunctionSource, walk_scope
from s2s.frontend.staged_once import ChecksItsOwnStaging
from s2s.staging import Tracer, current_builder

_YIELDS = (ast.Yield, ast.YieldFrom)


def is_generator_function(node) -> bool:
    """Whether a def's own body (not a nested function's) holds a `yield`."""
    return isinstance(node, ast.FunctionDef) and any(isinstance(n, _YIELDS) for n in walk_scope(node.body))


def _holds_yield(statement) -> bool:
    return any(isinstance(n, _YIELDS) for n in walk_scope([statement]))


def generator_result_error(source: FunctionSource) -> UnsupportedSyntaxError:
    """The error for a generator function given to a transform itself: what it returns is
    an iterator, never arrays. Pointed at its first `yield`."""
    first = next(n for n in walk_scope(source.node.body) if isinstance(n, _YIELDS))
    keyword = "`yield`" if isinstance(first, ast.Yield) else "`yield from`"
    return UnsupportedSyntaxError(
        f"{keyword} makes {source.name} a generator, which returns an iterator, not arrays",
        f"return a tuple of the values instead of yielding them, or call the generator inside "
        f"the function you transform (`tuple({source.node.name}(x))`, `for item in {source.node.name}(x):`)",
        source.info(first))


def _count_depends_on_array(what: str) -> UnsupportedSyntaxError:
    return UnsupportedSyntaxError(
        f"{what}, so how many items this generator yields would depend on an array's value, known "
        "only when the function runs; each item is staged where it is used, so their number is "
        "fixed while staging",
        "test a Python value there (a static int, a shape), e.g. `for _ in range(max_items):`, "
        "and choose each item's value with np.where(condition, a, b); or build the items as one "
        "array with a staged loop and return it")


class StagedGenerator(ChecksItsOwnStaging):
    """What calling a generator function in a staged function gives: a Python iterator
    (`send`, `throw` and `close` too) over the items its body stages as they are asked for.

    An item is staged into the builder the generator was made in. Asked for inside a body
    staged once for however many times it runs (a loop staged as one, a branch of an `if`
    on an array), the generator would move on once while staging, not once a run, so it
    refuses before it moves: a `for` loop then unrolls instead (its staging falls back),
    anything else says what to write."""

    __slots__ = ("_steps", "_home", "_what")

    def __init__(self, steps, what: str):
        self._steps = steps
        self._home = current_builder()
        self._what = what   # for messages: "the generator unpack_layers", "a generator expression"

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        if current_builder() is not self._home:
            raise StagingError(
                f"an item of {self._what} is asked for inside a body s2s stages once "
                "for all its runs (a loop staged as one loop, a branch of an `if` on an array): the "
                "generator would move on once, while staging, not once each time the body runs",
                "take the items before it (`items = list(gen)`, `first = next(gen)`) and index them "
                "there, or loop over the generator itself (`for item in gen:`), which runs while staging")
        return self._steps.send(value)

    def throw(self, *exception):
        return self._steps.throw(*exception)

    def close(self):
        self._steps.close()

    def __repr__(self):
        return f"<staged {self._what}>"


class GeneratorsNeeds(Protocol):
    """What Generators calls on the walker's core (the rule is in FunctionWalker's
    docstring)."""

    source: FunctionSource      # locates errors

    def assign(self, target: ast.expr, value: Any) -> None:
        """Binds a loop's target to each item, and `name = yield x` to what was sent."""

    def stmt(self, node: ast.stmt) -> None:
        """Runs a statement holding no `yield`: statement dispatch is the core's."""


class Generators:
    """The walker's generators (a mixin of FunctionWalker, needing `GeneratorsNeeds` of
    it, and Loops' and Expressions' helpers): `generate(body)` is the Python generator a
    call of a generator function returns."""

    def expr_GeneratorExp(self, node):
        """Lazy, as in Python: the first iterable is evaluated now, each item staged when
        it is asked for (`zip(range(3), (x * k for k in itertools.count()))` takes three)."""
        return StagedGenerator(self._comprehension_items(node, lambda: self.expr(node.elt)), "a generator expression")

    def generate(self, statements) -> StagedGenerator:
        """The generator a call of a generator function gives, its body `statements`."""
        return StagedGenerator(self._generator_steps(statements), f"the generator {self.source.name}")

    def _generator_steps(self, statements):
        """Runs a generator function's body, suspending at each `yield` with the staged
        value; what it returns (`return value`) is the generator's value, as in Python
        (`y = yield from gen()` receives it)."""
        try:
            yield from self._generate_block(statements)
        except Return as returned:
            return returned.value

    def _generate_block(self, statements):
        for statement in statements:
            if _holds_yield(statement):
                yield from self._generate_statement(statement)
            else:
                self.stmt(statement)

    def _generate_statement(self, node):
        if isinstance(node, ast.Expr) and isinstance(node.value, _YIELDS):
            yield from self._suspend(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, _YIELDS):
            sent = yield from self._suspend(node.value)
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                self.assign(target, sent)
        elif isinstance(node, ast.For):
            yield from self._generate_for(node)
        elif isinstance(node, ast.While):
            yield from self._generate_while(node)
        elif isinstance(node, ast.If):
            test = self.expr(node.test)
            if isinstance(test, Tracer):
                raise _count_depends_on_array("this `if` on an array holds a `yield`"
                                              ).at(self.source.info(node.test))
            taken = node.body if self.truth(test, node.test, "an `if` condition") else node.orelse
            yield from self._generate_block(taken)
        elif isinstance(node, ast.With):
            first = next(n for n in walk_scope(node.body) if isinstance(n, _YIELDS))
            raise UnsupportedSyntaxError(
                "a `yield` inside a `with` block cannot be staged: the block would stay open while "
                "the generator is suspended", "move the `yield` out of the block", self.source.info(first))
        else:   # a `yield` inside an expression, or in a statement staging refuses: said there
            self.stmt(node)

    def _suspend(self, node):
        """`yield value` or `yield from iterable`; returns what the consumer sent (`None`
        from a `for` or `next`), or the delegated generator's value."""
        value = None if node.value is None else self.expr(node.value)
        if isinstance(node, ast.Yield):
            return (yield value)
        return (yield from self._static_iterator(value))

    def _generate_for(self, node):
        iterable = self._range_call(node.iter)
        if isinstance(iterable, tuple):   # range() of an array bound
            raise _count_depends_on_array("this loop holding a `yield` runs over a range with an "
                                          "array bound").at(self.source.info(node.iter))
        for item in self._static_iterator(self.expr(node.iter) if iterable is None else iterable):
            self.assign(node.target, item)
            if not (yield from self._generate_pass(node.body)):
                return
        yield from self._generate_block(node.orelse)

    def _generate_while(self, node):
        while True:
            test = self.expr(node.test)
            if isinstance(test, Tracer):
                raise _count_depends_on_array("this `while` holding a `yield` tests an array"
                                              ).at(self.source.info(node.test))
            if not self.truth(test, node.test, "a `while` condition"):
                break
            if not (yield from self._generate_pass(node.body)):
                return
        yield from self._generate_block(node.orelse)

    def _generate_pass(self, body):
        """One pass of a loop holding a `yield`; False when it ends with `break`. A jump
        under an array condition is refused where it is (`_run_block`), as in any loop
        unrolled while staging."""
        try:
            yield from self._generate_block(body)
        except Break:
            return False
        except Continue:
            pass
        except UnsupportedSyntaxError as e:
            if getattr(e, "unrolled_jump", None):
                e.help = ("a loop holding a `yield` runs while staging, so it cannot stop on an array: "
                          "test a Python value there, or yield on every pass the value np.where chooses")
                e.unrolled_jump = None     # said by the loop the jump belongs to
            raise
        return True

