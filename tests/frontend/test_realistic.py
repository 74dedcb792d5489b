"""The front end on realistic NumPy code: each function staged by s2s, run by eval_jaxpr,
emitted as Python and run by jit must equal the same function run by NumPy itself."""
import collections
import dataclasses
import functools
import math

import numpy as np
import pytest

import s2s
from s2s.frontend import stage
from tests.helpers import check_function

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


# --- layers and losses ---------------------------------------------------------------------

def mlp(params, x):
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    return h @ W + b


def relu_mlp(params, x):
    h = np.maximum(x @ params["W1"] + params["b1"], 0.0)
    return h @ params["W2"] + params["b2"]


def softmax(x, axis=-1):
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def cross_entropy(logits, labels_onehot):
    return -np.mean(np.sum(labels_onehot * log_softmax(logits), axis=-1))


def logsumexp(x):
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def rms_norm(x, scale):
    return x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + 1e-6) * scale


def attention(q, k, v):
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    return softmax(scores) @ v


def causal_attention(q, k, v):
    n = q.shape[0]
    mask = np.tril(np.ones((n, n), dtype=bool))
    scores = np.where(mask, q @ k.T, -1e9)
    return softmax(scores) @ v


def multi_head_attention(x, Wq, Wk, Wv, Wo, n_heads=2):
    n, d = x.shape
    hd = d // n_heads
    q = (x @ Wq).reshape(n, n_heads, hd).transpose(1, 0, 2)
    k = (x @ Wk).reshape(n, n_heads, hd).transpose(1, 0, 2)
    v = (x @ Wv).reshape(n, n_heads, hd).transpose(1, 0, 2)
    out = attention(q, k, v)
    return out.transpose(1, 0, 2).reshape(n, d) @ Wo


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def swish(x):
    return x / (1 + np.exp(-x))


def mse(pred, target):
    return ((pred - target) ** 2).mean()


def huber(pred, target, delta=1.0):
    err = np.abs(pred - target)
    return np.where(err < delta, 0.5 * err ** 2, delta * (err - 0.5 * delta)).sum()


def logistic_regression_loss(w, b, X, y):
    z = X @ w + b
    return np.mean(np.logaddexp(0.0, -y * z))


def l2_regularized(params, x, lam):
    reg = sum(np.sum(p ** 2) for p in params.values())
    return relu_mlp(params, x).sum() + lam * reg


def conv1d(x, kernel):
    k = kernel.shape[0]
    n = x.shape[0] - k + 1
    return np.stack([np.dot(x[i:i + k], kernel) for i in range(n)])


def batch_norm(x, gamma, beta):
    mu = x.mean(axis=0)
    sigma = x.std(axis=0)
    return gamma * (x - mu) / (sigma + 1e-5) + beta


def embedding_lookup(table, ids):
    return table[ids].sum(axis=0)


def one_hot_accuracy(logits, labels):
    return (np.argmax(logits, axis=-1) == labels).mean()


# --- numerics and loops over static ranges ----------------------------------------------

def polynomial(coeffs, x):
    acc = np.zeros_like(x)
    for c in coeffs:
        acc = acc * x + c
    return acc


def power_series_exp(x, n_terms):
    term = np.ones_like(x)
    total = np.ones_like(x)
    for k in range(1, n_terms):
        term = term * x / k
        total += term
    return total


def euler_ode(y0, dt, n_steps):
    y = y0
    for _ in range(n_steps):
        y = y + dt * (-0.5 * y + np.sin(y))
    return y


def rk4_step(f, y, h):
    k1 = f(y)
    k2 = f(y + h / 2 * k1)
    k3 = f(y + h / 2 * k2)
    k4 = f(y + h * k3)
    return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def rk4(y0, n_steps):
    y = y0
    for _ in range(n_steps):
        y = rk4_step(lambda u: -u ** 3 + np.cos(u), y, 0.01)
    return y


def rnn(Wx, Wh, xs):
    h = np.zeros(Wh.shape[0])
    outs = []
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ Wx + h @ Wh)
        outs.append(h)
    return np.stack(outs), h


def gram_schmidt_norms(A):
    q_norms = []
    for j in range(A.shape[1]):
        v = A[:, j]
        q_norms.append(np.linalg.norm(v))
    return np.array(q_norms)


