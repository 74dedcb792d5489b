"""A variational autoencoder whose loss draws its own noise, as NumPy users write it: s2s's
jit(grad) against JAX's with jax.random, and s2s's NumPy gradient against autograd's.

    python benchmarks/random_draws.py           # full size
    python benchmarks/random_draws.py --tiny    # what the test suite runs

(Not named random.py: run as a script, benchmarks/ comes first on sys.path, and that name
would stand in for the standard library's `random`, which tempfile imports.)

The model (`vae_loss`): a tanh MLP encoder 784-200-4 gives each example's latent mean and
log-variance (2 of each), one latent sample per example is drawn inside the loss,
`mean + exp(0.5 * log_var) * rs.standard_normal(mean.shape)`, from the RandomState `rs`
the code reads, a tanh MLP decoder 2-200-784 gives Bernoulli logits for the pixels, and
the loss is the negative evidence lower bound (KL to N(0, I) less the log-likelihood),
averaged over a batch of 100 binary images; float64 throughout (NumPy's and autograd's
type; jax's x64 is turned on for the run and put back after). The same model at 64-32-2
shows the sizes where a step's time is mostly the cost of calling it.

(1) a training step's gradient: `s2s.jit(s2s.grad(vae_loss))`, each call seeding its
    draws from `rs`, read as NumPy, against `jax.jit(jax.grad(vae_loss_jax))`, the same
    model drawing `jax.random.normal(key, ...)`, with the user's
    `key, subkey = jax.random.split(key)` in each step;
(2) the same gradient on the NumPy backend against `autograd.grad` of the same source with
    autograd's NumPy: called as `s2s.grad(vae_loss)`, and as the module s2s emits for it
    (what `s2s emit` writes), called directly;
(3) time to the first result of (1) for a new function: staging + lowering + compile +
    the first call, against jax's trace + lower + compile + first call.
Two diagnostic rows say where (1)'s time goes: s2s's drawing step against the same step
given its noise as an argument (a program that draws nothing, which jaxlib's C++ dispatcher
calls without s2s's Python), and each step's new randomness: the seed a drawing call takes
from `rs` in Python against jax's split of the key. A third says how far (2) could go: the
gradient's matrix products alone (`gradient_matrix_products`), the floor of any NumPy
gradient of the model, against autograd's whole gradient.

Checked before anything is timed: (2)'s gradients equal autograd's to rtol 1e-8 from the
same `rs` state, and leave `rs` where autograd leaves it (the same draws, in the same
order); (1)'s gradient equals that of `s2s.jit(s2s.value_and_grad(vae_loss))` from the
same `rs` state (the same seed, the same draws); and over 50 steps of each, the mean loss
and the mean of the gradient projected on a fixed random direction agree with jax's to
within 4.5 standard errors of their difference (sqrt(var_s2s/50 + var_jax/50), each
variance taken over the 50 steps; the two streams are independent, so a correct model
fails this about twice in 10^5 runs per statistic, and at full size noise 1.3x too wide on
one side fails it). The parameters stay fixed: the steps differ only by their noise.
Medians of batches of calls after a warm-up, the two sides' batches interleaved so that a
noisy machine slows both alike; (3) is the median over fresh copies of the function, in a
process where both backends are already initialized, with s2s's on-disk executable cache off.
Targets (issue 41): s2s/jax at most 1.1x for (1); s2s at least 5x faster than autograd for
(2), that is s2s/autograd at most 0.2x.
"""
import functools
import os
import runpy
import sys
import types

import numpy as np

import s2s
from s2s_runtime import generator_seed

# The timing and reading helpers of benchmarks/xla.py (benchmarks/ is not a package: loaded by path).
_xla = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla.py"))
fresh, as_numpy, disk_cache_off = _xla["fresh"], _xla["as_numpy"], _xla["disk_cache_off"]
medians_per_call, seconds_to_first_result = _xla["medians_per_call"], _xla["seconds_to_first_result"]
command_line, _fmt = _xla["command_line"], _xla["_fmt"]

# The generator the loss draws from, read as a global (the form autograd's examples take).
rs = np.random.RandomState(0)


def mlp(layers, x):
    """tanh hidden layers, then a linear one."""
    for W, b in layers[:-1]:
        x = np.tanh(x @ W + b)
    W, b = layers[-1]
    return x @ W + b


