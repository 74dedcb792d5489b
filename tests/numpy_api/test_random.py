"""np.random in staged code: every call draws anew from the generator the code names, the
numbers NumPy's own (the same generator state gives the same numbers as the function run
without s2s), on the NumPy backend, in the emitted module and under jit(backend="python");
under XLA, fresh seeds from that generator and NumPy's distributions."""
import numpy as np
import numpy.random as npr
import pytest

import s2s
from s2s.errors import StagingError, UnsupportedFunctionError

rs = npr.RandomState(0)
gen = np.random.default_rng(0)

# name -> (a function drawing from `rs`, `gen` or NumPy's global state; its arguments)
DRAWS = {
    "np.random.randn": lambda x: x + np.random.randn(3),
    "np.random.rand": lambda x: x * np.random.rand(3),
    "npr.normal, array params": lambda x: npr.normal(x, np.exp(x)),
    "npr.uniform": lambda x: x + npr.uniform(-1.0, 2.0, size=3),
    "rs.standard_normal": lambda x: x + rs.standard_normal(x.shape),
    "rs.normal size": lambda x: rs.normal(1.0, 2.0, size=(2, 3)) + x,
    "rs.random_sample": lambda x: x + rs.random_sample((3,)),
    "rs.randint": lambda x: x + rs.randint(0, 5, size=3),
    "rs.randint one bound": lambda x: x + rs.randint(7, size=3),
    "rs.choice int": lambda x: x + rs.choice(10, size=3),
    "rs.choice array": lambda x: rs.choice(x, size=4),
    "rs.choice p": lambda x: x + rs.choice(3, size=3, p=np.array([0.2, 0.5, 0.3])),
    "rs.permutation int": lambda x: x + rs.permutation(3),
    "rs.permutation array": lambda x: rs.permutation(x),
    "gen.standard_normal": lambda x: x + gen.standard_normal(3),
    "gen.normal": lambda x: gen.normal(x, 0.5),
    "gen.random": lambda x: x + gen.random(3),
    "gen.uniform": lambda x: x + gen.uniform(x, 3.0),
    "gen.integers": lambda x: x + gen.integers(2, 9, size=3),
    "gen.integers endpoint": lambda x: x + gen.integers(0, 3, size=3, endpoint=True),
    "gen.choice": lambda x: gen.choice(x, size=5),
    "gen.permutation": lambda x: gen.permutation(x),
    "gen.standard_normal f32": lambda x: gen.standard_normal(3, dtype=np.float32),
    "scalar draw": lambda x: x * np.random.standard_normal(),
}


def _reseed():
    global rs, gen
    rs, gen = npr.RandomState(7), np.random.default_rng(7)
    np.random.seed(7)


@pytest.mark.parametrize("name", sorted(DRAWS))
@pytest.mark.parametrize("how", ["staged and run", "emitted module", "jit python"])
def test_draws_are_numpys_own_numbers_on_every_call(name, how):
    fn = DRAWS[name]
    x = np.array([0.5, -1.0, 2.0])
    _reseed()
    expected = [fn(x), fn(x)]   # two calls: two different draws
    _reseed()
    if how == "staged and run":
        got = [s2s.vmap(fn, in_axes=None, axis_size=1)(x)[0] for _ in range(2)]
    elif how == "jit python":
        jitted = s2s.jit(fn, backend="python")
        got = [jitted(x) for _ in range(2)]
    else:
        source = s2s.emit_python(fn, x)
        namespace = {}
        exec(compile(source, "<emitted>", "exec"), namespace)
        module_fn = next(v for k, v in namespace.items() if callable(v) and not k.startswith("_")
                         and getattr(v, "__module__", None) is None)
        kwargs = {"random_state": rs, "rng": gen}
        params = module_fn.__code__.co_varnames[module_fn.__code__.co_argcount:
                                                module_fn.__code__.co_argcount + module_fn.__code__.co_kwonlyargcount]
        got = [module_fn(x, **{k: kwargs[k] for k in params}) for _ in range(2)]
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(g), e)
    assert not np.array_equal(np.asarray(got[0]), np.asarray(got[1])) or name.startswith("rs.permutation")


