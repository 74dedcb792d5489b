"""Emitted loops read like the source (issue 19): a counted loop is `for step in range(n):`
(or the user's loop variable), never a `for` over `np.arange(...)`; the buffers a loop
stacks its per-step values in (reverse mode's residuals, a scan's ys) are named after the
values they hold; and the functions still compute what independent oracles do, the
counter's NumPy integer semantics included."""
import re

import autograd
import autograd.numpy as anp
import jax
import numpy as np
import pytest

import s2s
from s2s import lax
from s2s.emit.python import load_source
from tests.helpers import with_numpy
from tests.primitives.loops.test_reverse import classification_data, training_until_converged

FOR_HEADER = re.compile(r"^\s*for (\w+) in (.*):", re.M)


def emitted(fn, *args):
    """(source, function) of `fn` emitted for `args`."""
    source = s2s.emit_python(fn, *args)
    module = load_source(source, "emitted")
    return source, getattr(module, module.__all__[0])


def for_headers(source: str) -> list[tuple[str, str]]:
    headers = FOR_HEADER.findall(source)
    assert headers, source
    assert not any("arange" in steps for _, steps in headers), source
    return headers


def buffers(source: str) -> list[str]:
    """The names of the per-step buffers the source allocates."""
    return re.findall(r"^\s*(\w+) = np\.empty\(", source, re.M)


def all_named_per_step(source: str) -> bool:
    """Whether every buffer is named after the value it holds: `p_per_step`, `p_per_step_1`."""
    return all(re.fullmatch(r"\w+_per_step(_\d+)?", name) for name in buffers(source))


def train(w, X, y):
    for step in range(50):
        p = 1 / (1 + np.exp(-(X @ w)))
        g = X.T @ (p - y) / X.shape[0]
        w = w - 0.1 * g
    return np.sum(w * w)


def train_autograd(w, X, y):
    for step in range(50):
        p = 1 / (1 + anp.exp(-(anp.dot(X, w))))
        g = anp.dot(X.T, p - y) / X.shape[0]
        w = w - 0.1 * g
    return anp.sum(w * w)


def test_training_loop_gradient_loops_over_range_and_names_its_residuals():
    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(200, 50)), (rng.random(200) > 0.5).astype(float), rng.normal(size=50) * 0.1
    source, grad_train = emitted(s2s.grad(train), w, X, y)
    headers = for_headers(source)
    assert ("step", "range(50)") in headers, source
    assert any(steps == "reversed(range(50))" for _, steps in headers), source
    names = buffers(source)
    assert "p_per_step" in names, source
    assert all_named_per_step(source), source
    assert not re.search(r"\bys(_\d+)?\b", source), source
    np.testing.assert_allclose(grad_train(w, X, y), autograd.grad(train_autograd)(w, X, y), rtol=1e-10)


def rnn(W, xs):
    h = np.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return np.sum(h * h)


def rnn_autograd(W, xs):
    h = anp.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        h = anp.tanh(anp.dot(W, h) + xs[t])
    return anp.sum(h * h)


def test_rnn_gradient_keeps_the_users_loop_variable_and_names_the_saved_states():
    rng = np.random.default_rng(1)
    W, xs = rng.normal(size=(6, 6)) * 0.5, rng.normal(size=(30, 6))
    source, grad_rnn = emitted(s2s.grad(rnn), W, xs)
    assert ("t", "range(30)") in for_headers(source), source
    # The body indexes xs with the Python int: `t < 0` and `t + 30` compute what int64 would.
    assert "np.int64(t)" not in source, source
    assert "h_per_step" in buffers(source), source
    assert all_named_per_step(source), source
    np.testing.assert_allclose(grad_rnn(W, xs), autograd.grad(rnn_autograd)(W, xs), rtol=1e-10)


