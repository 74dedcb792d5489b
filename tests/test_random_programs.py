"""Realistic programs that draw random numbers inside the function they differentiate
(`tests/fixtures/random_programs.py`: black-box SVI, a Bayesian neural net,
natural-gradient SVI, mixture VI, a VAE, a GAN, a dropout MLP, a noisy RNN), run with s2s
as written for autograd, the imports changed and nothing else.

Oracles: autograd running the same source with autograd's imports, from the same generator
state (the NumPy backend, the emitted module and jit(backend="python") draw NumPy's own
numbers, so the draws are the same and the gradients equal to rounding); under XLA, which
draws other numbers from the same distributions, the NumPy backend's averages over many
calls; and plain NumPy evaluating the objective, for training.
"""
import inspect
import pickle
import types
from dataclasses import dataclass
from typing import Callable

import numpy as np
import numpy.random as npr
import pytest

import s2s
from s2s.errors import StagingError
from tests.fixtures import random_programs as programs

autograd = pytest.importorskip("autograd")


def with_autograd_imports(module):
    """`module` run again from its source with the import lines its `AUTOGRAD_IMPORTS`
    names replaced by autograd's: the same program, written for autograd."""
    source = inspect.getsource(module)
    for line, replacement in module.AUTOGRAD_IMPORTS.items():
        assert source.count(f"\n{line}\n") == 1, line
        source = source.replace(f"\n{line}\n", f"\n{replacement}\n")
    twin = types.ModuleType(f"{module.__name__}_with_autograd")
    exec(compile(source, f"{module.__file__} (autograd's imports)", "exec"), twin.__dict__)
    return twin


autograd_programs = with_autograd_imports(programs)

# ---------------------------------------------------------------------------------------
# Generators: each program draws from a RandomState, a Generator, or the RandomState
# behind NumPy's global functions (np.random.rand ...).


def global_state(seed):
    np.random.seed(seed)
    return np.random.mtrand._rand


def state_of(generator) -> bytes:
    """The generator's whole state, comparable with ==."""
    if isinstance(generator, np.random.Generator):
        return pickle.dumps(generator.bit_generator.state)
    return pickle.dumps(generator.get_state())


def restore(generator, state: bytes):
    if isinstance(generator, np.random.Generator):
        generator.bit_generator.state = pickle.loads(state)
    else:
        generator.set_state(pickle.loads(state))


def run_from(state, generator, fn, *args):
    """`fn(*args)` run from the generator state `state`, and the state it leaves."""
    restore(generator, state)
    result = fn(*args)
    return result, state_of(generator)


# ---------------------------------------------------------------------------------------
# The programs, their arguments and the generator each draws from.

data_rs = npr.RandomState(1)
REGRESSION = programs.toy_regression_data(12, data_rs)
OBSERVATIONS = data_rs.randn(3)
IMAGES = np.where(data_rs.rand(6, 8) < 0.5, -1.0, 1.0)
REAL = data_rs.beta(2.0, 5.0, size=(6, 3))
MLP_DATA = (data_rs.randn(5, 3), data_rs.randn(5))
BNN_SIZES = [1, 8, 1]
BNN_WEIGHTS = 2 * 8 + 9


@dataclass(frozen=True)
class Program:
    objective: Callable        # (programs module, generator) -> the objective it draws from
    args: tuple                # the objective's arguments
    make_generator: Callable   # seed -> a generator of the kind the objective draws from
    argnums: object = 0


def bnn_objective(module, rs):
    log_posterior, num_weights = module.bnn_log_posterior(BNN_SIZES, *REGRESSION, prior_std=1.0, noise_std=0.1)
    return module.black_box_svi(log_posterior, num_weights, 8, rs)[0]


def gaussian_model_svi(module, rs):
    return module.black_box_svi(module.gaussian_model_log_density(OBSERVATIONS), 6, 32, rs)