def encode(encoder, x):
    """Each example's latent mean and log-variance: the two halves of the encoder's output."""
    out = mlp(encoder, x)
    latent = out.shape[1] // 2
    return out[:, :latent], out[:, latent:]


def negative_elbo(decoder, x, z, mean, log_var):
    """KL(N(mean, exp(log_var)) || N(0, I)) less log p(x | z) for Bernoulli pixels whose
    logits are decoded from z, averaged over the batch."""
    logits = mlp(decoder, z)
    log_likelihood = (x * logits - np.logaddexp(0.0, logits)).sum()
    kl = 0.5 * (np.exp(log_var) + mean ** 2 - 1.0 - log_var).sum()
    return (kl - log_likelihood) / x.shape[0]


def vae_loss(params, x):
    """The loss of a batch with one latent sample per example, drawn from `rs`."""
    encoder, decoder = params
    mean, log_var = encode(encoder, x)
    z = mean + np.exp(0.5 * log_var) * rs.standard_normal(mean.shape)
    return negative_elbo(decoder, x, z, mean, log_var)


def vae_loss_jax(params, x, key):
    """`vae_loss` as a JAX user writes it: the noise from jax.random with a key (only run
    with `np` as jax.numpy and `jax` bound, see `model_on`)."""
    encoder, decoder = params
    mean, log_var = encode(encoder, x)
    z = mean + np.exp(0.5 * log_var) * jax.random.normal(key, mean.shape, dtype=mean.dtype)  # noqa: F821
    return negative_elbo(decoder, x, z, mean, log_var)


def vae_loss_given_noise(params, x, noise):
    """`vae_loss` with its standard normal noise passed in: a program that draws nothing,
    which jaxlib's C++ dispatcher calls without s2s's Python (the diagnostic row)."""
    encoder, decoder = params
    mean, log_var = encode(encoder, x)
    z = mean + np.exp(0.5 * log_var) * noise
    return negative_elbo(decoder, x, z, mean, log_var)


MODEL = ("mlp", "encode", "negative_elbo", "vae_loss", "vae_loss_given_noise", "vae_loss_jax")


def model_on(numpy_module, **names) -> dict:
    """The model's functions with `np` bound to `numpy_module` (autograd's or jax's NumPy) and
    to each other: the same source, run by another library."""
    namespace = {**globals(), "np": numpy_module, **names}
    namespace.update({name: types.FunctionType(globals()[name].__code__, namespace, name) for name in MODEL})
    return namespace


def vae_problems(tiny: bool) -> list:
    """(label, parameters, images): the model's size, and a small one where a step's time is
    mostly calling overhead. Parameters are ((encoder layers), (decoder layers)) of (W, b)
    pairs; the images are binary."""
    rng = np.random.default_rng(0)

    def problem(pixels, hidden, latent, batch):
        def layers(sizes):
            return tuple((rng.standard_normal((m, n)) / np.sqrt(m), np.zeros(n))
                         for m, n in zip(sizes[:-1], sizes[1:]))
        params = (layers((pixels, hidden, 2 * latent)), layers((latent, hidden, pixels)))
        images = (rng.random((batch, pixels)) < 0.3).astype(np.float64)
        return f"{pixels}-{hidden}-{latent}, b{batch}", params, images
    if tiny:
        return [problem(12, 8, 2, 4)]
    return [problem(784, 200, 2, 100), problem(64, 32, 2, 100)]


def emitted_gradient(params, x):
    """The module `s2s emit` writes for grad(vae_loss), loaded: its function takes the
    generator it draws from as the keyword `random_state`."""
    namespace = {}
    exec(compile(s2s.emit_python(s2s.grad(vae_loss), params, x), "grad_vae_loss.py", "exec"), namespace)
    return functools.partial(namespace["grad_vae_loss"], random_state=rs)


def projected(gradient, direction) -> float:
    """The gradient's inner product with a fixed direction (a tree of the same shapes)."""
    return sum(float(np.vdot(np.asarray(g), d)) for g, d in zip(s2s.tree_leaves(gradient), s2s.tree_leaves(direction)))


