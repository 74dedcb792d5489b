"""`@s2s.export` targets: the per_example_grad transform (the other transforms are held
to their oracles through the golden files and tests/emit/test_signature.py), and mistakes
in a declaration."""
from __future__ import annotations

import re
import types

import numpy as np
import pytest

import s2s
from s2s.emit.python import load_source
from s2s.errors import StagingError
from s2s.export import Export, emit_exports
from s2s.frontend.args import ShapeDtype


def tempered_loss(w, x, temperature):
    return np.sum(np.tanh(x @ w / temperature))


def test_per_example_grad_maps_the_data_and_shares_parameters_and_scalars():
    """`x` is the batch; `w` (differentiated) and the scalar `temperature` are shared."""
    record = Export(tempered_loss, (ShapeDtype((3,), "float64"), ShapeDtype((8, 3), "float64"),
                                    ShapeDtype((), "float64")), ("per_example_grad",), "tempered_loss", 0)
    [(stem, target)] = list(record.targets())
    source = s2s.emit_python(target, *record.example_args("per_example_grad"), name=stem)
    assert stem == "per_example_grad_tempered_loss"
    assert not re.search(r"^\s*(for|while) ", source, re.MULTILINE)   # vectorized: no loop
    emitted = getattr(load_source(source, stem), stem)
    rng = np.random.default_rng(0)
    w, x, temperature = rng.standard_normal(3), rng.standard_normal((8, 3)), np.float64(1.5)
    expected = np.stack([s2s.grad(tempered_loss)(w, x_i, temperature) for x_i in x])
    np.testing.assert_allclose(emitted(w, x, temperature), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Mistakes in the declaration: errors at the decorator's line.


def test_transforms_given_as_a_string_is_an_error_at_the_decorators_line():
    with pytest.raises(StagingError) as info:
        @s2s.export("f64[3]", transforms=("grad"))   # a parenthesized string, not a tuple
        def loss(x):
            return np.sum(x ** 2)
    error = info.value
    assert "is a string" in str(error) and "transforms=('grad',)" in str(error)
    assert error.where.line == _line_of('@s2s.export("f64[3]", transforms=("grad"))')
    assert error.where.col == _source_line(error).index("transforms=") + 1


def test_an_unknown_transform_is_an_error_naming_the_known_ones():
    with pytest.raises(StagingError, match=r"unknown transforms \['hessian'\]") as info:
        s2s.export("f64[3]", transforms=("primal", "hessian"))
    assert "'per_example_grad'" in str(info.value)


def layer(x):
    return np.tanh(x * 2.0)


def test_a_function_returning_an_array_exported_with_the_default_grad_says_so_at_its_export():
    """The default transforms are ("primal", "grad"); a layer has no gradient to export."""
    declared = s2s.export("f64[3]")(layer)
    module = types.ModuleType(layer.__module__)
    module.__file__ = __file__
    module.layer = declared
    with pytest.raises(StagingError, match=r"returns float64\[3\]: a gradient needs one scalar output") as info:
        emit_exports(module)
    assert 'transforms=("primal",)' in str(info.value)
    assert info.value.where.line == _line_of('declared = s2s.export("f64[3]")(layer)')
    layer.__s2s_exports__.clear()
    s2s.export("f64[3]", transforms=("primal",))(layer)
    assert list(emit_exports(module)) == ["layer.py"]


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)


def _source_line(error) -> str:
    with open(error.where.file) as f:
        return f.readlines()[error.where.line - 1]