PROGRAMS = {
    "black-box SVI": Program(
        lambda m, rs: m.black_box_svi(m.banana_log_density, 2, 32, rs)[0],
        (np.array([0.5, 0.5, -1.0, -1.0]),), npr.RandomState),
    "Bayesian neural net": Program(
        bnn_objective, (np.concatenate([0.5 * npr.RandomState(2).randn(BNN_WEIGHTS), -3.0 * np.ones(BNN_WEIGHTS)]),),
        npr.RandomState),
    "natural-gradient SVI": Program(
        lambda m, rs: gaussian_model_svi(m, rs)[0],
        (np.concatenate([-np.ones(3), np.zeros(3), -2.0 * np.ones(6)]),), npr.RandomState),
    "mixture VI": Program(
        lambda m, rs: m.mixture_svi(m.two_gaussians_log_density, 2, 3, 16, rs),
        (np.concatenate([np.zeros(3), 0.5 * npr.RandomState(3).randn(12)]),), npr.RandomState),
    "VAE": Program(
        lambda m, rng: m.vae(rng),
        ((programs.init_layers([8, 6, 4], 0.3, npr.RandomState(4)),
          programs.init_layers([2, 6, 8], 0.3, npr.RandomState(5))), IMAGES),
        np.random.default_rng),
    "GAN": Program(
        lambda m, _: m.gan_value(6, 2),
        (programs.init_layers([2, 5, 3], 0.5, npr.RandomState(6)),
         programs.init_layers([3, 5, 1], 0.5, npr.RandomState(7)), REAL),
        global_state, argnums=(0, 1)),
    "dropout MLP": Program(
        lambda m, _: m.dropout_mlp_loss,
        ((npr.RandomState(8).randn(3, 6), npr.RandomState(9).randn(6)), *MLP_DATA), global_state),
}


def assert_trees_close(got, expected, rtol=1e-10):
    """Equal to rounding: the same samples, derivative formulas that may differ in the
    last bits."""
    got_leaves, expected_leaves = s2s.tree_leaves(got), s2s.tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves):
        np.testing.assert_allclose(np.asarray(g), e, rtol=rtol, atol=1e-12)


def assert_same_draws_and_results(ours, oracle, generator, args):
    """`ours` and the `oracle` (autograd, or plain NumPy), run from one generator state,
    draw the same samples: they leave the generator in the same state, and their results,
    which move by the Monte Carlo noise (0.01 and more here) when the samples differ, agree
    to rounding."""
    start = state_of(generator)
    expected, state_after_oracle = run_from(start, generator, oracle, *args)
    got, state_after_s2s = run_from(start, generator, ours, *args)
    assert state_after_s2s == state_after_oracle, "s2s drew other numbers than the oracle, or more or fewer"
    assert_trees_close(got, expected)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_value_and_gradient_are_autograds_from_the_same_generator_state(name):
    program = PROGRAMS[name]
    generator = program.make_generator(0)
    ours = s2s.value_and_grad(program.objective(programs, generator), argnums=program.argnums)
    theirs = autograd.value_and_grad(program.objective(autograd_programs, generator), argnum=program.argnums)
    assert_same_draws_and_results(ours, theirs, generator, program.args)


def emitted(fn, *args):
    """The function of `s2s.emit_python(fn, *args)`'s module, the module run on its own."""
    namespace = {}
    exec(compile(s2s.emit_python(fn, *args), "<emitted>", "exec"), namespace)
    return namespace[namespace["__all__"][0]]