def assert_same_mean(ours: list, theirs: list, what: str, standard_errors: float = 4.5) -> str:
    """A two-sample z-test: the means of two independent samples differ by at most
    `standard_errors` standard errors of their difference. Returns what it found, to print."""
    error = np.sqrt(np.var(ours, ddof=1) / len(ours) + np.var(theirs, ddof=1) / len(theirs))
    difference = np.mean(ours) - np.mean(theirs)
    found = (f"{what} over {len(ours)} steps: s2s's mean {np.mean(ours):.6g}, jax's {np.mean(theirs):.6g}, "
             f"{abs(difference) / error:.2f} standard errors ({error:.3g}) apart")
    assert abs(difference) <= standard_errors * error, f"{found}: more than {standard_errors}"
    return found


def assert_trees_equal(ours, theirs, rtol: float):
    for a, b in zip(s2s.tree_leaves(ours), s2s.tree_leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=0)


def check_numpy_gradients_equal_autograd(gradients: list, params, x, autograd_grad):
    """(2): from the same `rs` state, each of s2s's NumPy gradients equals autograd's, and
    leaves `rs` where autograd leaves it (the same draws, in the same order)."""
    start = rs.get_state()
    theirs = autograd_grad(params, x)
    after_theirs = rs.get_state()
    for gradient in gradients:
        rs.set_state(start)
        assert_trees_equal(gradient(params, x), theirs, rtol=1e-8)
        assert all(np.array_equal(a, b) for a, b in zip(rs.get_state(), after_theirs)), "s2s and autograd drew differently"


def with_new_keys(jax, fn, seed: int):
    """`fn(*args, key)` called as a JAX user's training step calls it: each call splits the
    key it keeps and passes the new subkey."""
    key = jax.random.key(seed)

    def step(*args):
        nonlocal key
        key, subkey = jax.random.split(key)
        return fn(*args, subkey)
    return step


def check_jit_step_statistically(step, params, x, jax, jax_model, steps: int):
    """(1): the timed step draws as its value_and_grad does from the same seed, and its loss and
    gradient agree with jax's in distribution (see the module's docstring)."""
    value_and_grad = s2s.jit(s2s.value_and_grad(vae_loss))
    start = rs.get_state()
    gradient = step(params, x)
    rs.set_state(start)
    assert_trees_equal(gradient, value_and_grad(params, x)[1], rtol=1e-10)

    direction_rng = np.random.default_rng(1)
    direction = s2s.tree_map(lambda leaf: direction_rng.standard_normal(np.shape(leaf)), params)
    theirs_value_and_grad = with_new_keys(jax, jax.jit(jax.value_and_grad(jax_model["vae_loss_jax"])), seed=1)
    ours = [value_and_grad(params, x) for _ in range(steps)]
    theirs = [theirs_value_and_grad(params, x) for _ in range(steps)]
    print(assert_same_mean([float(loss) for loss, _ in ours], [float(loss) for loss, _ in theirs], "loss"))
    print(assert_same_mean([projected(g, direction) for _, g in ours], [projected(g, direction) for _, g in theirs],
                           "gradient . random direction"))


def run(tiny: bool):
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp

    calls, repeats, first_repeats = (3, 3, 1) if tiny else (20, 15, 7)
    rows = []
    jax_x64 = jax.config.jax_enable_x64   # (put back as it was: the test suite runs this in-process)
    jax.config.update("jax_enable_x64", True)
    try:
        jax_model = model_on(jnp, jax=jax)
        autograd_grad = autograd.grad(model_on(anp)["vae_loss"])
        problems = vae_problems(tiny)
        for label, params, x in problems:
            rows += jit_step_rows(label, params, x, jax, jax_model, calls, repeats)
            rows += numpy_gradient_rows(label, params, x, autograd_grad, calls, repeats)
        label, params, x = problems[0]
        rows.append(("(3) first result of (1), " + label, "jax", None,
                     *first_results(params, x, jax, jax_model, first_repeats)))
        split = with_new_keys(jax, lambda key: key, seed=0)
        rows.append(("    each step's new randomness: seed vs split", "split", None,
                     *medians_per_call(lambda: generator_seed(rs), split, calls * 10, repeats)))
    finally:
        jax.config.update("jax_enable_x64", jax_x64)
    print_rows(rows)
    return rows


