"""The contract between the walker's rooms, checked on their source.

FunctionWalker is its core (state, statement dispatch, assignment, calls) over the rooms
(mixins) it lists as its bases, lowest first. A room calls through `self` its own methods, those of the rooms below it, and what its
`<room>Needs` protocol (beside it in its module) lists of the core: never a room above it,
and nothing the protocol does not say. The protocol lists just what the room uses, with the
core's signatures, so it cannot drift from the code.
"""
import ast
import inspect
import sys
import textwrap
from typing import Protocol

import pytest

from s2s.frontend.walker import FunctionWalker

ROOMS = FunctionWalker.__bases__


def _class_node(cls) -> ast.ClassDef:
    """The class statement, with the line numbers of its file."""
    lines, first = inspect.getsourcelines(cls)
    return ast.increment_lineno(ast.parse(textwrap.dedent("".join(lines))), first - 1).body[0]


def _defined(cls) -> set[str]:
    """The names a class body binds: its methods, class attributes and declared attributes."""
    names = set()
    for node in _class_node(cls).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _through_self(node) -> list[ast.Attribute]:
    """Every `self.name` read or written inside `node`, nested functions and lambdas
    included (their `self` is the walker's)."""
    return sorted((n for n in ast.walk(node)
                   if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"),
                  key=lambda n: n.lineno)


def _needs(room) -> type:
    return getattr(sys.modules[room.__module__], room.__name__ + "Needs")


def _core_provides() -> set[str]:
    """The core's own methods, and the state its `__init__` sets."""
    init = next(n for n in _class_node(FunctionWalker).body
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return _defined(FunctionWalker) | {n.attr for n in _through_self(init) if isinstance(n.ctx, ast.Store)}


@pytest.mark.parametrize("room", ROOMS, ids=lambda room: room.__name__)
def test_a_room_calls_down_or_through_its_needs(room):
    level = ROOMS.index(room)
    below = set().union(*map(_defined, ROOMS[:level]))
    allowed = _defined(room) | below | _defined(_needs(room))
    owner = dict.fromkeys(_core_provides(), f"the core's, unlisted in {room.__name__}Needs")
    owner.update((name, f"{higher.__name__}'s, a room above") for higher in ROOMS[level + 1:]
                 for name in _defined(higher))
    wrong = [f"line {n.lineno} of {room.__name__}: self.{n.attr} is {owner.get(n.attr, 'defined nowhere')}"
             for n in _through_self(_class_node(room)) if n.attr not in allowed]
    assert not wrong, (f"{wrong}: move the method down to the room that calls it, or, if the core "
                       f"must provide it, list it in {room.__name__}Needs with why the room needs it")


@pytest.mark.parametrize("room", ROOMS, ids=lambda room: room.__name__)
def test_a_room_s_needs_are_the_core_s_and_all_used(room):
    needs = _needs(room)
    assert Protocol in needs.__mro__
    declared = _defined(needs)
    assert declared <= _core_provides(), f"{needs.__name__} lists what the core does not provide"
    assert not declared & set().union(*map(_defined, ROOMS)), f"{needs.__name__} lists a room's method"
    used = {n.attr for n in _through_self(_class_node(room))}
    assert declared <= used, f"{needs.__name__} lists what {room.__name__} no longer uses: {declared - used}"
    for name in declared:
        if callable(getattr(needs, name, None)):
            assert list(inspect.signature(getattr(needs, name)).parameters) == \
                list(inspect.signature(getattr(FunctionWalker, name)).parameters), \
                f"{needs.__name__}.{name} and the core's disagree on its parameters"


def test_no_two_rooms_define_one_name():
    """Else the lower room's would win for every caller, whichever room it was written for."""
    for k, room in enumerate(ROOMS):
        for other in ROOMS[k + 1:]:
            assert not _defined(room) & _defined(other), (room.__name__, other.__name__)
