"""misc.optimizers: sgd, rmsprop and adam against autograd's, step for step: the same
iterates, the same callbacks, trees of parameters, and differentiation through a run."""
import numpy as np
import pytest

from s2s.autograd import grad
from s2s.autograd.misc import flatten
from s2s.autograd.misc.optimizers import adam, rmsprop, sgd
from tests.autograd.twins import assert_trees_close, autograd, autograd_twin

INITIAL = {"w": np.array([[0.5, -1.0], [2.0, 0.3]]), "b": [np.array([0.1, -0.2]), 1.5]}
TARGET = np.array([1.0, -2.0])


def objective(params, i):
    prediction = np.tanh(params["w"] @ params["b"][0]) * params["b"][1]
    return np.sum((prediction - TARGET) ** 2) + 0.01 * (i % 3) * np.sum(params["w"] ** 2)


def run(optimizer, library_grad, fn, **options):
    """The optimizer's result and what its callback saw: (iteration, parameters, gradient)."""
    seen = []

    def callback(x, i, g):
        seen.append((i, x, g))
    result = optimizer(library_grad(fn), INITIAL, callback=callback, **options)
    return result, seen


@pytest.mark.parametrize("name", ["sgd", "rmsprop", "adam"])
@pytest.mark.parametrize("options", [{"num_iters": 12}, {"num_iters": 8, "step_size": 0.05}])
def test_iterates_and_callbacks_match_autograds(name, options):
    ours = run({"sgd": sgd, "rmsprop": rmsprop, "adam": adam}[name], grad, objective, **options)
    theirs = run(getattr(autograd.misc.optimizers, name), autograd.grad, autograd_twin(objective), **options)
    assert_trees_close(ours[0], theirs[0], rtol=1e-10, atol=1e-12, what="result")
    assert [i for i, _, _ in ours[1]] == list(range(options["num_iters"]))
    for (i, x, g), (_, their_x, their_g) in zip(ours[1], theirs[1]):
        assert_trees_close(x, their_x, rtol=1e-10, atol=1e-12, what=f"parameters at {i}")
        assert_trees_close(g, their_g, rtol=1e-10, atol=1e-12, what=f"gradient at {i}")


def test_defaults_are_autograds():
    """sgd 200 iterations of 0.1 with mass 0.9; rmsprop 100 of 0.1, gamma 0.9; adam 100 of 0.001."""
    for optimizer, iterations in ((sgd, 200), (rmsprop, 100), (adam, 100)):
        counted = []
        optimizer(lambda x, i: counted.append(i) or 2 * x, np.ones(2))
        assert counted == list(range(iterations))
    assert_trees_close(adam(lambda x, i: 2 * x, np.ones(2)),
                       autograd.misc.optimizers.adam(lambda x, i: 2 * x, np.ones(2)))
    assert_trees_close(sgd(lambda x, i: 2 * x, np.ones(2)),
                       autograd.misc.optimizers.sgd(lambda x, i: 2 * x, np.ones(2)))
    assert_trees_close(rmsprop(lambda x, i: 2 * x, np.ones(2)),
                       autograd.misc.optimizers.rmsprop(lambda x, i: 2 * x, np.ones(2)))


def quadratic(x, i):
    return np.sum((x - 3.0) ** 2)


def tuned_loss(step_size, x0):
    """The loss after five adam steps, as a function of the step size and the start: a
    function s2s stages through the optimizer's loop."""
    trained = adam(grad(quadratic), x0, num_iters=5, step_size=step_size)
    return quadratic(trained, 0)


def test_differentiating_through_an_optimizer():
    x0 = np.array([0.5, -1.0])
    ours = grad(tuned_loss, (0, 1))(0.1, x0)
    theirs = autograd.grad(autograd_twin(tuned_loss), (0, 1))(0.1, x0)
    assert_trees_close(ours, theirs, rtol=1e-8, atol=1e-10)


def test_a_tree_of_parameters_comes_back_as_a_tree():
    result = adam(grad(objective), INITIAL, num_iters=3)
    assert isinstance(result, dict) and isinstance(result["b"], list)
    assert flatten(result)[0].shape == flatten(INITIAL)[0].shape