def with_generator(module_fn, generator):
    """`module_fn` given the generator its module draws from: the keyword-only parameter
    it declares for a RandomState (`random_state`) or a Generator (`rng`); none for NumPy's
    global state, which the module names itself (`np.random`)."""
    keyword_only = [p.name for p in inspect.signature(module_fn).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if generator is np.random.mtrand._rand:
        assert keyword_only == []
        return module_fn
    assert keyword_only == ["rng" if isinstance(generator, np.random.Generator) else "random_state"]
    return lambda *args: module_fn(*args, **{keyword_only[0]: generator})


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_emitted_gradient_module_draws_what_autograd_draws(name):
    program = PROGRAMS[name]
    generator = program.make_generator(0)
    module_fn = emitted(s2s.grad(program.objective(programs, generator), argnums=program.argnums), *program.args)
    theirs = autograd.grad(program.objective(autograd_programs, generator), argnum=program.argnums)
    assert_same_draws_and_results(with_generator(module_fn, generator), theirs, generator, program.args)


# ---------------------------------------------------------------------------------------
# XLA draws other numbers: the estimates of the two backends are compared as samples.

CALLS = 200


def estimates(fn, args, calls=CALLS):
    """`calls` results of `fn(*args)`, each flattened into one row."""
    return np.array([np.concatenate([np.ravel(leaf) for leaf in s2s.tree_leaves(fn(*args))])
                     for _ in range(calls)])


def assert_same_means(xla_runs, numpy_runs):
    """The two backends' calls are independent samples of the same estimator, so for each
    entry the difference of the means over n calls, divided by its standard error
    sqrt((var_xla + var_numpy) / n), is about standard normal (200 calls: the central limit
    theorem holds well for these smooth estimators). 5 standard errors leaves a chance
    below 6e-7 per entry (3e-5 over the 51 entries of the largest program) of failing on
    right samples; the seeds are fixed, so the test is deterministic. Entries the samples
    do not move (zero variance) must agree to rounding."""
    n = len(xla_runs)
    assert len({row.tobytes() for row in xla_runs}) == n      # every call draws anew
    difference = xla_runs.mean(axis=0) - numpy_runs.mean(axis=0)
    standard_error = np.sqrt((xla_runs.var(axis=0, ddof=1) + numpy_runs.var(axis=0, ddof=1)) / n)
    rounding = 1e-9 * (1.0 + np.abs(numpy_runs.mean(axis=0)))
    assert np.all(np.abs(difference) <= 5.0 * standard_error + rounding), \
        np.max(np.abs(difference) / (standard_error + rounding))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_xla_estimates_the_same_objective_and_gradient_on_average(name):
    program = PROGRAMS[name]
    generator = program.make_generator(1)
    value_and_grad = s2s.value_and_grad(program.objective(programs, generator), argnums=program.argnums)
    numpy_runs = estimates(value_and_grad, program.args)
    assert_same_means(estimates(s2s.jit(value_and_grad), program.args), numpy_runs)


# ---------------------------------------------------------------------------------------
# Training: an optimizer written here, run on the NumPy backend's gradients; the objective
# before and after estimated by plain NumPy (the program called as is) from one seed.


def adam(gradient, params, steps, step_size, b1=0.9, b2=0.999, eps=1e-8):
    first = s2s.tree_map(np.zeros_like, params)
    second = s2s.tree_map(np.zeros_like, params)
    for t in range(1, steps + 1):
        g = gradient(params)
        first = s2s.tree_map(lambda m, d: b1 * m + (1 - b1) * d, first, g)
        second = s2s.tree_map(lambda v, d: b2 * v + (1 - b2) * d * d, second, g)
        params = s2s.tree_map(
            lambda p, m, v: p - step_size * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps),
            params, first, second)
    return params


def sgd(gradient, params, steps, step_size):
    for _ in range(steps):
        params = params - step_size * gradient(params)
    return params


def reseed(generator, seed):
    if isinstance(generator, np.random.Generator):
        generator.bit_generator.state = np.random.default_rng(seed).bit_generator.state
    else:
        generator.seed(seed)


def mean_objective(objective, generator, args, calls=50):
    """The objective averaged over `calls` draws from one seed of `generator`, so two
    parameter settings are compared on the same draws; and its standard error."""
    reseed(generator, 99)
    values = [objective(*args) for _ in range(calls)]
    return np.mean(values), np.std(values) / np.sqrt(calls)


def assert_trained(objective, generator, before_args, after_args):
    """The trained parameters' objective is lower by more than the estimates' noise."""
    before, noise_before = mean_objective(objective, generator, before_args)
    after, noise_after = mean_objective(objective, generator, after_args)
    assert after < before - 3 * (noise_before + noise_after), (before, after)


TRAINING_STEPS = {"black-box SVI": (40, 0.1), "Bayesian neural net": (40, 0.05), "natural-gradient SVI": (40, 0.1),
                  "mixture VI": (40, 0.1), "VAE": (40, 0.05), "dropout MLP": (40, 0.05)}


