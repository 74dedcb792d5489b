"""Functions whose jaxpr and emitted module are pinned by golden files in this folder.

Regenerate every golden file (after an intended change to the printer or the emitter):

    python -m tests.golden.regenerate

and review the diff like any other change.
"""
import numpy as np

from examples.mlp import init_params, loss as mlp_loss


def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def attention(q, k, v):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    weights = softmax(scores)
    return weights @ v


def horner(coeffs, x):
    acc = np.zeros_like(x)
    for c in coeffs:
        acc = acc * x + c
    return acc


def make_scaled(scale):
    def scaled_tanh(x):
        return np.tanh(scale * x)
    return scaled_tanh


def rnn(W, xs, n_steps, scale=0.5):
    """A static int loop bound and a float default the caller leaves alone: both stay
    parameters of the emitted function, checked against the values it was built for."""
    h = np.zeros(W.shape[0], W.dtype)
    for i in range(n_steps):
        h = np.tanh(W @ h + xs[i])
    return scale * (h * h).sum()


def _f32(*shape):
    return np.ones(shape, np.float32)


CASES = {
    "mlp_loss": (mlp_loss, (init_params(np.random.default_rng(0), (8, 16, 4)), _f32(5, 8), _f32(5, 4))),
    "softmax": (softmax, (_f32(4, 10),)),
    "layer_norm": (layer_norm, (_f32(4, 16), _f32(16), _f32(16))),
    "attention": (attention, (_f32(6, 8), _f32(6, 8), _f32(6, 8))),
    "horner": (horner, ((1.0, -2.0, 0.5, 3.0), np.ones(7))),
    "scaled_tanh": (make_scaled(0.5), (_f32(3),)),
    "rnn": (rnn, (_f32(4, 4), _f32(6, 4), 5)),
}
