"""autograd's stochastic optimizers: sgd with momentum, rmsprop and adam, with autograd's
signature `optimizer(grad, x0, callback=None, num_iters=..., step_size=..., ...)`.

`grad(x, i)` is the gradient at the parameters `x` in iteration `i` (an s2s.autograd
`grad` of a loss `f(x, i)`, typically) and `callback(x, i, g)` sees each iteration's
parameters and gradient before the step; `x0` may be any tree of arrays, as in autograd:
the optimizer steps on its flattened vector and hands `grad` and `callback` trees of
`x0`'s structure, and returns one. An optimizer called inside a function s2s stages is
staged with it (each iteration unrolled), so a loss of the optimized parameters can be
differentiated through the optimization.
"""
from __future__ import annotations

from s2s.autograd.misc.flatten import flatten
from s2s.autograd.wrap_util import call_user_code

__all__ = ["adam", "rmsprop", "sgd"]


def _optimize(grad, x0, callback, num_iters: int, state, step):
    """Runs `num_iters` iterations of `x, state = step(x, g, i, state)` on the flattened
    `x0`, from `state`, `grad` and `callback` seeing trees."""
    x, unflatten = flatten(x0)
    for i in range(num_iters):
        g = flatten(call_user_code(grad, (unflatten(x), i), {}))[0]
        if callback:
            call_user_code(callback, (unflatten(x), i, unflatten(g)), {})
        x, state = step(x, g, i, state)
    return unflatten(x)


def sgd(grad, x0, callback=None, num_iters=200, step_size=0.1, mass=0.9):
    """Stochastic gradient descent with momentum `mass`: the velocity follows the negated
    gradient, as an exponential moving average."""
    def step(x, g, i, velocity):
        velocity = mass * velocity - (1.0 - mass) * g
        return x + step_size * velocity, velocity
    return _optimize(grad, x0, callback, num_iters, 0.0, step)


def rmsprop(grad, x0, callback=None, num_iters=100, step_size=0.1, gamma=0.9, eps=10**-8):
    """Root-mean-square propagation: each coordinate's step is scaled by a moving
    average (decay `gamma`, starting from ones) of its squared gradients."""
    def step(x, g, i, mean_square):
        mean_square = gamma * mean_square + (1 - gamma) * g ** 2
        return x - step_size * g / (mean_square ** 0.5 + eps), mean_square
    return _optimize(grad, x0, callback, num_iters, 1.0, step)


def adam(grad, x0, callback=None, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=10**-8):
    """Adam (Kingma and Ba, arXiv:1412.6980): moving averages of the gradient and of its
    square (decays `b1`, `b2`), corrected for their start at zero, set each step."""
    def step(x, g, i, moments):
        first, second = moments
        first = b1 * first + (1 - b1) * g
        second = b2 * second + (1 - b2) * g ** 2
        first_unbiased = first / (1 - b1 ** (i + 1))
        second_unbiased = second / (1 - b2 ** (i + 1))
        return x - step_size * first_unbiased / (second_unbiased ** 0.5 + eps), (first, second)
    return _optimize(grad, x0, callback, num_iters, (0.0, 0.0), step)
