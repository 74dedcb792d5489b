"""s2s.source_info: locations absolute for errors, relative to the def for emitted code."""
from s2s.source_info import SourceInfo


def test_relative_counts_lines_from_the_enclosing_def_and_short_stays_absolute():
    info = SourceInfo("/checkout/examples/mlp.py", 28, 5, "predict", def_line=27)
    assert info.relative() == "mlp.py predict+1"
    assert info.short() == "mlp.py:28"
    assert info.location() == "/checkout/examples/mlp.py:28:5"


def test_relative_does_not_change_when_the_function_moves():
    here = SourceInfo("m.py", 12, 1, "outer.inner", def_line=10)
    moved = SourceInfo("m.py", 40, 1, "outer.inner", def_line=38)
    assert here.relative() == moved.relative() == "m.py outer.inner+2"


def test_relative_without_a_def_line_falls_back_to_the_absolute_line():
    assert SourceInfo("m.py", 7, 1, "<unknown>").relative() == "m.py:7"
