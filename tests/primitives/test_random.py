"""`random_draw` under XLA (s2s/primitives/random.py's lowering): draws inside the regions
of staged loops and branches, which carry the generators' states through them, so each
step of a loop draws anew and the code after a loop or branch draws past its numbers;
permutations as an argsort of random keys; reverse mode through a loop that draws, whose
backward pass reads the very samples its forward pass drew. XLA's numbers are not NumPy's,
so the oracles are the distributions (Kolmogorov-Smirnov and chi-square tests at the 0.1%
level, moments and correlations within 5 standard errors) and the samples themselves,
returned beside the results that are computed from them."""
import itertools
import math

import numpy as np
import numpy.random as npr
import pytest
from scipy import stats

import s2s
from s2s import lax

LEVEL = 1e-3   # every statistical test below fails a correct sampler once in a thousand runs
rs = npr.RandomState(0)


@pytest.fixture(autouse=True)
def _seeded():
    """Each test starts from the same generator state, so a failure reproduces."""
    global rs
    rs = npr.RandomState(20260)


def _independent(a, b):
    """Whether two samples of the same length look uncorrelated: |r| within 5 standard errors."""
    a, b = np.ravel(a), np.ravel(b)
    return abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(a.size)


def _standard_normal(sample):
    return stats.kstest(np.ravel(sample), "norm").pvalue > LEVEL


def test_a_scan_body_draws_anew_at_every_step():
    def noise_per_step(x):
        def step(total, _):
            eps = rs.standard_normal(x.shape)
            return total + eps, eps
        return lax.scan(step, x, None, length=40)
    total, eps = (np.asarray(v) for v in s2s.jit(noise_per_step)(np.zeros(2000)))
    assert len({row.tobytes() for row in eps}) == 40   # no step repeats another's numbers
    assert _standard_normal(eps)
    assert _independent(eps[:-1], eps[1:])   # consecutive steps
    np.testing.assert_allclose(total, eps.sum(0), rtol=1e-12, atol=1e-12)


def test_a_while_loop_body_draws_anew_and_the_code_after_it_draws_past_its_numbers():
    def uniforms_until_three(x):
        def body(carry):
            i, acc = carry
            return i + 1, np.where(np.arange(3)[:, None] == i, rs.random_sample(x.shape[1]), acc)
        _, acc = lax.while_loop(lambda carry: carry[0] < 3, body, (0, x))
        return acc, rs.random_sample(x.shape[1])
    drawn, after = (np.asarray(v) for v in s2s.jit(uniforms_until_three)(np.zeros((3, 5000))))
    rows = np.vstack([drawn, after])
    for row in rows:
        assert stats.kstest(row, "uniform").pvalue > LEVEL
    for a, b in itertools.combinations(rows, 2):
        assert _independent(a, b)


def test_a_condition_that_draws_runs_a_geometric_number_of_steps():
    """`while rs.random_sample() < 1/2: n += 1` stops after n steps with probability
    2**-(n + 1): the condition draws anew at every test, apart from the body's draws and
    from the draw after the loop (uniform, not only the last test's number, >= 1/2)."""
    def steps(n):
        def body(carry):
            count, noise = carry
            return count + 1, noise + rs.random_sample()
        return lax.while_loop(lambda carry: rs.random_sample() < 0.5, body, (n, 0.0)), rs.random_sample()
    jitted = s2s.jit(steps)
    runs, after = zip(*[jitted(0) for _ in range(3000)])
    assert stats.kstest(np.array(after, float), "uniform").pvalue > LEVEL
    counts = np.array([int(c) for c, _ in runs])
    observed = np.bincount(np.minimum(counts, 6), minlength=7)
    expected = len(counts) * np.array([0.5 ** (k + 1) for k in range(6)] + [0.5 ** 6])
    assert stats.chisquare(observed, expected).pvalue > LEVEL
    # The body's uniforms, summed: a count of n steps sums n uniforms (mean n/2).
    noise = np.array([float(v) for _, v in runs])
    assert abs((noise - counts / 2).mean()) < 5 * math.sqrt(counts.mean() / 12 / len(counts))