@pytest.mark.parametrize("name", sorted(TRAINING_STEPS))
def test_a_few_adam_steps_on_the_numpy_backend_reduce_the_objective(name):
    program = PROGRAMS[name]
    generator = program.make_generator(2)
    objective = program.objective(programs, generator)
    params, rest = program.args[0], program.args[1:]
    steps, step_size = TRAINING_STEPS[name]
    trained = adam(lambda p: s2s.grad(objective)(p, *rest), params, steps, step_size)
    assert_trained(objective, generator, program.args, (trained, *rest))


def test_gan_training_the_discriminator_raises_the_value_and_training_the_generator_lowers_it():
    program = PROGRAMS["GAN"]
    generator = program.make_generator(2)
    value = program.objective(programs, generator)
    gen_params, dsc_params, real = program.args
    gradient = s2s.grad(value, argnums=(0, 1))
    trained_dsc = adam(lambda d: s2s.tree_map(np.negative, gradient(gen_params, d, real)[1]), dsc_params, 30, 0.05)
    assert_trained(lambda g, d: -value(g, d, real), generator, (gen_params, dsc_params), (gen_params, trained_dsc))
    trained_gen = adam(lambda g: gradient(g, trained_dsc, real)[0], gen_params, 30, 0.05)
    assert_trained(lambda g, d: value(g, d, real), generator, (gen_params, trained_dsc), (trained_gen, trained_dsc))


# ---------------------------------------------------------------------------------------
# Natural-gradient SVI: s2s.grad called inside the function staged (autograd.grad in
# autograd's copy), the gradient preconditioned by the inverse Fisher information.


def natural_gradient(module, rs):
    return module.natural_gradient_of(*gaussian_model_svi(module, rs))


NATURAL_GRADIENT_ARGS = PROGRAMS["natural-gradient SVI"].args


@pytest.mark.parametrize("how", ["numpy backend", "emitted module", "jit python"])
def test_the_natural_gradient_is_autograds_from_the_same_generator_state(how):
    rs = npr.RandomState(0)
    ours = natural_gradient(programs, rs)
    if how == "emitted module":
        ours = with_generator(emitted(ours, *NATURAL_GRADIENT_ARGS), rs)
    elif how == "jit python":
        ours = s2s.jit(ours, backend="python")
    assert_same_draws_and_results(ours, natural_gradient(autograd_programs, rs), rs, NATURAL_GRADIENT_ARGS)


def test_xla_estimates_the_same_natural_gradient_on_average():
    ours = natural_gradient(programs, npr.RandomState(1))
    assert_same_means(estimates(s2s.jit(ours), NATURAL_GRADIENT_ARGS), estimates(ours, NATURAL_GRADIENT_ARGS))


def test_sgd_along_the_natural_gradient_reduces_the_objective():
    rs = npr.RandomState(2)
    objective, unpack = gaussian_model_svi(programs, rs)
    trained = sgd(programs.natural_gradient_of(objective, unpack), NATURAL_GRADIENT_ARGS[0], 40, 0.05)
    assert_trained(objective, rs, NATURAL_GRADIENT_ARGS, (trained,))


# ---------------------------------------------------------------------------------------
# The dropout MLP under vmap and checkpoint, and noise drawn in each step of a scan.

DROPOUT_PARAMS = PROGRAMS["dropout MLP"].args[0]


def test_per_example_gradients_under_vmap_draw_as_a_loop_over_the_examples():
    """vmap draws each example's mask after the previous example's (one batched draw, the
    batch axis first), as a loop over the examples does: the masks are the loop's, the
    per-example gradients autograd's."""
    x, y = MLP_DATA
    per_example = s2s.vmap(s2s.grad(programs.dropout_mlp_loss), in_axes=(None, 0, 0))
    example_grad = autograd.grad(autograd_programs.dropout_mlp_loss)

    def loop(params, x, y):
        grads = [example_grad(params, x[i], y[i]) for i in range(len(x))]
        return tuple(np.stack(g) for g in zip(*grads))
    assert_same_draws_and_results(per_example, loop, global_state(3), (DROPOUT_PARAMS, x, y))


