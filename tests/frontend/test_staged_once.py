"""Python effects in bodies staged once (`s2s/frontend/staged_once.py`): a loop staged as
one loop runs its body n times but stages it once, so an effect on a Python object made
before it (an iterator moved on, a list popped, a stdlib generator drawn from, an attribute
stored) would happen once instead of n times.

Each program is held to itself run by Python (every backend: eval_jaxpr, the emitted
module, jit on XLA and on the Python backend) and its gradient to autograd's of the same
source: such loops unroll when their trip count is static. Where it is not (a `while` on
an array, a range with an array bound) and in an `if` on an array, the effect is refused
at its line. Loops that change nothing made before them still stage as one loop."""
import heapq
import inspect
import io
import itertools
import operator
import random
from collections import deque

import numpy as np
import pytest

import s2s
from s2s import StagingError, UnsupportedSyntaxError
from tests.helpers import check_values_and_gradient

X = np.array([0.5, -1.5, 2.0])


def scans_in(fn, *args) -> int:
    return [e.primitive.name for e in s2s.make_jaxpr(fn)(*args).eqns].count("scan")


# --- iterators made before the loop: each pass takes the next item ----------------------------

ITERATORS = {
    "list": lambda: iter([1.0, 10.0, 100.0, 1000.0]),
    "dict": lambda: iter({1.0: "a", 10.0: "b", 100.0: "c", 1000.0: "d"}),
    "map": lambda: map(float, [1, 10, 100, 1000]),
    "zip": lambda: zip([0.0, 0.0, 0.0, 0.0], [1.0, 10.0, 100.0, 1000.0]),
    "enumerate": lambda: enumerate([1.0, 10.0, 100.0, 1000.0]),
    "itertools.count": lambda: itertools.count(1.0, 9.0),
    "deque.popleft": lambda: iter(deque([1.0, 10.0, 100.0, 1000.0]).popleft, None),
}


def taking_from(make):
    def fn(x):
        items = make()
        total = np.zeros_like(x)
        for _ in range(3):     # would be one scan, taking one item for all passes
            item = next(items)
            value = item[-1] if isinstance(item, tuple) else item
            total = total + value ** 2 * x
        return total
    return fn


@pytest.mark.parametrize("kind", list(ITERATORS))
def test_next_of_an_iterator_made_before_the_loop_moves_on_each_pass(kind):
    check_values_and_gradient(taking_from(ITERATORS[kind]), X)


def dunder_next(x):
    items = iter([1.0, 10.0, 100.0, 1000.0])
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + items.__next__() * x
    return total


def lines_of_a_file(x):
    lines = io.StringIO("1\n10\n100\n1000\n")
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + float(lines.readline()) * x
    return total


def over_the_rows_of_an_array(x):
    weights = iter([1.0, 10.0, 100.0])
    total = np.zeros(())
    for row in np.stack([x, 2.0 * x, 3.0 * x]):    # one scan over rows, were it not for next()
        total = total + next(weights) * np.sum(row)
    return total


def an_inner_loop_over_an_outer_iterator(x):
    items = iter([1.0, 10.0, 100.0, 1000.0, 1e4])
    total = np.zeros_like(x)
    for _ in range(3):
        for v in items:
            total = total + v * x
            break
    return total


def a_comprehension_over_an_outer_iterator(x):
    items = iter([1.0, 10.0, 100.0, 1000.0, 1e4])
    total = np.zeros_like(x)
    for _ in range(2):
        total = total + sum([v * x for _, v in zip(range(2), items)])
    return total


# --- Python's random, containers and objects changed by the loop's calls ----------------------

def pythons_random(x):
    draws = random.Random(0)
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + draws.random() * x
    return total


def pythons_module_random(x):
    random.seed(1)
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + random.uniform(0.0, 1.0) * x
    return total


class Counter:
    def __init__(self):
        self.count = 0.0
        self.pending = [1.0, 10.0, 100.0, 1000.0]

    def bump(self):
        self.count = self.count * 10.0 + 1.0
        return self.count

    def take(self):
        return self.pending.pop(0)