def test_a_bounded_while_loop_that_draws():
    def fill(x):
        out = x
        for i in range(x.shape[0]):   # a bounded while loop on a staged count
            if out[i].sum() > 1e9:
                break
            out[i] = rs.standard_normal(x.shape[1])
        return out
    drawn = np.asarray(s2s.jit(fill)(np.zeros((6, 3000))))
    assert _standard_normal(drawn)
    assert all(_independent(a, b) for a, b in itertools.combinations(drawn, 2))


def test_each_branch_of_a_cond_draws_and_the_code_after_it_draws_past_its_numbers():
    def branchy(pick, x):
        inside = lax.cond(pick > 0, lambda: rs.standard_normal(x.shape), lambda: rs.random_sample(x.shape))
        return inside, rs.standard_normal(x.shape)
    jitted = s2s.jit(branchy)
    x = np.zeros(5000)
    normal, after = (np.asarray(v) for v in jitted(np.array(1), x))
    uniform, after_uniform = (np.asarray(v) for v in jitted(np.array(-1), x))
    assert _standard_normal(normal) and _standard_normal(after) and _standard_normal(after_uniform)
    assert stats.kstest(uniform, "uniform").pvalue > LEVEL
    assert _independent(normal, after) and _independent(uniform, after_uniform)


def test_nested_regions_draw_anew():
    """A scan in a scan body, and a branch in a scan body, each drawing."""
    def nested(x):
        def outer(carry, _):
            def inner(c, _):
                eps = rs.standard_normal(x.shape)
                return c, eps
            _, inner_eps = lax.scan(inner, 0.0, None, length=4)
            branch = lax.cond(carry > 1, lambda: rs.standard_normal(x.shape), lambda: rs.standard_normal(x.shape))
            return carry + 1, (inner_eps, branch)
        return lax.scan(outer, 0, None, length=5)[1]
    inner_eps, branch = (np.asarray(v) for v in s2s.jit(nested)(np.zeros(3000)))
    rows = np.vstack([inner_eps.reshape(20, -1), branch])
    assert len({row.tobytes() for row in rows}) == 25
    assert _standard_normal(rows)
    assert all(_independent(a, b) for a, b in itertools.combinations(rows[::3], 2))


def test_only_regions_that_draw_carry_a_generator_state():
    """A loop whose body does not draw carries no state, even in a function that draws
    elsewhere; one whose body draws carries one (`tensor<2xui64>`) after its own carries."""
    def drawn_outside(x):
        return lax.scan(lambda c, _: (c * 2, c), x, None, length=3)[0] + rs.standard_normal(x.shape)

    def drawn_inside(x):
        return lax.scan(lambda c, _: (c * 2 + rs.standard_normal(x.shape), c), x, None, length=3)[0]
    for fn, carries in [(drawn_outside, "tensor<i32>, tensor<5xf64>, tensor<3x5xf64>\n"),
                        (drawn_inside, "tensor<i32>, tensor<5xf64>, tensor<3x5xf64>, tensor<2xui64>\n")]:
        text = s2s.jit(fn).lower(np.zeros(5)).as_text()
        (loop,) = [line for line in text.splitlines(keepends=True) if "stablehlo.while(" in line]
        assert loop.endswith(carries)