def checkpointed_dropout_loss(params, x, y, rate=0.3):
    W1, W2 = params
    h = s2s.checkpoint(programs.dropout_block, static_argnums=(2,))(x, W1, rate)
    return np.sum((h @ W2 - y) ** 2)


@pytest.mark.parametrize("backend", ["numpy", "python", "xla"])
def test_a_checkpointed_dropout_block_recomputes_with_the_same_mask(backend):
    """With the checkpoint, the backward pass recomputes the block: it must reuse the mask
    the forward pass drew, so the gradient is the one without the checkpoint, from the same
    generator state (under XLA: the same seed, taken from that state)."""
    transform = {"numpy": s2s.grad, "python": lambda f: s2s.jit(s2s.grad(f), backend="python"),
                 "xla": lambda f: s2s.jit(s2s.grad(f))}[backend]
    generator = global_state(4)
    start = state_of(generator)
    with_checkpoint, _ = run_from(start, generator, transform(checkpointed_dropout_loss), DROPOUT_PARAMS, *MLP_DATA)
    without, _ = run_from(start, generator, transform(programs.dropout_mlp_loss), DROPOUT_PARAMS, *MLP_DATA)
    for a, b in zip(with_checkpoint, without):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    another_mask = transform(checkpointed_dropout_loss)(DROPOUT_PARAMS, *MLP_DATA)   # drawn anew
    assert not np.array_equal(np.asarray(another_mask[0]), np.asarray(with_checkpoint[0]))


rnn_rs = npr.RandomState(0)
RNN_ARGS = (0.5 * npr.RandomState(10).randn(4, 4), np.zeros(4), npr.RandomState(11).randn(6, 4))


def rnn_loss_by(loop):
    """`programs.noisy_rnn`'s loss with its steps run by `loop(step, h, xs)`, which returns
    the sum of the steps' losses."""
    def loss(W, h, xs):
        return loop(programs.noisy_rnn_step(W, 0.1, rnn_rs), h, xs)
    return loss


def while_loop(bounded: bool):
    """The steps run by a `lax.while_loop` on a counter, told `max_iters` if `bounded`."""
    def loop(step, h, xs):
        def body(carry):
            t, h, total = carry
            h, step_loss = step(h, xs[t])
            return t + 1, h, total + step_loss
        bound = {"max_iters": xs.shape[0]} if bounded else {}
        return s2s.lax.while_loop(lambda carry: carry[0] < xs.shape[0], body, (0, h, 0.0), **bound)[2]
    return loop


def checkpointed_python_loop(step, h, xs):
    total = 0.0
    for t in s2s.checkpointed(range(xs.shape[0]), 2):
        h, step_loss = step(h, xs[t])
        total = total + step_loss
    return total


NOISY_LOOPS = {
    "lax.scan": rnn_loss_by(lambda step, h, xs: np.sum(s2s.lax.scan(step, h, xs)[1])),
    "lax.scan unroll=2": rnn_loss_by(lambda step, h, xs: np.sum(s2s.lax.scan(step, h, xs, unroll=2)[1])),
    "lax.scan checkpoints=2": rnn_loss_by(lambda step, h, xs: np.sum(s2s.lax.scan(step, h, xs, checkpoints=2)[1])),
    "lax.scan checkpoints=sqrt": rnn_loss_by(
        lambda step, h, xs: np.sum(s2s.lax.scan(step, h, xs, checkpoints="sqrt")[1])),
    "lax.while_loop max_iters": rnn_loss_by(while_loop(bounded=True)),
    "lax.while_loop": rnn_loss_by(while_loop(bounded=False)),
    "s2s.checkpointed loop": rnn_loss_by(checkpointed_python_loop),
    "python for loop": programs.noisy_rnn(0.1, rnn_rs),
}
BACKENDS = {
    "numpy": lambda fn, args: fn,
    "jit python": lambda fn, args: s2s.jit(fn, backend="python"),
    "emitted module": lambda fn, args: with_generator(emitted(fn, *args), rnn_rs),
}


@pytest.mark.parametrize("loop, backend", [
    (loop, backend) for loop in sorted(NOISY_LOOPS) for backend in sorted(BACKENDS)
    if (loop, backend) != ("python for loop", "numpy")])   # (that one is plain NumPy)