@pytest.mark.parametrize("lower", [0, 3])
def test_fori_loop_counter_is_the_loop_variable(lower):
    """fori_loop's counter is a carry starting at `lower` and gaining one per step: it is
    written as the loop variable, with no carry `i` and no `i + 1`, and the gradient's
    buffers are indexed by the step (`i - 3` from a lower bound of 3)."""
    def f(x):
        return lax.fori_loop(lower, lower + 12, lambda i, c: np.tanh(c * 0.9 + np.sin(c) * i * 0.1), x).sum()

    def f_jax(x):
        return jax.lax.fori_loop(lower, lower + 12,
                                 lambda i, c: jax.numpy.tanh(c * 0.9 + jax.numpy.sin(c) * i * 0.1), x).sum()
    x = np.linspace(0.1, 0.9, 5)
    source, f_emitted = emitted(f, x)
    steps = "range(12)" if lower == 0 else "range(3, 15)"
    assert for_headers(source) == [("i", steps)], source
    assert "i + 1" not in source and "np.int64" not in source, source
    np.testing.assert_allclose(f_emitted(x), f_jax(x), rtol=1e-12)

    source, grad_emitted = emitted(s2s.grad(f), x)
    assert ("i", steps) in for_headers(source), source
    assert all_named_per_step(source), source
    if lower:
        assert re.search(r"\w+_per_step\[i - 3\] = ", source), source
    np.testing.assert_allclose(grad_emitted(x), jax.grad(f_jax)(x), rtol=1e-12)


def test_counter_kept_in_a_carry_is_converted_where_it_is_assigned():
    """A carry that takes the counter's value must stay an int64 (after the loop too): the
    assignment converts it, while `acc + t * t` and the float arithmetic read the bare int."""
    def f(x):
        last, acc = np.int64(0), np.int64(0)
        for t in range(x.shape[0]):
            last = t
            acc = acc + t * t
            x = x * 0.5 + t
        return x, last, acc

    def reference(x):
        last, acc = np.int64(0), np.int64(0)
        for t in np.arange(x.shape[0]):
            last, acc, x = t, acc + t * t, x * 0.5 + t
        return x, last, acc
    x = np.linspace(0.1, 1.0, 40)
    source, f_emitted = emitted(f, x)
    assert ("t", "range(40)") in for_headers(source), source
    assert "np.int64(t)," in source and "acc + t * t" in source, source
    for got, want in zip(f_emitted(x), reference(x)):
        assert type(got) is type(want)
        np.testing.assert_array_equal(got, want)


def test_counter_read_by_a_method_is_the_numpy_integer():
    """`t.reshape(1)` needs NumPy's integer: the loop counts in `i` and the body's `t`
    is `np.int64(i)`."""
    def f(x):
        for t in range(x.shape[0]):
            x = x + np.reshape(t, (1,)) * 2.0
        return x
    x = np.linspace(0.1, 1.0, 40)
    source, f_emitted = emitted(f, x)
    assert for_headers(source) == [("i", "range(40)")], source
    assert "t = np.int64(i)" in source, source
    expected = x
    for t in np.arange(40):
        expected = expected + np.reshape(t, (1,)) * 2.0
    np.testing.assert_array_equal(f_emitted(x), expected)


def test_stacked_outputs_keep_the_users_name_and_a_reversed_scan_reads_its_rows():
    def step(h, x):
        h = np.sin(h) * x
        return h, h * 2.0

    def f(h0, xs):
        h, hs = lax.scan(step, h0, xs, reverse=True)
        return h, hs

    def step_jax(h, x):
        h = jax.numpy.sin(h) * x
        return h, h * 2.0
    h0, xs = np.linspace(0.1, 1.0, 4), np.linspace(-1.0, 1.0, 24).reshape(6, 4)
    source, f_emitted = emitted(f, h0, xs)
    assert for_headers(source) == [("i", "reversed(range(6))")], source
    assert buffers(source) == ["hs"], source
    for got, want in zip(f_emitted(h0, xs), jax.lax.scan(step_jax, h0, xs, reverse=True)):
        np.testing.assert_allclose(got, want, rtol=1e-12)

    def loss(h0, xs):
        return f(h0, xs)[1].sum()
    source, grad_emitted = emitted(s2s.grad(loss), h0, xs)
    assert [steps for _, steps in for_headers(source)] == ["reversed(range(6))", "range(6)"], source
    assert all_named_per_step(source), source
    np.testing.assert_allclose(grad_emitted(h0, xs),
                               jax.grad(lambda h0, xs: jax.lax.scan(step_jax, h0, xs, reverse=True)[1].sum())(h0, xs),
                               rtol=1e-12)


