"""Finding a function's AST in its file and classifying its names."""
import linecache

import numpy as np

import s2s
from s2s.frontend.source import classify_names, function_source

SCALE = 3.0


def make(offset):
    def inner(x, *rest, key=None):
        y = np.tanh(x) * SCALE + offset
        z = [y for _ in range(len(rest))]
        return y, z, undefined_thing  # noqa: F821
    return inner


def test_classify_names_with_the_source_and_the_function_object(capsys):
    kinds = classify_names(make(1.0))
    assert capsys.readouterr().out == ""
    assert kinds == {"np": "global", "x": "argument", "SCALE": "global", "offset": "closure",
                     "y": "local", "z": "local", "range": "builtin", "len": "builtin", "rest": "argument",
                     "undefined_thing": "undefined"}


def test_lambdas_on_one_line_are_told_apart():
    first, second = (lambda a: a + 1), (lambda b: b * 2)
    assert function_source(first).node.args.args[0].arg == "a"
    assert function_source(second).node.args.args[0].arg == "b"


def test_line_numbers_are_the_files_own():
    source = function_source(make)
    assert source.node.lineno == make.__code__.co_firstlineno


def _located(x):
    return np.sin(x) + x.T * 2.0 + np.linalg.norm(x)


def test_equations_are_located_at_the_expression_that_stages_them():
    """An attribute of a staged array (`x.T`) is located at the attribute; a module's
    attribute (`np.sin`, `np.linalg`) stages nothing, and the call's equations are the
    call's."""
    closed = s2s.make_jaxpr(_located)(np.ones((3, 3), np.float32))
    line = _located.__code__.co_firstlineno + 1
    text = linecache.getline(_located.__code__.co_filename, line)

    def span(expression):
        start = text.index(expression) + 1
        return start, start + len(expression)
    located = {}
    for eqn in closed.eqns:
        assert eqn.source_info.line == line
        located.setdefault(eqn.primitive.name, (eqn.source_info.col, eqn.source_info.end_col))
    assert located["sin"] == span("np.sin(x)")
    assert located["transpose"] == span("x.T")
    assert located["mul"] == span("x.T * 2.0")
    assert located["sqrt"] == span("np.linalg.norm(x)")
    assert located["add"] == span("np.sin(x) + x.T * 2.0")
