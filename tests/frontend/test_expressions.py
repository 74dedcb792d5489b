"""Expressions (s2s/frontend/expressions.py): a subscript of a global array by static
values is read at staging (`static_part`), so a staging captures the part it reads, not
the whole array; the values follow the global as reading it would (issue 42's minibatch
`train_images[batch_indices(i)]`, with `i` an optimizer's step number).

Oracles: NumPy for values, autograd for gradients, on the same minibatches."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import s2s
from s2s.frontend import stage
from s2s.frontend.expressions import static_part

pytestmark = pytest.mark.filterwarnings("ignore:.* reads the global 'TRAIN'")

BATCH = 4
TRAIN = np.random.RandomState(0).randn(40, 300)   # 10 minibatches of 4 rows (1200 elements each)
TARGETS = np.random.RandomState(1).randn(40)


def batch_rows(step):
    k = step % (len(TRAIN) // BATCH)
    return slice(k * BATCH, (k + 1) * BATCH)


def loss(w, step, np=np):
    """A least-squares loss on minibatch `step` of the global training set (NumPy's
    functions as `np`: autograd's for the oracle)."""
    rows = batch_rows(step)
    return np.sum((np.dot(TRAIN[rows], w) - TARGETS[rows]) ** 2)


W = np.linspace(-1.0, 1.0, 300)


def test_a_static_slice_of_a_global_captures_that_part_only():
    staged = stage(loss, (W, 3))
    shapes = sorted(np.shape(c) for c in staged.closed.consts)
    assert shapes == [(4,), (4, 300)]
    part = next(c for c in staged.closed.consts if np.shape(c) == (4, 300))
    np.testing.assert_array_equal(part, TRAIN[12:16])


@pytest.mark.parametrize("step", [0, 1, 9, 10, 23])
def test_a_static_int_reaching_only_a_slice_gives_each_minibatchs_value_and_gradient(step):
    expected_grad = autograd.grad(lambda w: loss(w, step, anp))(W)
    np.testing.assert_allclose(s2s.grad(loss)(W, step), expected_grad, rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(loss)(W, step), loss(W, step), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(loss, backend="python")(W, step), loss(W, step), rtol=1e-12)


def test_a_global_changed_in_place_between_steps_is_seen(monkeypatch):
    train = TRAIN.copy()
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "TRAIN", train)
    gradient = s2s.grad(loss)
    for step in range(3):
        train[batch_rows(step)] *= 2.0   # changed before the step that reads it
        np.testing.assert_allclose(gradient(W, step), autograd.grad(lambda w: loss(w, step, anp))(W), rtol=1e-12)


def test_a_global_rebound_between_calls_of_the_same_step_is_seen(monkeypatch):
    module = __import__(__name__, fromlist=["x"])
    first = s2s.grad(loss)(W, 2)
    monkeypatch.setattr(module, "TRAIN", TRAIN + 1.0)
    np.testing.assert_allclose(s2s.grad(loss)(W, 2), autograd.grad(lambda w: loss(w, 2, anp))(W), rtol=1e-12)
    assert not np.allclose(first, s2s.grad(loss)(W, 2))


@pytest.mark.parametrize("index", [
    (slice(2, 5),), (1,), (slice(None), 3), (Ellipsis, slice(1, None, 2)), (None, slice(-3, None)),
    (np.int64(2), slice(None, None, -1)), (slice(10, 20),),
])
def test_static_basic_indexing_is_read_now(index):
    constant = np.arange(24.0).reshape(4, 6)
    part = static_part(constant, index if len(index) > 1 else index[0])
    np.testing.assert_array_equal(part, constant[index])
    assert np.shares_memory(part, constant) or part.size == 0


@pytest.mark.parametrize("index", [
    (1, 2),                         # one element: 0-d, staged as a subscript
    True,                           # a bool is a new axis in NumPy, not an int
    (slice(None), np.array([0, 2])),   # advanced indexing
    (7,),                           # out of range: the staged subscript says so
    slice(0.0, 2.0),                # NumPy refuses float bounds
])
def test_other_subscripts_are_staged(index):
    assert static_part(np.arange(24.0).reshape(4, 6), index) is None


def test_emitted_code_names_the_part_after_its_array():
    source = s2s.emit_python(loss, W, 3)
    assert "TRAIN_part" in source and "TRAIN[" not in source


def updated_batch(w, step):
    rows = TRAIN[batch_rows(step)]
    rows += 1.0   # rebinds `rows` (s2s's rule for `+=`): the global is not written
    return np.sum(np.dot(rows, w))


def test_updating_a_part_never_writes_the_global():
    before = TRAIN.copy()
    np.testing.assert_allclose(s2s.grad(updated_batch)(W, 1), np.sum(TRAIN[4:8] + 1.0, axis=0), rtol=1e-12)
    np.testing.assert_array_equal(TRAIN, before)