def rnn_in_training_loop(W, xs):
    for epoch in range(8):
        h = np.zeros(W.shape[0])
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + xs[t] * epoch)
        W = W - 0.01 * np.outer(h, h)
    return np.sum(W * W)


def rnn_in_training_loop_autograd(W, xs):
    for epoch in range(8):
        h = anp.zeros(W.shape[0])
        for t in range(xs.shape[0]):
            h = anp.tanh(anp.dot(W, h) + xs[t] * epoch)
        W = W - 0.01 * anp.outer(h, h)
    return anp.sum(W * W)


def test_nested_loops_gradient_names_rows_of_saved_buffers_after_their_values():
    """The outer loop saves the inner loop's per-step buffers once per epoch
    (`h_per_step_per_step`); the backward loop calls a row of one `h_per_step_...`, not `t`.
    The inner loop reads the outer counter, so the outer body computes with `np.int64`."""
    rng = np.random.default_rng(2)
    W, xs = rng.normal(size=(4, 4)) * 0.3, rng.normal(size=(25, 4))
    source, grad_emitted = emitted(s2s.grad(rnn_in_training_loop), W, xs)
    headers = for_headers(source)
    assert [steps for _, steps in headers] == ["range(8)", "range(25)", "reversed(range(8))", "reversed(range(25))"]
    assert "epoch = np.int64(i)" in source, source
    assert "h_per_step_per_step" in buffers(source), source
    assert all_named_per_step(source), source
    assert not re.search(r"\bt(_\d+)? = ", source), source
    np.testing.assert_allclose(grad_emitted(W, xs), autograd.grad(rnn_in_training_loop_autograd)(W, xs),
                               rtol=1e-10)


def newton_sqrt_sum(x):
    y = x
    for k in range(20):
        y = y - (y * y - x) / (2 * y)
        if np.max(np.abs(y * y - x)) < 1e-12:
            break
    return np.sum(y)


def test_bounded_loop_gradient_loops_over_range():
    """A `for` that can `break` is a bounded while loop; reverse mode runs it as a scan of
    masked steps, written as `for` loops over ranges too."""
    x = np.linspace(1.0, 4.0, 3)
    source, grad_emitted = emitted(s2s.grad(newton_sqrt_sum), x)
    assert [steps for _, steps in for_headers(source)] == ["range(20)", "reversed(range(20))"], source
    assert all_named_per_step(source), source
    np.testing.assert_allclose(grad_emitted(x), 0.5 / np.sqrt(x), rtol=1e-12)


def attention(Wq, X, Wk, Wv, h):
    for step in range(5):
        q = h @ Wq
        k = X @ Wk
        v = X @ Wv
        s = k @ q
        a = np.exp(s - s.max())
        h = np.tanh(h + (a / a.sum()) @ v)
    return (h * h).sum()