@pytest.mark.parametrize("batch", [(), (4000,), (50, 80)], ids=["one", "batch", "batch2d"])
def test_permutations_are_uniform(batch):
    n = 4

    def permutations(x):
        return rs.permutation(n) + x
    function = permutations
    for _ in batch:   # vmap draws one permutation per example: the `batch` parameter
        function = s2s.vmap(function)
    jitted = s2s.jit(function)
    x = np.zeros(batch + (n,), np.int64)
    draws = np.concatenate([np.asarray(jitted(x)).reshape(-1, n) for _ in range(4000 // max(1, math.prod(batch)))])
    np.testing.assert_array_equal(np.sort(draws, axis=1), np.broadcast_to(np.arange(n), draws.shape))
    where_zero = np.argmax(draws == 0, axis=1)
    assert stats.chisquare(np.bincount(where_zero, minlength=n)).pvalue > LEVEL
    codes = draws @ (n ** np.arange(n))   # each of the 24 permutations, as one number
    assert stats.chisquare(np.unique(codes, return_counts=True)[1]).pvalue > LEVEL
    assert len(np.unique(codes)) == math.factorial(n)


def test_a_permutation_of_an_array_inside_a_scan():
    def shuffled_per_step(x):
        return lax.scan(lambda c, _: (c, rs.permutation(x)), 0.0, None, length=3000)[1]
    x = np.arange(5.0)
    draws = np.asarray(s2s.jit(shuffled_per_step)(x))
    np.testing.assert_array_equal(np.sort(draws, axis=1), np.broadcast_to(x, draws.shape))
    assert stats.chisquare(np.bincount(np.argmax(draws == 0.0, axis=1), minlength=5)).pvalue > LEVEL


def test_reverse_mode_through_a_scan_that_draws_reads_the_forward_samples():
    """f(theta) = sum_t (theta * eps_t)^2 with eps_t drawn in the scan body: the gradient
    2 theta sum_t eps_t^2 holds for the samples the forward pass returned, so the backward
    pass read the forward's samples (saved as residuals), not new ones."""
    def f(theta):
        def step(total, _):
            eps = rs.standard_normal(theta.shape)
            return total + np.sum((theta * eps) ** 2), eps
        return lax.scan(step, 0.0, None, length=30)
    jitted = s2s.jit(s2s.value_and_grad(f, has_aux=True))
    theta = np.array([0.5, -1.5, 2.0])
    (value, eps), grad = jitted(theta)
    eps = np.asarray(eps)
    np.testing.assert_allclose(value, np.sum((theta * eps) ** 2), rtol=1e-12)
    np.testing.assert_allclose(grad, 2 * theta * np.sum(eps ** 2, axis=0), rtol=1e-12)
    (_, again), _ = jitted(theta)
    assert not np.array_equal(np.asarray(again), eps)   # a fresh seed on the next call
    assert len({row.tobytes() for row in eps}) == 30   # reverse mode leaves the draw in the loop


# ---------------------------------------------------------------------------------------
# generator_state and generator_swap: a loop run again in reverse mode carries its
# generators' states (loops/replay.py).


def _checkpointed_noise(theta):
    def step(c, _):
        return np.sin(c * theta) + 0.1 * rs.standard_normal(3), None
    return np.sum(lax.scan(step, np.ones(3), None, length=6, checkpoints=2)[0])


def test_the_gradient_of_a_checkpointed_loop_carries_the_generators_state_in_words():
    """The state carry holds a RandomState's 629 words; the emitted module swaps them in
    and out around each step and puts the generator where the steps left it."""
    jaxpr = s2s.make_jaxpr(s2s.grad(_checkpointed_noise))(0.5)
    text = str(jaxpr)
    assert "generator_state" in text and "u64[629]" in text
    source = s2s.emit_python(s2s.grad(_checkpointed_noise), 0.5)
    assert source.count("rt.swap_generator_state(random_state, ") >= 3
    assert "random_state_state = rt.generator_state(random_state)" in source


def test_on_xla_the_state_words_are_its_two_words_and_zeros():
    """The padded XLA state goes through the slots and back: the gradient equals that of
    the loop without checkpoints from the same seed (the same numbers), and successive
    calls draw anew."""
    def saved(theta):
        def step(c, _):
            return np.sin(c * theta) + 0.1 * rs.standard_normal(3), None
        return np.sum(lax.scan(step, np.ones(3), None, length=6)[0])
    rs.seed(1)
    first = np.asarray(s2s.jit(s2s.grad(_checkpointed_noise))(0.5))
    second = np.asarray(s2s.jit(s2s.grad(_checkpointed_noise))(0.5))
    rs.seed(1)
    np.testing.assert_allclose(first, np.asarray(s2s.jit(s2s.grad(saved))(0.5)), rtol=1e-13)
    assert first != second


def test_a_generators_state_is_never_batched():
    from s2s.errors import UnsupportedFunctionError
    from s2s.passes import vmap as _vmap
    from s2s.primitives import ops
    from s2s.core import HostObject
    swap = ops.primitive(ops.generator_swap)
    source = HostObject(rs, "rs")
    with pytest.raises(UnsupportedFunctionError, match="state taken per example"):
        _vmap.batch_rules[swap](_vmap.Axis(2), [np.zeros((2, 629), np.uint64)], [0], source=source, words=629)