def a_method_storing_an_attribute(x):
    counter = Counter()
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + counter.bump() * x
    return total


def a_method_popping_a_list(x):
    counter = Counter()
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + counter.take() * x
    return total


def bump_entry(table):
    table["n"] = table["n"] * 10.0 + 1.0
    return table["n"]


def a_helper_storing_into_a_dict(x):
    table = {"n": 0.0}
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + bump_entry(table) * x
    return total


def drop_first(table):
    first = min(table)
    del table[first]
    return first


def a_helper_deleting_from_a_dict(x):
    table = {1.0: None, 10.0: None, 100.0: None, 1000.0: None}
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + drop_first(table) * x
    return total


def a_library_function_changing_its_argument(x):
    heap = [100.0, 1.0, 10.0, 1000.0]
    heapq.heapify(heap)
    total = np.zeros_like(x)
    for _ in range(3):
        total = total + heapq.heappop(heap) * x
    return total


def an_unbound_method_and_setitem(x):
    seen, table = [], {"n": 1.0}
    total = np.zeros_like(x)
    for _ in range(3):
        list.append(seen, 1.0)
        operator.setitem(table, "n", table["n"] * 10.0)
        total = total + len(seen) * table["n"] * x
    return total


@pytest.mark.parametrize("fn", [dunder_next, lines_of_a_file, over_the_rows_of_an_array,
                                an_inner_loop_over_an_outer_iterator, a_comprehension_over_an_outer_iterator,
                                pythons_random, pythons_module_random, a_method_storing_an_attribute,
                                a_method_popping_a_list, a_helper_storing_into_a_dict,
                                a_helper_deleting_from_a_dict, a_library_function_changing_its_argument,
                                an_unbound_method_and_setitem], ids=lambda fn: fn.__name__)
def test_each_pass_changes_the_object_as_python_does(fn):
    check_values_and_gradient(fn, X)
    assert scans_in(fn, X) == 0     # unrolled: its trip count is static


# --- loops that change nothing made before them stay one loop ---------------------------------

PARAMS = {"scale": 0.5, "weights": [1.0, 2.0, 3.0]}


def reads_outer_containers(x):
    total = np.zeros_like(x)
    for _ in range(4):
        total = total + len(PARAMS["weights"]) * min(PARAMS["weights"]) * sorted(PARAMS["weights"])[-1] * x
        for w, v in zip(PARAMS["weights"], PARAMS.get("weights")):   # zip made in the body
            total = total + w * v * np.sin(x + total) * PARAMS.get("scale")
        total = total + sum(weight * x for weight in PARAMS["weights"]) + len(PARAMS) * 0.1
    return total


def owns_what_it_changes(x):
    total = np.zeros_like(x)
    for _ in range(4):
        local = {"x": x, "y": np.cos(total)}      # a dict the body made
        items = iter([local["x"], local["y"]])    # an iterator the body made
        draws = random.Random(3)                  # a generator the body made: the same draw each pass
        total = total + next(items) * next(items) + draws.random()
    return total


@pytest.mark.parametrize("fn", [reads_outer_containers, owns_what_it_changes], ids=lambda fn: fn.__name__)
def test_a_loop_changing_nothing_made_before_it_stays_one_loop(fn):
    check_values_and_gradient(fn, X)
    assert scans_in(fn, X) == 1


# --- refused where the loop cannot unroll, and in an `if` on an array --------------------------

def while_taking_items(x):
    items = iter([1.0, 10.0, 100.0, 1000.0])
    total = np.zeros_like(x)
    while np.sum(total) < 10.0:
        total = total + next(items) * x
    return total


def while_appending(x):
    seen = []
    while np.sum(x) < 10.0:
        seen.append(1.0)
        x = x + 1.0
    return x * len(seen)


def range_of_an_array_popping(x):
    counter = Counter()
    total = np.zeros_like(x)
    for _ in range(np.argmax(x)):
        total = total + counter.take() * x
    return total


