"""`s2s.vmap` on functions written as a user writes them (plain NumPy: MLPs, attention, an
RNN's Python `for`, a Newton `while`, an `if` on an array, sorting, gathers, solves), each
held to the one oracle that defines batching: a Python loop of the function over the
examples, stacked. Both backends run every function: the emitted NumPy module
(`s2s.vmap(f)(...)` on NumPy arrays) and XLA (`s2s.jit(s2s.vmap(f))(...)`), with in_axes
mixing 0, 1, -1 and None (weights shared, never broadcast to the batch).

Then per-example gradients against autograd and jax, vmap composed with the other
transforms against jax, pytree and negative axes, and the user's mistakes as clean errors.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import types
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2s

BATCH = 3


# ---------------------------------------------------------------- the functions, as users write them

def mlp_forward(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def mlp_loss(params, x, y):
    """Softmax cross-entropy of a one-hot `y`; one function (no helper) so that autograd and
    jax can run the same code with their own `np`."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    shifted = logits - logits.max()
    logp = shifted - np.log(np.exp(shifted).sum())
    return -(y * logp).sum()


def softmax_cross_entropy(logits, label):
    shifted = logits - np.max(logits)
    return np.log(np.sum(np.exp(shifted))) - shifted[label]


def attention(q, k, v):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ v


def layer_norm(x, gamma, beta):
    mean = x.mean()
    centered = x - mean
    var = (centered * centered).mean()
    return gamma * centered / np.sqrt(var + 1e-5) + beta


def rnn(W, U, xs):
    h = np.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
    return h


def newton_sqrt(a):
    """Each example stops on its own: the step count differs from example to example."""
    x = a + 1.0
    steps = np.zeros((), dtype=np.int64)
    while np.abs(x * x - a) > 1e-9 * a:
        x = 0.5 * (x + a / x)
        steps = steps + 1
    return x, steps


def piecewise(x):
    if x.sum() > 0:
        y = np.sin(x) * 2.0
    else:
        y = np.cos(x) - 1.0
    return y


def logsumexp(x):
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def conv1d(x, w):
    k = w.shape[0]
    n = x.shape[0] - k + 1
    out = np.zeros(n)
    for j in range(k):
        out = out + w[j] * x[j:j + n]
    return out


def horner(coeffs, x):
    y = np.zeros_like(x)
    for c in coeffs:
        y = y * x + c
    return y


def embedding_bag(E, idx):
    return E[idx].sum(axis=0)


def normalized_cumsum(x):
    c = np.cumsum(x)
    return c / c[-1]