def test_the_emitted_module_takes_a_generator_it_cannot_write_as_a_keyword_parameter():
    x = np.ones(3)
    source = s2s.emit_python(DRAWS["rs.standard_normal"], x)
    assert "*, random_state)" in source and "random_state.standard_normal(size=(3,))" in source
    global_state = s2s.emit_python(DRAWS["np.random.randn"], x)
    assert "np.random.standard_normal(size=(3,))" in global_state and "random_state" not in global_state


def test_a_draw_is_a_constant_and_the_reparameterized_sample_differentiates_in_its_parameters():
    def loss(mean, log_std):
        w = mean + np.exp(log_std) * rs.standard_normal(3)
        return np.sum(w ** 2)
    mean, log_std = np.array([0.1, 0.2, 0.3]), np.array([-1.0, 0.0, 0.5])
    _reseed()
    g_mean, g_log_std = s2s.grad(loss, argnums=(0, 1))(mean, log_std)
    _reseed()
    eps = rs.standard_normal(3)
    w = mean + np.exp(log_std) * eps
    np.testing.assert_allclose(g_mean, 2 * w)
    np.testing.assert_allclose(g_log_std, 2 * w * eps * np.exp(log_std))


def test_an_unused_draw_still_advances_the_generator():
    def f(x):
        rs.standard_normal(5)   # drawn and dropped: the next draw is NumPy's next one
        return x + rs.standard_normal(3)
    _reseed()
    expected = f(np.zeros(3))
    _reseed()
    np.testing.assert_array_equal(s2s.jit(f, backend="python")(np.zeros(3)), expected)


def test_vmap_draws_for_each_example_as_a_loop_over_the_examples_would():
    def per_example(w):
        return w * rs.standard_normal()
    _reseed()
    expected = np.array([per_example(1.0) for _ in range(4)])
    _reseed()
    np.testing.assert_array_equal(s2s.vmap(per_example)(np.ones(4)), expected)
    _reseed()
    perms = s2s.vmap(lambda x: x[rs.permutation(3)])(np.tile(np.arange(3.0), (2, 1)))
    _reseed()
    np.testing.assert_array_equal(perms, np.stack([np.arange(3.0)[rs.permutation(3)] for _ in range(2)]))