def branch_storing(x):
    table = {"n": 0.0}
    if np.sum(x) > 0:
        x = x * bump_entry(table)
    return x


def branch_taking_an_item(x):
    items = iter([1.0, 10.0])
    if np.sum(x) > 0:
        x = x * next(items)
    return x


@pytest.mark.parametrize("fn, where, says, advice", [
    (while_taking_items, (while_taking_items, "next(items)"),
     "next() advances a list_iterator made before it inside a loop staged as one loop", "items = list(it)"),
    (while_appending, (while_appending, "seen.append"),
     "`.append()` may change the list it is called on, made before it inside a loop staged as one loop",
     "call it before the loop"),
    (range_of_an_array_popping, (Counter.take, "self.pending.pop(0)"), "`.pop()` may change the list",
     "a carried counter"),
    (branch_storing, (bump_entry, 'table["n"] = table["n"]'),
     "`table['n'] = ...` changes the dict it stores into, made before it inside an `if` on an array",
     "store it after the loop or `if`"),
    (branch_taking_an_item, (branch_taking_an_item, "next(items)"),
     "next() advances a list_iterator made before it inside an `if` on an array", "first = next(it)"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refusals_point_at_the_change_and_say_what_to_write(fn, where, says, advice):
    with pytest.raises(StagingError) as info:
        s2s.jit(fn)(X)
    message = str(info.value)
    first = message.splitlines()[0]
    owner, code = where
    lines, start = inspect.getsourcelines(owner)
    line = start + next(k for k, text in enumerate(lines) if code in text)
    column = lines[line - start].index(code) + 1
    assert f".py:{line}:{column}: OnceStagedEffect: " in first and says in first, message
    assert "stages once, not each time it runs" in first, message
    assert "^" in message and "\nhelp: " in message and advice in message, message


# --- a `break` on an array condition in a loop over an iterator --------------------------------

def three_items():
    yield 1.0
    yield 2.0
    yield 3.0


def endless_counts():
    k = 0.0
    while True:
        k = k + 1.0
        yield k


def breaks_then_reads_the_rest(x):
    it = iter([1.0, 2.0, 3.0])
    for c in it:
        if np.sum(x) > c:
            break
    return x * next(it, 10.0)


def breaks_out_of_a_generator(x):
    total = np.zeros_like(x)
    for c in three_items():
        if np.sum(x) < c:
            break
        total = total + c * x
    return total


def breaks_out_of_an_endless_generator(x):
    total = np.zeros_like(x)
    for c in endless_counts():
        if np.sum(x) < c:
            break
        total = total + c * x
    return total


@pytest.mark.parametrize("fn", [breaks_then_reads_the_rest, breaks_out_of_a_generator,
                                breaks_out_of_an_endless_generator], ids=lambda fn: fn.__name__)
def test_a_break_on_an_array_in_a_loop_over_an_iterator_is_refused(fn):
    """Staging the loop would take every item (all of an endless generator's: without end),
    where Python leaves those after the break in the iterator, which may be read later."""
    with pytest.raises(UnsupportedSyntaxError) as info:
        s2s.jit(fn)(X)
    message = str(info.value)
    line = inspect.getsourcelines(fn)[1] + next(k for k, text in enumerate(inspect.getsourcelines(fn)[0])
                                              if text.lstrip().startswith("for c in"))
    assert f".py:{line}:5: UnsupportedSyntaxError: a loop over an iterator" in message.splitlines()[0], message
    assert "for c in list(it)" in message and "itertools.islice" in message


def test_a_break_on_an_array_in_a_loop_over_zip_of_lists_is_staged():
    """zip of lists, made by the loop itself: nothing can read its items after the loop."""
    def fn(x):
        total = np.zeros_like(x)
        for a, b in zip([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]):
            if np.sum(x) < a:
                break
            total = total + a * b * x
        return total
    check_values_and_gradient(fn, X)
