"""`@s2s.export` targets: the per_example_grad transform (the other transforms are held
to their oracles through the golden files and tests/emit/test_signature.py)."""
from __future__ import annotations

import re

import numpy as np

import s2s
from s2s.emit.python import load_source
from s2s.export import Export
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