def test_backward_loop_sums_cotangents_in_place_and_drops_what_it_read():
    """The cotangents of the keys and values (read whole on every step) are summed into one
    array each, `k_bar += ...`, not rebuilt per step; the per-step buffers are deleted once
    the backward loop has read them."""
    rng = np.random.default_rng(4)
    Wq, Wk, Wv = (rng.normal(size=(4, 4)) * 0.5 for _ in range(3))
    args = (Wq, rng.normal(size=(6, 4)), Wk, Wv, rng.normal(size=4))
    argnums = (0, 1, 2, 3, 4)
    source, grad_emitted = emitted(s2s.grad(attention, argnums=argnums), *args)
    assert re.search(r"^ +k_bar \+= np\.outer\(", source, re.M), source
    assert re.search(r"^ +v_bar \+= np\.outer\(", source, re.M), source
    assert not re.search(r"^ +.*\bk_bar\b.* = .*\bk_bar\b", source, re.M), source
    backward_end = source.index("\n    del ")
    assert source.index("for i in reversed(range(5))") < backward_end, source
    deleted = re.search(r"^    del (.*?)  #", source, re.M).group(1).split(", ")
    assert sorted(deleted) == sorted(buffers(source)), source
    expected = jax.grad(with_numpy(attention, jax.numpy), argnums=argnums)(*args)
    for got, want in zip(grad_emitted(*args), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def running_sum(total, xs):
    for t in range(xs.shape[0]):
        total = total + xs[t]
    return total


def test_a_carry_starting_as_an_argument_is_copied_before_it_is_summed_in_place():
    total, xs = np.arange(3.0), np.ones((4, 3))
    source, f_emitted = emitted(running_sum, total, xs)
    copy = re.search(r"^    (\w+) = total\.copy\(\)", source, re.M)
    assert copy and f"        {copy.group(1)} += " in source, source
    kept = total.copy()
    np.testing.assert_array_equal(f_emitted(total, xs), kept + 4.0)
    np.testing.assert_array_equal(total, kept)    # the caller's array is untouched


def test_a_sum_read_again_is_not_summed_in_place():
    """A new carry that is also stacked as the step's output may not be written into the
    array the stacked row was copied from, nor aliased: it is rebound as usual."""
    def f(total, xs):
        def step(total, x):
            total = total + x
            return total, total
        return lax.scan(step, total, xs)

    total, xs = np.zeros(3), np.arange(12.0).reshape(4, 3)
    source, f_emitted = emitted(f, total, xs)
    assert "+=" not in source, source
    final, stacked = f_emitted(total, xs)
    np.testing.assert_array_equal(stacked, np.cumsum(xs, axis=0))
    np.testing.assert_array_equal(final, xs.sum(axis=0))


def test_values_a_branch_computes_are_named_after_them_and_transposes_fold():
    """The `break` puts the body in a branch: what the branch returns (saved per step, read
    back, summed) is named after the value it holds (`p`, `w_bar_3`), never `r_2`; and the
    backward branch reads `X @ g_bar`, not `X.T.T @ g_bar`."""
    w, X, y = classification_data(5, 12, 3)
    source, grad_emitted = emitted(s2s.grad(training_until_converged), w, X, y)
    assert "p_per_step" in buffers(source) and all_named_per_step(source), source
    assert not re.search(r"\br(_\d+)? = ", source), source
    assert ".T.T" not in source and re.search(r"\bX @ \(?g_bar", source), source
    np.testing.assert_allclose(grad_emitted(w, X, y),
                               autograd.grad(with_numpy(training_until_converged, anp))(w, X, y), rtol=1e-10)


def _stacked_then_scanned(xs):
    """ys from one scan, read again by a scan inside another construct, and after it."""
    def stack(c, x):
        return c + x, c * x
    return lax.scan(stack, xs[0] * 0.0, xs)[1]


def _summed_sines(c, ys):
    return lax.scan(lambda d, y: (d + np.sin(y), None), c, ys)[0]


def _in_an_outer_loop(xs):
    ys = _stacked_then_scanned(xs)
    c, _ = lax.scan(lambda c, _: (_summed_sines(c, ys), None), xs[0], None, length=3)
    return c.sum() + ys[1].sum()


def _in_a_branch(xs):
    ys = _stacked_then_scanned(xs)
    c = lax.cond(xs.sum() > 0, lambda c: _summed_sines(c, ys), lambda c: c * 2.0, xs[0])
    return c.sum() + ys[1].sum()


def _in_a_checkpoint(xs):
    ys = _stacked_then_scanned(xs)
    return s2s.checkpoint(_summed_sines)(xs[0], ys).sum() + ys[1].sum()


def _in_a_while_loop(xs):
    ys = _stacked_then_scanned(xs)
    _, c = lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, _summed_sines(s[1], ys)), (0, xs[0]))
    return c.sum() + ys[1].sum()


