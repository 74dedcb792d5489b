"""Finding a function's AST in its file and classifying its names."""
import numpy as np

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