def test_a_loop_draws_anew_in_each_step_as_a_python_loop_does(loop, backend):
    """The loss run by s2s (on NumPy values a staged loop runs eagerly) is the plain NumPy
    loop's, drawn from the same state."""
    ours = BACKENDS[backend](NOISY_LOOPS[loop], RNN_ARGS)
    assert_same_draws_and_results(ours, programs.noisy_rnn(0.1, rnn_rs), rnn_rs, RNN_ARGS)


# Reverse mode of "lax.scan checkpoints=2", "s2s.checkpointed loop" and "lax.while_loop"
# (no bound) runs their steps again, from checkpointed carries or the whole loop: they carry
# the generator's state, so the steps run again draw the forward's numbers.
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("loop", sorted(NOISY_LOOPS))
def test_the_gradient_of_a_loop_drawing_in_each_step_is_autograds(loop, backend):
    theirs = autograd.grad(autograd_programs.noisy_rnn(0.1, rnn_rs), argnum=(0, 1))
    ours = BACKENDS[backend](s2s.grad(NOISY_LOOPS[loop], argnums=(0, 1)), RNN_ARGS)
    assert_same_draws_and_results(ours, theirs, rnn_rs, RNN_ARGS)


@pytest.mark.parametrize("loop", ["lax.scan checkpoints=2", "s2s.checkpointed loop", "lax.while_loop"])
def test_on_xla_a_loop_run_again_draws_the_forwards_numbers(loop):
    """XLA draws other numbers than NumPy, but the same ones for the same seed: the
    gradient of a loop whose reverse mode runs its steps again equals that of the loop
    saving every step (`lax.scan`), from the same generator state."""
    args = (np.asarray(RNN_ARGS[0]), RNN_ARGS[1], RNN_ARGS[2])
    rnn_rs.seed(4)
    saved = s2s.jit(s2s.grad(NOISY_LOOPS["lax.scan"], argnums=(0, 1)))(*args)
    after_saved = rnn_rs.get_state()[1]
    rnn_rs.seed(4)
    run_again = s2s.jit(s2s.grad(NOISY_LOOPS[loop], argnums=(0, 1)))(*args)
    np.testing.assert_allclose(np.asarray(run_again[0]), np.asarray(saved[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(run_again[1]), np.asarray(saved[1]), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(rnn_rs.get_state()[1], after_saved)


@pytest.mark.parametrize("loop", ["lax.scan checkpoints=2", "s2s.checkpointed loop", "lax.while_loop"])
def test_per_example_gradients_of_a_loop_run_again_are_those_of_the_loop_saving_every_step(loop):
    """vmap of the gradient: every example's steps, run again, draw that example's numbers."""
    W, h, xs = RNN_ARGS
    hs = np.stack([h, h + 0.5, h - 0.5])
    saved = s2s.vmap(s2s.grad(NOISY_LOOPS["lax.scan"], argnums=(0, 1)), (None, 0, None))
    run_again = s2s.vmap(s2s.grad(NOISY_LOOPS[loop], argnums=(0, 1)), (None, 0, None))
    assert_same_draws_and_results(run_again, saved, rnn_rs, (W, hs, xs))


# ---------------------------------------------------------------------------------------
# Found while writing these programs.


def test_a_generator_passed_as_an_argument_is_a_parameter_of_the_emitted_module():
    params, images = PROGRAMS["VAE"].args
    rng = np.random.default_rng(0)

    def objective(params, images, rng):
        return -programs.vae_lower_bound(params, images, rng)
    theirs = autograd.grad(lambda p, i, r: -autograd_programs.vae_lower_bound(p, i, r))
    assert_same_draws_and_results(emitted(s2s.grad(objective), params, images, rng), theirs, rng, (params, images, rng))


def test_the_emitted_module_says_in_its_docstring_which_generator_it_takes():
    program = PROGRAMS["black-box SVI"]
    source = s2s.emit_python(s2s.grad(program.objective(programs, npr.RandomState(0))), *program.args)
    docstring = source.split('"""')[1]
    assert "random_state" in docstring