def sorted_median(x):
    s = np.sort(x)
    n = x.shape[0]
    return 0.5 * (s[(n - 1) // 2] + s[n // 2])


def ridge(A, b, lam):
    return np.linalg.solve(A.T @ A + lam * np.eye(A.shape[1]), A.T @ b)


def pairwise_sq_dist(x, y):
    d = x[:, None, :] - y[None, :, :]
    return (d * d).sum(axis=-1)


def gaussian_logpdf(x, mean, cov):
    L = np.linalg.cholesky(cov)
    z = np.linalg.solve(L, x - mean)
    return -0.5 * z @ z - np.log(np.diag(L)).sum() - 0.5 * x.shape[0] * np.log(2 * np.pi)


def bilinear(x, A, y):
    return np.einsum("i,ij,j->", x, A, y)


def huber(pred, target):
    r = np.abs(pred - target)
    return np.where(r < 1.0, 0.5 * r * r, r - 0.5).mean()


def is_correct(logits, label):
    return np.argmax(logits) == label


def space_to_depth(img):
    h, w = img.shape
    return img.reshape(h // 2, 2, w // 2, 2).transpose(0, 2, 1, 3).reshape(h // 2, w // 2, 4)


def poly_features(x):
    return np.concatenate([x, x ** 2, np.ones(1)])


def smooth(x):
    p = np.pad(x, 1)
    return (p[:-2] + p[1:-1] + p[2:]) / 3.0


def one_hot(label):
    return (np.arange(5) == label).astype(np.float32)


def log_abs_det(A):
    return np.linalg.slogdet(A)[1]


def masked_mean(x, mask):
    return np.sum(x * mask) / np.maximum(mask.sum(), 1.0)


# ---------------------------------------------------------------- one example of each argument

def _normal(*shape, dtype=np.float64):
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def _spd(n):
    def draw(rng):
        m = rng.standard_normal((n, n))
        return m @ m.T + n * np.eye(n)
    return draw


def _mlp_params(rng, d_in=6, d_hidden=5, d_out=4):
    return {"W1": (rng.standard_normal((d_in, d_hidden)) / 3).astype(np.float32),
            "b1": rng.standard_normal(d_hidden).astype(np.float32),
            "W2": (rng.standard_normal((d_hidden, d_out)) / 3).astype(np.float32),
            "b2": rng.standard_normal(d_out).astype(np.float32)}


def _one_hot_label(rng, k=4):
    return np.eye(k, dtype=np.float32)[rng.integers(k)]


@dataclasses.dataclass
class Case:
    """`fn` mapped with `in_axes`; `draws[i](rng)` is one example of argument i (an unmapped
    argument is drawn once and shared)."""
    fn: Callable
    in_axes: tuple
    draws: tuple
    rtol: float = 1e-9

    @property
    def id(self):
        return f"{self.fn.__name__}{self.in_axes}".replace(" ", "")


CASES = [
    Case(mlp_forward, (None, 0), (_mlp_params, _normal(6, dtype=np.float32)), rtol=2e-5),
    Case(mlp_loss, (None, 0, 1), (_mlp_params, _normal(6, dtype=np.float32), _one_hot_label), rtol=2e-5),
    Case(softmax_cross_entropy, (0, 0), (_normal(5), lambda rng: rng.integers(5))),
    Case(attention, (0, 1, -1), (_normal(4, 3), _normal(4, 3), _normal(4, 3))),
    Case(attention, (0, None, None), (_normal(4, 3), _normal(5, 3), _normal(5, 2))),
    Case(layer_norm, (-1, None, None), (_normal(4, 5), _normal(5), _normal(5))),
    Case(rnn, (None, None, 1), (_normal(3, 3), _normal(3, 2), _normal(4, 2))),
    Case(newton_sqrt, (0,), (lambda rng: rng.uniform(0.01, 100.0),)),
    Case(piecewise, (0,), (_normal(4),)),
    Case(logsumexp, (-1,), (_normal(2, 3),)),
    Case(conv1d, (0, None), (_normal(7), _normal(3))),
    Case(conv1d, (None, 0), (_normal(7), _normal(3))),
    Case(horner, (None, 0), (_normal(4), _normal(3))),
    Case(horner, (0, 1), (_normal(4), _normal(3, 2))),
    Case(embedding_bag, (None, 0), (_normal(6, 3), lambda rng: rng.integers(0, 6, 4))),
    Case(embedding_bag, (2, 0), (_normal(6, 3), lambda rng: rng.integers(0, 6, 4))),
    Case(normalized_cumsum, (1,), (lambda rng: rng.uniform(0.5, 1.0, (2, 5)),)),
    Case(sorted_median, (0,), (_normal(6),)),
    Case(ridge, (0, 0, None), (_normal(5, 3), _normal(5), lambda rng: 0.5)),
    Case(ridge, (None, -1, None), (_normal(5, 3), _normal(5), lambda rng: 0.5)),
    Case(pairwise_sq_dist, (0, None), (_normal(3, 2), _normal(4, 2))),
    Case(gaussian_logpdf, (0, None, 0), (_normal(3), _normal(3), _spd(3))),
    Case(bilinear, (0, None, 0), (_normal(3), _normal(3, 4), _normal(4))),
    Case(huber, (0, None), (_normal(5), _normal(5))),
    Case(is_correct, (1, 0), (_normal(4), lambda rng: rng.integers(4))),
    Case(space_to_depth, (-1,), (_normal(4, 6),)),
    Case(poly_features, (0,), (_normal(3),)),
    Case(smooth, (1,), (_normal(5),)),
    Case(one_hot, (0,), (lambda rng: rng.integers(5),)),
    Case(log_abs_det, (2,), (_spd(3),)),
    Case(masked_mean, (0, 0), (_normal(5), lambda rng: (rng.uniform(size=5) > 0.5).astype(np.float64))),
]


# ---------------------------------------------------------------- the oracle: a loop over examples

def _tree_stack(trees, axis):
    """Examples stacked leaf by leaf along `axis`."""
    leaves = [s2s.tree_flatten(t)[0] for t in trees]
    treedef = s2s.tree_flatten(trees[0])[1]
    return s2s.tree_unflatten(treedef, [np.stack(column, axis=axis) for column in zip(*leaves)])


def batch_of_examples(case: Case, rng, size=BATCH):
    """(batched arguments, per-example argument tuples) for `case`."""
    drawn = [[draw(rng) for draw in case.draws] for _ in range(size)]
    examples = [tuple(ex[j] if axis is not None else drawn[0][j] for j, axis in enumerate(case.in_axes))
                for ex in drawn]
    batched = tuple(drawn[0][j] if axis is None else _tree_stack([ex[j] for ex in drawn], axis)
                    for j, axis in enumerate(case.in_axes))
    return batched, examples


def loop_over_examples(fn, examples, out_axes=0):
    """What vmap must equal: `fn` run on each example, results stacked along `out_axes`."""
    results = [fn(*ex) for ex in examples]
    if isinstance(results[0], tuple):
        axes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(results[0])
        return tuple(np.stack([np.asarray(r[i]) for r in results], axis=a) for i, a in enumerate(axes))
    return np.stack([np.asarray(r) for r in results], axis=out_axes)


def assert_matches(actual, expected, rtol, atol=1e-10):
    actual_leaves, expected_leaves = s2s.tree_leaves(actual), s2s.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    for got, want in zip(actual_leaves, expected_leaves):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


BACKENDS = {"python": lambda fn: fn, "xla": s2s.jit}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_vmap_of_a_user_function_equals_a_loop_over_examples(case, backend):
    batched, examples = batch_of_examples(case, np.random.default_rng(0))
    mapped = BACKENDS[backend](s2s.vmap(case.fn, in_axes=case.in_axes))
    assert_matches(mapped(*batched), loop_over_examples(case.fn, examples), case.rtol)


def test_newton_examples_stop_each_at_their_own_step():
    a = np.array([1e-2, 2.0, 1e4])
    roots, steps = s2s.vmap(newton_sqrt)(a)
    np.testing.assert_allclose(roots, np.sqrt(a), rtol=1e-9)
    assert len(set(steps.tolist())) == 3, steps


def test_piecewise_takes_each_branch_for_its_own_examples():
    x = np.array([[1.0, 2.0], [-1.0, -2.0], [3.0, -1.0]])
    expected = np.stack([np.sin(x[0]) * 2, np.cos(x[1]) - 1, np.sin(x[2]) * 2])
    np.testing.assert_allclose(s2s.vmap(piecewise)(x), expected)


# ---------------------------------------------------------------- per-example gradients

def with_numpy(fn, numpy_module):
    """The same source run with another `np` (autograd.numpy, jax.numpy)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": numpy_module}, fn.__name__)


def mlp_batch(rng, size=4):
    xs = rng.standard_normal((size, 6)).astype(np.float32)
    ys = np.eye(4, dtype=np.float32)[rng.integers(0, 4, size)]
    return _mlp_params(rng), xs, ys


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_per_example_gradients_equal_a_loop_of_autograd(backend):
    import autograd
    import autograd.numpy as anp
    params, xs, ys = mlp_batch(np.random.default_rng(1))
    per_example = BACKENDS[backend](s2s.vmap(s2s.grad(mlp_loss), in_axes=(None, 0, 0)))
    expected = _tree_stack([autograd.grad(with_numpy(mlp_loss, anp))(params, x, y) for x, y in zip(xs, ys)], 0)
    assert_matches(per_example(params, xs, ys), expected, rtol=1e-5, atol=1e-6)


def test_per_example_gradients_equal_jax_vmap_of_grad():
    import jax
    import jax.numpy as jnp
    params, xs, ys = mlp_batch(np.random.default_rng(2))
    ours = s2s.vmap(s2s.grad(mlp_loss), in_axes=(None, 0, 0))(params, xs, ys)
    theirs = jax.vmap(jax.grad(with_numpy(mlp_loss, jnp)), in_axes=(None, 0, 0))(params, xs, ys)
    assert_matches(ours, {k: np.asarray(v) for k, v in theirs.items()}, rtol=1e-5, atol=1e-6)


def test_the_emitted_per_example_gradient_has_no_loop_over_the_batch():
    params, xs, ys = mlp_batch(np.random.default_rng(3), size=128)
    source = s2s.emit_python(s2s.vmap(s2s.grad(mlp_loss), in_axes=(None, 0, 0)), params, xs, ys)
    loops = [line for line in source.splitlines() if line.lstrip().startswith(("for ", "while "))]
    assert not loops, source
    assert "x @ W1 + b1" in source, source    # the shared weight is used as it is


# ---------------------------------------------------------------- vmap composed with the other transforms, against jax

def dense(W, x):
    return np.tanh(W @ x + 1.0)


def grad_of_vmap(t, f):
    def total(W, xs):
        return t.vmap(f, in_axes=(None, 0))(W, xs).sum()
    return t.grad(total)


COMPOSITIONS = {
    "grad(vmap(f))": lambda t, f, W, xs: grad_of_vmap(t, f)(W, xs),
    "jit(vmap(f))": lambda t, f, W, xs: t.jit(t.vmap(f, in_axes=(None, 0)))(W, xs),
    "vmap(jit(f))": lambda t, f, W, xs: t.vmap(t.jit(f), in_axes=(None, 0))(W, xs),
    "vmap(vmap(f))": lambda t, f, W, xs: t.vmap(t.vmap(f, in_axes=(None, 0)), in_axes=(None, 1))(
        W, np.stack([xs, 2 * xs], axis=1)),
    "jvp(vmap(f))": lambda t, f, W, xs: t.jvp(t.vmap(f, in_axes=(None, 0)), (W, xs), (np.ones_like(W), xs)),
    "vmap(jacrev(f))": lambda t, f, W, xs: t.vmap(t.jacrev(f, argnums=1), in_axes=(None, 0))(W, xs),
    "vmap(grad(f)) over W": lambda t, f, W, xs: t.vmap(t.grad(lambda W, x: f(W, x).sum()), in_axes=(0, None))(
        np.stack([W, -W]), xs[0]),
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_vmap_composes_with_the_other_transforms_as_in_jax(name):
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(4)
    W, xs = rng.standard_normal((3, 2)), rng.standard_normal((5, 2))
    theirs = s2s.tree_map(np.asarray, COMPOSITIONS[name](jax, with_numpy(dense, jnp), W, xs))
    ours = COMPOSITIONS[name](s2s, dense, W, xs)
    assert_matches(ours, theirs, rtol=1e-9)


# ---------------------------------------------------------------- pytrees, negative axes, axis_size, out_axes

def affine(p, x):
    return np.tanh(p["W"] * x + p["b"])


def test_in_axes_is_a_tree_prefix_of_the_arguments():
    rng = np.random.default_rng(5)
    p = {"W": rng.standard_normal(3), "b": rng.standard_normal((4, 3))}
    xs = rng.standard_normal((4, 3))
    ours = s2s.vmap(affine, in_axes=({"W": None, "b": 0}, 0))(p, xs)
    expected = np.stack([affine({"W": p["W"], "b": p["b"][i]}, xs[i]) for i in range(4)])
    assert_matches(ours, expected, rtol=1e-12)


class Affine:
    """A registered pytree holding a layer's parameters (as a user's class would)."""

    def __init__(self, W, b):
        self.W, self.b = W, b


s2s.register_pytree_node(Affine, lambda p: ((p.W, p.b), None), lambda _, children: Affine(*children))
jax.tree_util.register_pytree_node(Affine, lambda p: ((p.W, p.b), None), lambda _, children: Affine(*children))


def affine_of(p, x):
    return np.tanh(p.W * x + p.b) if isinstance(p, Affine) else np.tanh(p["W"] * x + p["b"])


@pytest.mark.parametrize("container", [
    lambda W, b: collections.OrderedDict([("W", W), ("b", b)]),
    lambda W, b: collections.OrderedDict([("b", b), ("W", W)]),   # in its own order, as JAX keeps it
    Affine], ids=["OrderedDict", "OrderedDict_b_first", "registered"])
def test_in_axes_of_an_ordered_dict_or_a_registered_pytree_matches_its_argument_as_jax(container):
    """in_axes holds the argument's own container (an OrderedDict, a registered class)
    down to where one axis applies; vmap and pmap read it as jax.vmap does."""
    rng = np.random.default_rng(8)
    W, b, xs = rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    p = container(W, b)
    in_axes = (container(None, 1), 0)
    theirs = jax.vmap(with_numpy(affine_of, jnp), in_axes=in_axes)(p, xs)
    assert_matches(s2s.vmap(affine_of, in_axes=in_axes)(p, xs), theirs, rtol=1e-12)
    assert_matches(s2s.jit(s2s.vmap(affine_of, in_axes=in_axes))(p, xs), theirs, rtol=1e-12)
    assert_matches(s2s.pmap(affine_of, in_axes=in_axes)(container(W, b[:, :1]), xs[:1]), theirs[:1], rtol=1e-12)
    with pytest.raises(ValueError, match="not a tree prefix"):   # a plain dict is another container
        s2s.vmap(affine_of, in_axes=({"W": None, "b": 1}, 0))(p, xs)


def stats(x):
    return {"mean": x.mean(axis=0), "scale": np.float64(2.0) * np.ones(2), "max": x.max(axis=0)}


def test_out_axes_is_a_tree_prefix_of_the_results_with_none_for_an_unbatched_one():
    xs = np.random.default_rng(6).standard_normal((3, 5, 2))
    ours = s2s.vmap(stats, out_axes={"mean": 1, "scale": None, "max": -1})(xs)
    assert_matches(ours, {"mean": xs.mean(axis=1).T, "scale": 2.0 * np.ones(2), "max": xs.max(axis=1).T},
                   rtol=1e-12)


def test_negative_in_axes_and_out_axes_count_from_the_end():
    xs = np.random.default_rng(7).standard_normal((2, 4, 3))
    ours = s2s.vmap(lambda x: np.sin(x), in_axes=-2, out_axes=-1)(xs)
    assert_matches(ours, np.moveaxis(np.sin(xs), 1, -1), rtol=1e-12)


def test_out_axes_1_puts_the_batch_second():
    xs = np.random.default_rng(8).standard_normal((4, 3))
    assert_matches(s2s.vmap(lambda x: np.outer(x, x).sum(axis=0), out_axes=1)(xs),
                   np.stack([np.outer(x, x).sum(axis=0) for x in xs], axis=1), rtol=1e-12)


def test_axis_size_gives_the_batch_when_no_argument_is_mapped():
    w = np.arange(3.0)
    ours = s2s.vmap(lambda w: np.sin(w) * 2.0, in_axes=None, axis_size=4)(w)
    assert_matches(ours, np.broadcast_to(np.sin(w) * 2.0, (4, 3)), rtol=1e-12)


def test_an_unmapped_output_is_broadcast_to_the_batch_by_default():
    xs, w = np.ones((4, 3)), np.arange(3.0)
    mean, shared = s2s.vmap(lambda x, w: (x.mean(), np.cos(w)), in_axes=(0, None))(xs, w)
    assert_matches((mean, shared), (np.ones(4), np.broadcast_to(np.cos(w), (4, 3))), rtol=1e-12)


# ---------------------------------------------------------------- the user's mistakes: clean s2s errors

def scale(x, w):
    return x * w


def _raises_clean(call, *fragments):
    """`call()` raises an s2s error naming each fragment, with no s2s internals behind it."""
    with pytest.raises(s2s.S2SError) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    package = os.path.dirname(s2s.__file__)
    internal = [e for e in info.traceback
                if str(e.path).startswith(package) and e.name != "user_api_boundary"]   # the boundary, where it leaves
    assert not internal, internal


ERRORS = {
    "mismatched sizes": (lambda: s2s.vmap(scale)(np.ones((3, 2)), np.ones((4, 2))),
                         ("`x` has size 3", "`w` has size 4")),
    "in_axes out of range": (lambda: s2s.vmap(scale, in_axes=(2, None))(np.ones((3, 2)), np.ones(2)),
                             ("in_axes 2", "`x`", "out of range")),
    "a negative in_axes out of range": (lambda: s2s.vmap(scale, in_axes=(-3, None))(np.ones((3, 2)), 1.0),
                                        ("in_axes -3", "out of range")),
    "mapping a scalar": (lambda: s2s.vmap(scale)(np.float64(1.0), np.ones(3)), ("`x`", "scalar")),
    "out_axes=None on a batched output": (lambda: s2s.vmap(scale, out_axes=None)(np.ones(3), np.ones(3)),
                                          ("output 0", "out_axes entry is None")),
    "in_axes of the wrong length": (lambda: s2s.vmap(scale, in_axes=(0,))(np.ones(3), np.ones(3)),
                                    ("in_axes has 1 entries", "2 positional arguments")),
    "no mapped argument and no axis_size": (lambda: s2s.vmap(scale, in_axes=None)(np.ones(3), np.ones(3)),
                                            ("axis_size",)),
    "a fractional axis_size": (lambda: s2s.vmap(scale, axis_size=2.5), ("axis_size", "2.5")),
    "a boolean axis_size": (lambda: s2s.vmap(scale, axis_size=True), ("axis_size", "True")),
    "a negative axis_size": (lambda: s2s.vmap(scale, axis_size=-1), ("axis_size", "-1")),
    "an unhashable axis_name": (lambda: s2s.vmap(scale, axis_name=["i"]), ("axis_name", "hashable")),
}


def scaled_by_default(a, s=1.0):
    return a * s


def test_keyword_arguments_are_mapped_along_axis_0_wherever_vmap_is_called():
    """As jax.vmap: an argument passed by keyword is mapped along its axis 0 (in_axes is
    for the positional ones), staged inside jit, another vmap or grad too; a parameter
    left to its default is part of the function, shared by every example."""
    x, s = np.arange(9.0).reshape(3, 3), np.array([1.0, 10.0, 100.0])
    mapped = s2s.vmap(scaled_by_default)
    np.testing.assert_allclose(mapped(x, s=s), x * s[:, None])
    np.testing.assert_allclose(np.asarray(s2s.jit(mapped)(x, s=s)), x * s[:, None])
    np.testing.assert_allclose(np.asarray(s2s.jit(mapped)(x)), x)
    np.testing.assert_allclose(s2s.vmap(mapped)(x[:, None, :]), x[:, None, :])
    total = s2s.grad(lambda a: mapped(a, s=s).sum())(x)
    np.testing.assert_allclose(total, np.broadcast_to(s[:, None], (3, 3)))
    shared = s2s.vmap(scaled_by_default, in_axes=(0, None))
    np.testing.assert_allclose(shared(x, s), x * s)   # shared: by position, with None


def add(x, y):
    return x + y


def test_a_keyword_argument_is_mapped_as_jax_maps_it():
    np.testing.assert_allclose(s2s.vmap(add)(np.arange(3.0), y=np.arange(3.0) * 10), [0.0, 11.0, 22.0])
    both = s2s.vmap(add, in_axes=(None,))(np.ones(2), y=np.arange(3.0)[:, None])
    np.testing.assert_allclose(both, np.arange(3.0)[:, None] + np.ones((3, 2)))
    tree = s2s.vmap(lambda x, **kw: x * kw["scale"]["w"])(np.ones((2, 3)), scale={"w": np.array([2.0, 3.0])})
    np.testing.assert_allclose(tree, [[2.0] * 3, [3.0] * 3])


def test_keyword_arguments_of_another_batch_size_are_refused_naming_each():
    _raises_clean(lambda: s2s.vmap(add)(np.ones(1), y=np.ones(2)), "different sizes", "`x` has size 1",
                  "`y` has size 2")
    _raises_clean(lambda: s2s.vmap(add)(np.ones(3), y=2.0), "`y`", "scalar")
    _raises_clean(lambda: s2s.vmap(lambda x, **kw: x + kw["y"])(np.ones(3), y=np.ones(4)),
                  "`y` has size 4")


def test_an_out_of_range_in_axes_gives_the_arguments_own_rank():
    _raises_clean(lambda: s2s.vmap(scale, in_axes=(2, None))(np.ones((3, 2)), np.ones(2)), "of rank 2")


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_a_mistake_is_a_clean_s2s_error(name):
    call, fragments = ERRORS[name]
    _raises_clean(call, *fragments)


# ---------------------------------------------------------------- README's vmap section stays true

def test_the_readme_vmap_example_runs_and_prints_its_excerpt(tmp_path, capsys):
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")) as f:
        section = f.read().split("## Batching: `s2s.vmap`", 1)[1].split("\n## ", 1)[0]
    code, excerpt = [block.split("```", 1)[0] for block in section.split("```python")[1:3]]
    path = tmp_path / "per_example.py"   # the file name the excerpt's location comments show
    path.write_text(code)
    exec(compile(code, str(path), "exec"), {"__name__": "per_example"})
    emitted = capsys.readouterr().out
    shown = [line for line in excerpt.splitlines() if line.strip() and line.strip() != "..."]
    assert shown and all(line in emitted for line in shown), emitted


SHARED_CASES = [c for c in CASES if None in c.in_axes]


@pytest.mark.parametrize("case", SHARED_CASES, ids=lambda c: c.id)
def test_a_shared_argument_is_never_copied_per_example(case):
    """An unmapped weight is read as it is: no equation broadcasts it to the batch size."""
    size = 11   # no case's own dimension
    batched, _ = batch_of_examples(case, np.random.default_rng(9), size=size)
    closed = s2s.make_jaxpr(s2s.vmap(case.fn, in_axes=case.in_axes))(*batched)
    leaf_counts = [len(s2s.tree_leaves(arg)) for arg in batched]
    owners = [axis for axis, count in zip(case.in_axes, leaf_counts) for _ in range(count)]
    assert len(closed.jaxpr.invars) == len(owners)
    shared = {var for var, axis in zip(closed.jaxpr.invars, owners) if axis is None}
    copies = [eqn for eqn in closed.jaxpr.eqns if eqn.primitive.name == "broadcast_in_dim"
              and eqn.invars[0] in shared and size in eqn.outvars[0].aval.shape]
    assert not copies, closed