def pairwise_distances(X):
    sq = np.sum(X ** 2, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2 * X @ X.T
    return np.sqrt(np.maximum(d2, 0.0) + 1e-9)   # smooth where a distance is 0


def rbf_kernel(X, Y, gamma=0.5):
    d2 = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    return np.exp(-gamma * d2)


def gaussian_nll(x, mu, log_sigma):
    return np.sum(0.5 * ((x - mu) / np.exp(log_sigma)) ** 2 + log_sigma + 0.5 * np.log(2 * np.pi))


def solve_and_logdet(A, b):
    sign, logdet = np.linalg.slogdet(A)
    return np.linalg.solve(A, b), logdet


def gp_marginal_likelihood(K, y):
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(K, y)
    return -0.5 * y @ alpha - np.sum(np.log(np.diagonal(L)))


def cumulative_returns(r):
    return np.cumprod(1 + r) - 1


def sort_based_median(x):
    s = np.sort(x)
    n = x.shape[0]
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def einsum_bilinear(x, A, y):
    return np.einsum("i,ij,j->", x, A, y)


def clip_and_normalize(x):
    x = np.clip(x, -1.0, 1.0)
    return x / np.linalg.norm(x)


def static_shape_branch(x):
    if x.ndim == 2:
        x = x.sum(axis=0)
    return x * 2


def integer_and_bool_math(counts, mask):
    return (counts * 2 + 1) // 3, counts % 4, np.logical_not(mask)


def float32_stays_float32(x):
    return x * 2.0 + 1 - x / 3


# --- structure: pytrees, closures, helpers, methods --------------------------------------

Params = collections.namedtuple("Params", "w b")


@dataclasses.dataclass
class Linear:
    w: np.ndarray
    b: np.ndarray

    def __call__(self, x):
        return x @ self.w + self.b

    def scaled(self, x, s):
        return self(x) * s


def namedtuple_params(p, x):
    return np.tanh(x @ p.w + p.b)


def dataclass_module(layer, x):
    return layer.scaled(x, 0.5)


def returns_dict(x):
    return {"mean": x.mean(), "max": x.max(), "parts": [x[0], x[-1]]}


def make_closure(scale):
    offset = np.arange(3.0)

    def inner(x):
        return scale * x + offset
    return inner


def nested_def_and_lambda(x):
    square = lambda v: v * v  # noqa: E731

    def cube(v):
        return square(v) * v
    return cube(x) + square(x)


def star_args(*xs):
    return functools.reduce(lambda a, b: a + b, xs)


def kwargs_defaults(x, *, scale=2.0, shift=None):
    y = x * scale
    if shift is not None:
        y = y + shift
    return y


def tuple_unpack_starred(x):
    first, *middle, last = x
    return first + last + sum(middle)


def augmented_assignments(x):
    y = x + 0.0
    y *= 2
    y -= 1.0
    y /= 3.0
    y **= 2
    return y


def list_comprehension(xs):
    return sum([np.sum(v ** 2) for v in xs if v.ndim == 1])


def dict_building(x):
    stats = {}
    for name, fn in (("mean", np.mean), ("std", np.std), ("min", np.min)):
        stats[name] = fn(x)
    return stats


CASES = [
    ("mlp", mlp, ([(randn(4, 8), randn(8)), (randn(8, 8), randn(8)), (randn(8, 3), randn(3))], randn(5, 4))),
    ("relu_mlp", relu_mlp, ({"W1": randn(4, 6), "b1": randn(6), "W2": randn(6, 2), "b2": randn(2)}, randn(3, 4))),
    ("softmax", softmax, (randn(3, 5),)),
    ("log_softmax", log_softmax, (randn(3, 5, dtype=np.float32),)),
    ("cross_entropy", cross_entropy, (randn(4, 3), np.eye(3)[[0, 2, 1, 1]])),
    ("logsumexp", logsumexp, (randn(7),)),
    ("layer_norm", layer_norm, (randn(3, 8), randn(8), randn(8))),
    ("rms_norm", rms_norm, (randn(3, 8, dtype=np.float32), randn(8, dtype=np.float32))),
    ("attention", attention, (randn(4, 6), randn(5, 6), randn(5, 3))),
    ("causal_attention", causal_attention, (randn(4, 6), randn(4, 6), randn(4, 3))),
    ("multi_head_attention", multi_head_attention, (randn(5, 4), randn(4, 4), randn(4, 4), randn(4, 4), randn(4, 4))),
    ("gelu", gelu, (randn(10, dtype=np.float32),)),
    ("swish", swish, (randn(10),)),
    ("mse", mse, (randn(6), randn(6))),
    ("huber", huber, (randn(6) * 2, randn(6))),
    ("logistic_regression_loss", logistic_regression_loss, (randn(3), 0.1, randn(8, 3), np.sign(randn(8)))),
    ("l2_regularized", l2_regularized, ({"W1": randn(4, 6), "b1": randn(6), "W2": randn(6, 2), "b2": randn(2)}, randn(3, 4), 0.01)),
    ("conv1d", conv1d, (randn(10), randn(3))),
    ("batch_norm", batch_norm, (randn(6, 4), randn(4), randn(4))),
    ("embedding_lookup", embedding_lookup, (randn(10, 4), np.array([1, 3, 3, 7]))),
    ("one_hot_accuracy", one_hot_accuracy, (randn(8, 3), np.array([0, 1, 2, 0, 1, 2, 0, 1]))),
    ("polynomial", polynomial, ((1.0, -2.0, 0.5), randn(5))),
    ("power_series_exp", power_series_exp, (randn(4), 12)),
    ("euler_ode", euler_ode, (randn(3), 0.1, 20)),
    ("rk4", rk4, (randn(3), 10)),
    ("rnn", rnn, (randn(3, 5), randn(5, 5) * 0.3, randn(6, 3))),
    ("gram_schmidt_norms", gram_schmidt_norms, (randn(4, 3),)),
    ("pairwise_distances", pairwise_distances, (randn(5, 3),)),
    ("rbf_kernel", rbf_kernel, (randn(4, 2), randn(3, 2))),
    ("gaussian_nll", gaussian_nll, (randn(5), randn(5), randn(5) * 0.1)),
    ("solve_and_logdet", solve_and_logdet, (randn(4, 4) + 4 * np.eye(4), randn(4))),
    ("gp_marginal_likelihood", gp_marginal_likelihood, ((lambda A: A @ A.T + 4 * np.eye(4))(randn(4, 4)), randn(4))),
    ("cumulative_returns", cumulative_returns, (randn(6) * 0.01,)),
    ("sort_based_median", sort_based_median, (randn(7),)),
    ("einsum_bilinear", einsum_bilinear, (randn(3), randn(3, 4), randn(4))),
    ("clip_and_normalize", clip_and_normalize, (randn(5) * 2,)),
    ("static_shape_branch", static_shape_branch, (randn(3, 4),)),
    ("integer_and_bool_math", integer_and_bool_math, (np.array([-5, -1, 0, 3, 8]), np.array([True, False, True, True, False]))),
    ("float32_stays_float32", float32_stays_float32, (randn(4, dtype=np.float32),)),
    ("namedtuple_params", namedtuple_params, (Params(randn(3, 2), randn(2)), randn(4, 3))),
    ("dataclass_module", dataclass_module, (Linear(randn(3, 2), randn(2)), randn(4, 3))),
    ("returns_dict", returns_dict, (randn(5),)),
    ("closure", make_closure(1.5), (randn(3),)),
    ("nested_def_and_lambda", nested_def_and_lambda, (randn(4),)),
    ("star_args", star_args, (randn(3), randn(3), randn(3))),
    ("tuple_unpack_starred", tuple_unpack_starred, (randn(5),)),
    ("augmented_assignments", augmented_assignments, (randn(4),)),
    ("list_comprehension", list_comprehension, ([randn(3), randn(2, 2), randn(4)],)),
    ("dict_building", dict_building, (randn(6),)),
]


@pytest.mark.parametrize("name, fn, args", CASES, ids=[c[0] for c in CASES])
def test_realistic_function(name, fn, args):
    check_function(fn, *args, rtol=1e-5, atol=1e-6)


def test_keyword_only_arguments():
    check_function(kwargs_defaults, randn(3), scale=3.0, shift=randn(3))


def test_at_least_forty_functions():
    assert len(CASES) >= 40


def test_callable_object_and_method_as_top_level_functions():
    layer = Linear(randn(3, 2), randn(2))
    check_function(layer, randn(4, 3))
    check_function(layer.scaled, randn(4, 3), 2.0)


def test_int_arguments_are_static_and_specialize():
    closed = s2s.make_jaxpr(power_series_exp)(randn(4), 5)
    assert len(closed.jaxpr.invars) == 1
    (loop,) = [e for e in closed.eqns if e.primitive.name == "scan"]   # range(1, 5): one loop
    assert loop.params["length"] == 4


def test_dynamic_argnums_stages_an_int():
    closed = s2s.make_jaxpr(lambda x, k: x * k, dynamic_argnums=1)(randn(3), 2)
    assert [v.aval.dtype for v in closed.jaxpr.invars] == [np.float64, np.int64]


def test_static_argnums_bakes_a_float():
    closed = s2s.make_jaxpr(lambda x, s: x * s, static_argnums=1)(randn(3), 2.5)
    assert len(closed.jaxpr.invars) == 1


def test_constants_in_the_body_are_staged_not_baked():
    def big():
        return np.ones((300, 1024, 1024)).sum()
    closed = s2s.make_jaxpr(big)()
    assert closed.consts == []
    assert all(np.size(getattr(v, "value", 0)) <= 1 for e in closed.eqns for v in e.invars)


def test_staging_is_cached_per_avals_and_static_values():
    calls = []

    def f(x, n):
        calls.append(1)
        return x * n
    a = stage(f, (randn(3), 2))
    assert stage(f, (randn(3), 2)) is a
    assert stage(f, (randn(4), 2)) is not a
    assert stage(f, (randn(3), 3)) is not a
    assert stage(f, (randn(3).astype(np.float32), 2)) is not a


def all_eqns(jaxpr):
    """The equations of a jaxpr and, recursively, of the bodies of its control flow."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for body in (param if isinstance(param, tuple) else (param,)):
                if isinstance(body, s2s.ClosedJaxpr):
                    yield from all_eqns(body.jaxpr)


def test_source_info_points_into_helper_files():
    closed = s2s.make_jaxpr(rk4)(randn(3), 1)
    functions = {e.source_info.function for e in all_eqns(closed.jaxpr)}
    assert "rk4_step" in functions and "rk4" in functions
    # The lambda's lines are counted from the def it is written in (rk4), where a reader finds it.
    lines = {e.source_info.relative() for e in all_eqns(closed.jaxpr)}
    assert "test_realistic.py rk4+3" in lines and "test_realistic.py rk4_step+5" in lines