@pytest.mark.parametrize("fn, reverse_mode", [(_in_an_outer_loop, True), (_in_a_branch, True),
                                              (_in_a_checkpoint, True), (_in_a_while_loop, False)])
def test_a_buffer_read_inside_a_nested_body_is_not_deleted_there(fn, reverse_mode):
    """A loop one level down (in an outer loop's body, a branch, a checkpoint's body written
    in place, a while loop) reads a buffer for the last time *in its body*, but the block
    around reads it again: only the block that filled a buffer deletes it."""
    xs = np.arange(12.0).reshape(4, 3) / 10
    for target in (fn, s2s.grad(fn)) if reverse_mode else (fn,):
        source, emitted_fn = emitted(target, xs)
        np.testing.assert_allclose(emitted_fn(xs), s2s.jit(target)(xs), rtol=1e-12, err_msg=source)


# Loops and branches whose body leaves every carry as it was: Python needs a statement in
# the body all the same (issue 42: `grad(checkpoint(f))` of such a scan wrote a `for` with
# nothing under it, an IndentationError when the module was loaded).


def _scan_keeping_its_carry(x):
    c, _ = lax.scan(lambda c, _: (c, None), x, xs=None, length=1)
    return np.sum(np.sin(c))


def _fori_keeping_its_carry(x):
    return np.sum(np.sin(lax.fori_loop(0, 3, lambda i, c: c, x)))


def _while_never_running(x):
    # a zero-step loop: a `while` over a body that changes nothing must not run forever
    return np.sum(np.sin(lax.while_loop(lambda c: np.sum(c) > 100.0, lambda c: c, x)))


def _bounded_while_keeping_its_carry(x):
    c = x
    for _ in range(3):
        if np.sum(c) > 100.0:
            break
    return np.sum(np.sin(c))


def _cond_passing_through(x):
    return np.sum(np.sin(lax.cond(np.sum(x) > 0, lambda c: c, lambda c: c, x)))


def _sin_sum_jax(x):
    return jax.numpy.sum(jax.numpy.sin(x))


@pytest.mark.parametrize("fn", [_scan_keeping_its_carry, _fori_keeping_its_carry, _while_never_running,
                                _bounded_while_keeping_its_carry, _cond_passing_through])
@pytest.mark.parametrize("transform", ["plain", "grad", "grad(checkpoint)", "checkpoint(grad)"])
def test_a_body_that_changes_nothing_still_compiles(fn, transform):
    """Every loop and branch form, forward and differentiated (a checkpointed body is
    written again in the backward pass), gives a module Python loads; each equals jax's
    value of sum(sin(x)) and its gradient cos(x), emitted and under jit."""
    target = {"plain": fn, "grad": s2s.grad(fn), "grad(checkpoint)": s2s.grad(s2s.checkpoint(fn)),
              "checkpoint(grad)": s2s.checkpoint(s2s.grad(fn))}[transform]
    expected = (_sin_sum_jax if transform == "plain" else jax.grad(_sin_sum_jax))(np.linspace(-1.0, 1.0, 3))
    x = np.linspace(-1.0, 1.0, 3)
    source, emitted_fn = emitted(target, x)
    compile(source, "emitted.py", "exec")
    np.testing.assert_allclose(emitted_fn(x), expected, rtol=1e-12, err_msg=source)
    np.testing.assert_allclose(s2s.jit(target)(x), expected, rtol=1e-12)
    np.testing.assert_allclose(target(x), expected, rtol=1e-12)