REFUSED = {
    "a staged size": (lambda x: rs.standard_normal(x.sum().astype(int)), StagingError, "size"),
    "a staged bound": (lambda x: rs.randint(0, x.sum().astype(int)), StagingError, "high"),
    "shuffle": (lambda x: rs.shuffle(x), UnsupportedFunctionError, "permutation"),
    "choice without replacement": (lambda x: rs.choice(x, 2, replace=False), UnsupportedFunctionError,
                                   "permutation"),
    "an unsupported method": (lambda x: x + rs.gamma(2.0, size=3), UnsupportedFunctionError, "gamma"),
    "seeding inside": (lambda x: np.random.seed(0) or x, UnsupportedFunctionError, "outside"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_cannot_be_staged_faithfully_is_a_clear_error(name):
    fn, error, fragment = REFUSED[name]
    with pytest.raises(error, match=fragment):
        s2s.jit(fn, backend="python")(np.ones(3))


def test_xla_draws_fresh_samples_from_numpys_distributions_seeded_by_the_generator():
    from scipy import stats
    global rs

    def normal(x):
        return x + rs.standard_normal(x.shape)
    jitted = s2s.jit(normal)
    x = np.zeros(20000)
    rs = npr.RandomState(3)
    first, second = np.asarray(jitted(x)), np.asarray(jitted(x))
    assert not np.array_equal(first, second)   # a fresh seed on every call
    rs = npr.RandomState(3)
    np.testing.assert_array_equal(np.asarray(jitted(x)), first)   # reproducible from the generator's state
    # Kolmogorov-Smirnov at the 0.1% level, and the first two moments within 5 standard errors.
    assert stats.kstest(first, "norm").pvalue > 1e-3
    assert abs(first.mean()) < 5 / np.sqrt(x.size) and abs(first.var() - 1) < 5 * np.sqrt(2 / x.size)
    uniform = np.asarray(s2s.jit(lambda v: v + gen.uniform(-1.0, 2.0, size=v.shape))(x))
    assert stats.kstest(uniform, stats.uniform(-1.0, 3.0).cdf).pvalue > 1e-3
    integers = np.asarray(s2s.jit(lambda v: v + rs.randint(0, 10, size=v.shape))(x))
    counts = np.bincount(integers.astype(int), minlength=10)
    assert integers.min() == 0 and integers.max() == 9 and stats.chisquare(counts).pvalue > 1e-3


def _noisy_scan(theta, checkpoints=None):
    def step(c, _):
        return c * theta + rs.standard_normal(2), None
    return np.sum(s2s.lax.scan(step, np.ones(2), None, length=4, checkpoints=checkpoints)[0] ** 2)


def test_a_staged_loop_draws_on_every_step_and_its_gradient_sees_the_forward_draws():
    """A draw inside a scan's body is never moved out of the loop (it is not loop-invariant
    code: each step draws anew), and reverse mode saves each step's draw."""
    import autograd
    import autograd.numpy as anp

    def python_loop(theta):
        c = anp.ones(2)
        for _ in range(4):
            c = c * theta + rs.standard_normal(2)
        return anp.sum(c ** 2)
    _reseed()
    expected = autograd.grad(python_loop)(0.7)
    for grad in (s2s.grad(_noisy_scan), s2s.jit(s2s.grad(_noisy_scan), backend="python")):
        _reseed()
        np.testing.assert_allclose(grad(0.7), expected, rtol=1e-13)


def test_a_loop_reversed_by_running_its_steps_again_draws_what_it_drew_forward():
    """A checkpointed scan and a while loop without a bound run their steps again in
    reverse mode: the steps draw the forward pass's numbers again (the loop carries the
    generator's state, `loops/replay.py`), and the generator ends where plain NumPy leaves
    it. Checked on a RandomState and on Generators of three bit generators, whose states
    take other words."""
    import autograd
    import autograd.numpy as anp

    def unbounded(theta, generator):
        x, n = theta, 0.0
        while x < 30.0:   # no bound on its steps: reverse mode runs it again
            x = x * 2.0 + generator.random()
            n = n + 1.0
        return x * n

    def unbounded_ref(theta, generator):
        x, n = theta, 0.0
        while x < 30.0:
            x = x * 2.0 + generator.random()
            n = n + 1.0
        return x * n

    def scanned(theta, generator):
        def step(c, _):
            return anp.sin(c * theta) + generator.standard_normal(2), None
        c = anp.ones(2)
        for _ in range(5):
            c = step(c, None)[0]
        return anp.sum(c ** 2)

    def checkpointed(theta, generator):
        def step(c, _):
            return np.sin(c * theta) + generator.standard_normal(2), None
        return np.sum(s2s.lax.scan(step, np.ones(2), None, length=5, checkpoints=2)[0] ** 2)
    for make in (lambda: np.random.RandomState(3), lambda: np.random.Generator(np.random.PCG64(3)),
                 lambda: np.random.Generator(np.random.Philox(3)), lambda: np.random.Generator(np.random.MT19937(3))):
        for ours, theirs in ((checkpointed, scanned), (unbounded, unbounded_ref)):
            generator = make()
            expected, after = autograd.grad(theirs)(0.7, generator), generator.random(3)
            generator = make()
            np.testing.assert_allclose(s2s.grad(ours)(0.7, generator), expected, rtol=1e-13)
            np.testing.assert_array_equal(generator.random(3), after)


def test_a_while_loop_whose_condition_draws_is_refused_in_reverse_mode():
    def coin_flips(theta):
        x = theta
        while rs.random_sample() < 0.7:   # no bound, and the verdict is drawn
            x = x * 1.5
        return x
    with pytest.raises(StagingError, match="condition draws random numbers") as info:
        s2s.grad(coin_flips)(1.0)
    assert "carry the verdict" in str(info.value)