def jit_step_rows(label, params, x, jax, jax_model, calls: int, repeats: int) -> list:
    """(1) a training step's gradient under jit, read as NumPy, after the statistical check;
    and s2s's drawing step against one given its noise (jaxlib's C++ dispatcher)."""
    with disk_cache_off():   # nothing written to the user's cache by a benchmark
        step = s2s.jit(s2s.grad(vae_loss))
        check_jit_step_statistically(step, params, x, jax, jax_model, steps=50)
        noise = rs.standard_normal(encode(params[0], x)[0].shape)
        step_given_noise = s2s.jit(s2s.grad(vae_loss_given_noise))
        step_given_noise(params, x, noise)
    jax_step = with_new_keys(jax, jax.jit(jax.grad(jax_model["vae_loss_jax"])), seed=0)
    return [(f"(1) jit(grad) {label}, read as NumPy", "jax", 1.1,
             *medians_per_call(lambda: as_numpy(step(params, x)), lambda: as_numpy(jax_step(params, x)),
                               calls, repeats)),
            ("    s2s drawing vs given the noise (dispatcher)", "s2s+noise", None,
             *medians_per_call(lambda: as_numpy(step(params, x)), lambda: as_numpy(step_given_noise(params, x, noise)),
                               calls, repeats))]


def numpy_gradient_rows(label, params, x, autograd_grad, calls: int, repeats: int) -> list:
    """(2) the NumPy gradient, called through s2s.grad and as the emitted module, against
    autograd's, after checking they are equal."""
    numpy_grad, emitted = s2s.grad(vae_loss), emitted_gradient(params, x)
    check_numpy_gradients_equal_autograd([numpy_grad, emitted], params, x, autograd_grad)
    rows = [(f"(2) grad on NumPy {label}, {how}", "autograd", 0.2,
             *medians_per_call(lambda: ours(params, x), lambda: autograd_grad(params, x), calls, repeats))
            for how, ours in (("s2s.grad", numpy_grad), ("emitted module", emitted))]
    products = gradient_matrix_products(params, x)
    return rows + [("    its matrix products alone (a floor for any)", "autograd", None,
                    *medians_per_call(products, lambda: autograd_grad(params, x), calls, repeats))]


def gradient_matrix_products(params, x):
    """The matrix products every reverse-mode gradient of the model computes, and nothing
    else: each layer's forward product, its weights' cotangent and (past the first layer)
    its input's. No gradient of the model can take less time than these (at 784-200-2
    they cost about half of autograd's whole gradient, so there s2s can be about 2x faster
    than autograd, not 5x: the diagnostic row says how close to this floor it is)."""
    layers = [layer for part in params for layer in part]
    inputs = [x] + [np.ones((x.shape[0], W.shape[0])) for W, _ in layers[1:]]
    cotangents = [np.ones((x.shape[0], W.shape[1])) for W, _ in layers]

    def products():
        for k, ((W, _), a, g) in enumerate(zip(layers, inputs, cotangents)):
            a @ W, a.T @ g
            if k:
                g @ W.T
    return products


def first_results(params, x, jax, jax_model, repeats: int) -> tuple[float, float]:
    """(3): seconds to the first result of jit(grad) of a function neither side has seen."""
    def ours():
        return as_numpy(s2s.jit(s2s.grad(fresh(vae_loss)))(params, x))

    def theirs():
        return as_numpy(jax.jit(jax.grad(fresh(jax_model["vae_loss_jax"])))(params, x, jax.random.key(0)))
    return seconds_to_first_result(ours, theirs, repeats)


def print_rows(rows):
    """Prints (name, other's name, target, s2s seconds, other's seconds) rows side by side
    with their ratio and its target."""
    print(f"{'benchmark':50} {'s2s':>10} {'other':>10} {'vs':>10} {'s2s/other':>10} {'target':>8}")
    for name, other, target, t_ours, t_theirs in rows:
        ratio = t_ours / t_theirs
        verdict = "" if target is None else f"<={target:.2f}x {'met' if ratio <= target else 'MISSED'}"
        print(f"{name:50} {_fmt(t_ours):>10} {_fmt(t_theirs):>10} {other:>10} {ratio:9.2f}x  {verdict}")


def main(argv=None):
    return command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
