"""Python `if`, `while` and `for` on staged arrays become cond, while_loop and scan.

The functions are plain NumPy: run as Python they are the value oracle, and autograd
(which follows Python control flow as it runs) is the derivative oracle.
"""
import types

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import s2s
from s2s.emit.python import load_source
from s2s.frontend import structured
from tests.frontend.test_in_place import rnn_states

rng = np.random.default_rng(0)


def piecewise(x):
    if x.sum() > 0:
        y = np.sin(x) * 2
    else:
        y = x ** 2
    return (y + 1).sum()


def three_pieces(x):
    s = x.sum()
    if s > 1:
        y = x * 3
    elif s > -1:
        y = np.cos(x)
    else:
        y = -x
    return y.sum()


def keep_if_small(x):
    y = x
    if x.max() > 10:
        y = x / x.max()
    return (y * y).sum()


def newton_sqrt(a):
    x = a
    while np.abs(x * x - a) > 1e-12 * a:
        x = x - (x * x - a) / (2 * x)
    return x


def halve_until_small(x):
    steps = np.zeros(())
    while x.max() > 1:
        x = x / 2
        steps = steps + 1
    return x, steps


def rnn(W, h, xs):
    total = 0.0
    for x in xs:
        h = np.tanh(W @ h + x)
        total = total + (h * h).sum()
    return total + h.sum()


def horner(c, x):
    acc = np.zeros_like(x)
    for i in range(len(c)):
        acc = acc * x + c[i]
    return acc.sum()


def euler(y, rate):
    for _ in range(200):
        y = y - 0.01 * rate * y ** 3
    return y.sum()


def loop_with_branch(xs):
    total = 0.0
    for x in xs:
        if x > 0:
            total = total + x * x
        else:
            total = total - np.sin(x)
    return total


def nested_loops(A):
    total = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            total = total * 0.9 + np.tanh(A[i, j] * (i + 1))
    return total


def newton_with_break(a):
    x = a
    for _ in range(50):
        x = x - (x * x - a) / (2 * x)
        if np.abs(x * x - a) < 1e-10 * a:
            break
    return x


def sum_of_positive_squares(xs):
    total = 0.0
    for x in xs:
        if x < 0:
            continue
        total = total + x * x
    return total


def first_above(xs, level):
    found = 0.0
    for x in xs:
        if x > level:
            found = x * x
            break
    else:
        found = -1.0 * level
    return found


def collatz_steps(n):
    steps = 0 * n
    while steps < 1000:
        if n == 1:
            break
        n = np.where(n % 2 == 0, n // 2, 3 * n + 1)
        steps = steps + 1
    return steps


def halve_until_either_small(x):
    while x.max() > 1:
        x = x / 2
        if x.min() < 0.1:
            break
    return x


def rows_until_negative(A):
    total = 0.0
    for row in A:
        if row[0] > 1.5:
            continue
        for v in row:            # its `break` ends this loop only
            if v < 0:
                break
            total = total + np.sin(v)
    return total


def clipped_sum(xs):
    total = 0.0
    for x in xs:
        if x < 0:
            if x < -2:
                break
            continue
        total = total + np.exp(-x) * x
    return total


def huber(r, delta):
    if np.abs(r) <= delta:
        return 0.5 * r ** 2
    return delta * (np.abs(r) - 0.5 * delta)


def early_returns(x):
    s = x.sum()
    if s > 1:
        return (x * 2).sum()
    elif s < -1:
        y = -x
        if y.max() > 3:
            return (y / 3).sum()
    else:
        x = x + 1
    return np.sin(x).sum()


def zero_or_sum(x):
    if x.sum() > 0:
        y = 0.0                   # a Python float: takes the other branch's float32
    else:
        y = x.sum()
    return y


CASES = {
    "piecewise_pos": (piecewise, lambda: (np.abs(rng.standard_normal(4)),)),
    "piecewise_neg": (piecewise, lambda: (-np.abs(rng.standard_normal(4)),)),
    "three_pieces_high": (three_pieces, lambda: (np.full(3, 1.0),)),
    "three_pieces_mid": (three_pieces, lambda: (np.full(3, 0.1),)),
    "three_pieces_low": (three_pieces, lambda: (np.full(3, -1.0),)),
    "keep_if_small": (keep_if_small, lambda: (rng.standard_normal(3),)),
    "rescale_if_large": (keep_if_small, lambda: (rng.standard_normal(3) + 20,)),
    "newton": (newton_sqrt, lambda: (np.float64(3.5),)),
    "halving": (halve_until_small, lambda: (rng.uniform(0, 40, 3),)),
    "rnn": (rnn, lambda: (rng.standard_normal((4, 4)) * 0.5, rng.standard_normal(4),
                          rng.standard_normal((100, 4)))),   # 100 steps
    "horner": (horner, lambda: (rng.standard_normal(6), rng.standard_normal(3))),
    "euler": (euler, lambda: (rng.uniform(0.5, 1.0, 2), np.float64(0.8))),
    "loop_with_branch": (loop_with_branch, lambda: (rng.standard_normal(12),)),
    "nested": (nested_loops, lambda: (rng.standard_normal((3, 5)),)),
    "newton_break": (newton_with_break, lambda: (np.float64(3.5),)),
    "continue": (sum_of_positive_squares, lambda: (rng.standard_normal(9),)),
    "break_found": (first_above, lambda: (np.array([0.1, -0.4, 1.3, 2.5]), np.float64(1.0))),
    "break_else": (first_above, lambda: (np.array([0.1, -0.4, 0.3]), np.float64(1.0))),
    "while_break_int": (collatz_steps, lambda: (np.int64(27),)),
    "while_break": (halve_until_either_small, lambda: (rng.uniform(0, 40, 3),)),
    "nested_jumps": (rows_until_negative, lambda: (rng.standard_normal((5, 4)) + 0.5,)),
    "break_and_continue": (clipped_sum, lambda: (np.array([0.5, -1.0, 2.0, -3.0, 1.0]),)),
    "continue_to_the_end": (clipped_sum, lambda: (np.array([0.5, -1.0, 2.0, -0.5, 1.0]),)),
    "huber_inside": (huber, lambda: (np.float64(0.3), np.float64(1.0))),
    "huber_outside": (huber, lambda: (np.float64(-2.5), np.float64(1.0))),
    "return_first": (early_returns, lambda: (np.full(3, 1.0),)),
    "return_nested": (early_returns, lambda: (np.full(3, -4.0),)),
    "return_nested_else": (early_returns, lambda: (np.full(3, -1.5),)),
    "return_after_else": (early_returns, lambda: (np.full(3, 0.1),)),
    "weak_branch_result": (zero_or_sum, lambda: (-np.ones(3, np.float32),)),
}

EXPECTED_PRIMITIVE = {"piecewise": "cond", "three_pieces": "cond", "keep_if_small": "cond",
                      "newton_sqrt": "while_loop", "halve_until_small": "while_loop", "rnn": "scan",
                      "horner": "scan", "euler": "scan", "loop_with_branch": "scan", "nested_loops": "scan",
                      "newton_with_break": "while_loop", "sum_of_positive_squares": "scan",
                      "first_above": "while_loop", "collatz_steps": "while_loop",
                      "halve_until_either_small": "while_loop", "rows_until_negative": "scan",
                      "clipped_sum": "while_loop", "huber": "cond", "early_returns": "cond",
                      "zero_or_sum": "cond"}


def assert_close(got, expected, rtol=1e-10, atol=1e-12):
    got_leaves, expected_leaves = s2s.tree_leaves(got), s2s.tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_staged_control_flow_equals_python_on_every_path(name):
    fn, make_args = CASES[name]
    args = make_args()
    expected = fn(*args)                                                      # plain NumPy
    closed = s2s.make_jaxpr(fn)(*args)
    assert EXPECTED_PRIMITIVE[fn.__name__] in [e.primitive.name for e in closed.eqns]
    assert_close(s2s.jit(fn)(*args), expected)                                # XLA
    assert_close(s2s.jit(fn, backend="python")(*args), expected)              # emitted module
    staged = s2s.api.staged_or_error(fn, args, {})
    assert_close(staged.out_tree.unflatten(s2s.eval_jaxpr(closed, *staged.flat_inputs(args, {}))), expected)


DIFFERENTIABLE = ["piecewise_pos", "piecewise_neg", "three_pieces_high", "three_pieces_mid",
                  "three_pieces_low", "keep_if_small", "rescale_if_large", "rnn", "horner", "euler",
                  "loop_with_branch", "nested", "newton_break", "continue", "break_found", "break_else",
                  "nested_jumps", "break_and_continue", "continue_to_the_end", "huber_inside",
                  "huber_outside", "return_first", "return_nested", "return_nested_else", "return_after_else"]


def as_autograd(fn):
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": anp}, fn.__name__)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_grad_equals_autograd_of_the_python_function(name):
    fn, make_args = CASES[name]
    args = make_args()
    argnums = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
    expected = autograd.grad(as_autograd(fn), argnums)(*args)
    s2s.check_jaxpr(s2s.make_jaxpr(s2s.grad(fn, argnums=argnums))(*args))
    assert_close(s2s.grad(fn, argnums=argnums)(*args), expected, rtol=1e-8, atol=1e-10)
    assert_close(s2s.jit(s2s.grad(fn, argnums=argnums))(*args), expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", DIFFERENTIABLE + ["newton", "halving", "while_break"])
def test_jvp_equals_autograd_of_the_python_function(name):
    """Forward mode (also through while loops), checked as <w, J v> for random v and w."""
    fn, make_args = CASES[name]
    args = make_args()
    floats = [i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
    directions = {i: rng.standard_normal(np.shape(args[i])) for i in floats}
    outs, tangents = s2s.jvp(lambda *xs: fn(*[xs[floats.index(i)] if i in floats else a
                                              for i, a in enumerate(args)]),
                             tuple(args[i] for i in floats), tuple(directions[i] for i in floats))
    weights = [rng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f" else None
               for o in s2s.tree_leaves(outs)]

    def weighted(t):
        moved = [a + t * directions[i] if i in floats else a for i, a in enumerate(args)]
        leaves = s2s.tree_leaves(as_autograd(fn)(*moved))
        return sum(anp.sum(w * leaf) for w, leaf in zip(weights, leaves) if w is not None)
    got = sum(np.sum(w * np.asarray(t)) for w, t in zip(weights, s2s.tree_leaves(tangents)) if w is not None)
    assert_close(got, autograd.grad(weighted)(0.0), rtol=1e-8, atol=1e-10)


def test_forward_mode_through_a_staged_while():
    a = np.float64(3.5)
    out, tangent = s2s.jvp(newton_sqrt, (a,), (np.float64(1.0),))
    np.testing.assert_allclose(tangent, 0.5 / np.sqrt(a), rtol=1e-10)


def test_a_python_loop_over_1000_steps_stays_one_loop():
    W, h, xs = rng.standard_normal((8, 8)) * 0.3, np.zeros(8), rng.standard_normal((1000, 8))
    closed = s2s.make_jaxpr(rnn)(W, h, xs)
    assert len(closed.eqns) <= 3 and sum(e.primitive.name == "scan" for e in closed.eqns) == 1
    grad_source = s2s.emit_python(s2s.grad(rnn), W, h, xs)
    assert "for i in range(1000):" in grad_source and "in reversed(range(1000)):" in grad_source
    module = load_source(grad_source, "grad_rnn")
    assert_close(module.grad_rnn(W, h, xs), autograd.grad(as_autograd(rnn))(W, h, xs), rtol=1e-8)


def test_emitted_source_keeps_the_users_names_and_statements():
    source = s2s.emit_python(newton_sqrt, np.float64(2.0))
    assert "    while np.abs(x * x - a) > " in source and "x = x - " in source.replace("x_1", "x")
    source = s2s.emit_python(piecewise, np.ones(3))
    assert "if " in source and "else:" in source and "y = np.sin(x) * 2" in source
    source = s2s.emit_python(three_pieces, np.ones(3))      # an if/elif/else chain reads as one
    assert "    elif s > -1.0:" in source and "        y = np.cos(x)" in source


def layers(params, x):
    for i in range(len(params)):
        x = np.tanh(x @ params[i])        # params is a list: i must stay a Python int
    return x


def collect(x):
    outs = []
    for k in range(3):
        outs.append(x * k)                # mutates a list: unrolled
    return np.stack(outs)


def test_loops_that_need_python_values_still_unroll():
    params = [rng.standard_normal((3, 4)), rng.standard_normal((4, 2))]
    closed = s2s.make_jaxpr(layers)(params, np.ones((1, 3)))
    assert [e.primitive.name for e in closed.eqns].count("tanh") == 2
    np.testing.assert_allclose(s2s.jit(layers)(params, np.ones((1, 3))), layers(params, np.ones((1, 3))))
    closed = s2s.make_jaxpr(collect)(np.ones(2))
    assert "scan" not in [e.primitive.name for e in closed.eqns]
    np.testing.assert_allclose(s2s.jit(collect)(np.ones(2)), collect(np.ones(2)))


def euler_unrolled(y, rate):
    for _ in s2s.unroll(range(5)):
        y = y - 0.01 * rate * y ** 3
    return y.sum()


def test_s2s_unroll_asks_for_a_loop_to_be_unrolled():
    y, rate = rng.uniform(0.5, 1.0, 2), np.float64(0.8)
    names = [e.primitive.name for e in s2s.make_jaxpr(euler_unrolled)(y, rate).eqns]
    assert "scan" not in names and names.count("integer_pow") == 5
    np.testing.assert_allclose(s2s.jit(euler_unrolled)(y, rate), euler_unrolled(y, rate), rtol=1e-12)


def test_a_range_loop_is_written_with_the_users_index():
    W, h0, xs = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3), rng.standard_normal((4, 3))
    source = s2s.emit_python(rnn_states, W, h0, xs)
    assert "for t in range(4):" in source
    np.testing.assert_allclose(s2s.jit(rnn_states, backend="python")(W, h0, xs), rnn_states(W, h0, xs),
                               rtol=1e-12)


def test_a_loop_that_breaks_stops_early_and_differentiates_in_reverse_mode():
    a = np.float64(3.5)
    (loop,) = [e for e in s2s.make_jaxpr(newton_with_break)(a).eqns if e.primitive.name == "while_loop"]
    assert loop.params["max_iters"] == 50
    # Run, or differentiated in forward mode, it is a loop that stops when it breaks ...
    source = s2s.emit_python(newton_with_break, a)
    assert "for step in range(50):" in source and "if not running:\n            break" in source
    assert s2s.jit(newton_with_break).lower(a).as_text().count("stablehlo.while") == 1
    jvp_eqns = s2s.make_jaxpr(lambda a, t: s2s.jvp(newton_with_break, (a,), (t,)))(a, a).eqns
    assert [e.primitive.name for e in jvp_eqns] == ["while_loop"]
    # ... and in reverse mode a scan of 50 masked steps, run backwards.
    grad_source = s2s.emit_python(s2s.grad(newton_with_break), a)
    assert "for i in range(50):" in grad_source and "reversed(range(50))" in grad_source
    np.testing.assert_allclose(load_source(grad_source, "grad_newton_with_break").grad_newton_with_break(a),
                               0.5 / np.sqrt(a), rtol=1e-9)


def test_continue_guards_the_rest_of_the_iteration():
    source = s2s.emit_python(sum_of_positive_squares, np.ones(3))
    assert "if x < 0.0:" in source and "live = np.bool(False)" in source and "if live:" in source


def while_else(x):
    while x.sum() > 1:
        x = x * 0.5
    else:
        x = x + 1
    return x


def test_the_else_block_of_a_staged_loop_runs_unless_it_broke():
    x = np.array([3.0, 4.0])
    np.testing.assert_allclose(s2s.jit(while_else)(x), while_else(x))
    np.testing.assert_allclose(s2s.jit(first_above)(np.array([3.0]), np.float64(1.0)), 9.0)
    np.testing.assert_allclose(s2s.jit(first_above)(np.array([0.5]), np.float64(1.0)), -1.0)


def long_layers(params, x):
    for i in range(len(params)):
        x = np.tanh(x @ params[i])        # params is a list: the loop must unroll
    return x


def test_a_long_loop_that_must_unroll_says_why():
    params = [np.eye(2)] * 120
    with pytest.warns(UserWarning, match=r"loop of 120 steps is unrolled .* list"):
        s2s.make_jaxpr(long_layers)(params, np.ones((1, 2)))


def stepped_sum(x, start, stop, step):
    total = 0.0
    for i in range(start, stop, step):
        if i > 9:
            break
        total = total * 0.5 + np.sin(x * i)
    else:
        total = -total
    return total


@pytest.mark.filterwarnings("ignore:Output seems independent of input")   # autograd, on the empty range
@pytest.mark.parametrize("bounds", [(0, 5, 1), (2, 20, 3), (5, 0, -1), (7, 0, -2), (3, 3, 1), (1, 40, 1)])
def test_a_range_with_array_bounds_is_a_while_loop(bounds):
    x = np.float64(0.7)
    staged_bounds = [np.int64(b) for b in bounds]
    names = [e.primitive.name for e in s2s.make_jaxpr(stepped_sum)(x, *staged_bounds).eqns]
    assert names.count("while_loop") == 1
    expected = stepped_sum(x, *bounds)
    for backend in ("xla", "python"):
        assert_close(s2s.jit(stepped_sum, backend=backend)(x, *staged_bounds), expected)
    # forward mode, against autograd on the Python loop
    _, tangent = s2s.jvp(lambda x: stepped_sum(x, *staged_bounds), (x,), (np.float64(1.0),))
    assert_close(tangent, autograd.grad(as_autograd(stepped_sum))(x, *bounds), rtol=1e-9)



def test_returns_inside_an_if_on_an_array_are_one_cond_of_the_results():
    source = s2s.emit_python(huber, np.float64(0.3), np.float64(1.0))
    assert "    if np.abs(r) <= delta:" in source and "        result = 0.5 * r ** 2" in source
    assert "    return result" in source
    x = -np.ones(3, np.float32)
    assert s2s.jit(zero_or_sum)(x).dtype == np.float32


# --- found in review: each ran wrong, hung or crashed once ------------------------------

def halve_three_times(x):
    out = []
    while True:                    # stops on a Python value: runs as Python, unrolled
        out.append(1)
        x = x * 0.5
        if len(out) == 3:
            break
    return x


def index_of_first_above(xs, t):
    i = 0
    for i in range(xs.shape[0]):
        if xs[i] > t:
            break
    return i                       # the loop variable as the loop left it


def last_seen(xs):
    for x in xs:
        if x > 1.0:
            break
    return x


def breaks_under_a_static_if(xs, k):
    total = 0.0
    for x in xs:
        if k > 0:                  # static
            if x > 1:
                break
            total = total + x      # skipped once it broke
    return total


def reciprocal_sum_until(xs):
    total = 0.0
    for x in xs:
        total = total + 1.0 / x    # never reached for the zero after the break
        if total > 10:
            break
    return total


def names_like_the_loops_own(xs):
    k = 0.0
    running = 1.0
    for x in xs:
        k = k + x
        running = running * 0.5
        if k > 3:
            break
    return k + running


def count_down(x, n):
    total = 0.0
    for i in range(n, 0, -1):      # an unsigned bound, stepping down
        total = total + x * i
    return total


def huge_bound(x):
    for i in range(2 ** 31 + 5):   # counted in 64 bits
        x = x * 0.5
        if x < 1:
            break
    return x


def assigned_after_a_continue(xs):
    total = 0.0
    for x in xs:
        if x > 0:
            if x > 5:
                continue
            y = x * 2              # no value on the path that continues: none is needed
        else:
            y = -x
        total = total + y
    return total


REVIEWED = [
    (halve_three_times, (np.float64(8.0),), ()),
    (index_of_first_above, (np.array([0.5, 1.5, 3.0]), np.float64(1.0)), ()),
    (last_seen, (np.array([0.5, 1.5, 3.0]),), ()),
    (breaks_under_a_static_if, (np.array([0.5, 2.0, 0.25]), 1), (1,)),
    (reciprocal_sum_until, (np.array([1.0, 0.05, 0.0, 2.0]),), ()),
    (names_like_the_loops_own, (np.array([1.0, 2.5, 1.0]),), ()),
    (count_down, (np.float64(1.0), np.uint32(3)), ()),
    (huge_bound, (np.float64(3.5),), ()),
    (assigned_after_a_continue, (np.array([1.0, 7.0, -2.0]),), ()),
]


@pytest.mark.parametrize("fn, args, static", REVIEWED, ids=[f.__name__ for f, _, _ in REVIEWED])
def test_reviewed_loops_equal_python(fn, args, static):
    expected = fn(*args)
    for backend in ("xla", "python"):
        assert_close(s2s.jit(fn, static_argnums=static, backend=backend)(*args), expected)


@pytest.mark.parametrize("fn, args", [(breaks_under_a_static_if, (np.array([0.5, 2.0, 0.25]), 1)),
                                      (reciprocal_sum_until, (np.array([1.0, 0.05, 0.0, 2.0]),)),
                                      (assigned_after_a_continue, (np.array([1.0, 7.0, -2.0]),))])
def test_reviewed_gradients_equal_autograd(fn, args):
    """Also: steps after a `break` neither run nor differentiate the body (no 0 * inf)."""
    expected = autograd.grad(as_autograd(fn))(*args)
    got = s2s.grad(fn)(*args)
    assert np.all(np.isfinite(got))
    assert_close(got, expected, rtol=1e-9)


def dead_store_in_a_branch(x):
    if x > 0:
        z = x * 2                  # nothing reads z: a cond with no results
    return x


def python_number_after_continue(xs):
    total = np.float32(0.0)
    for x in xs:
        if x > 0:
            if x > 5:
                continue
            y = 2.0                # weakly typed: takes float32 from the other branch
        else:
            y = -x
        total = total + y
    return total


@pytest.mark.parametrize("fn, args", [(dead_store_in_a_branch, (np.float64(1.0),)),
                                      (python_number_after_continue, (np.array([1.0, 7.0, -2.0], np.float32),))])
def test_second_review_loops_equal_python(fn, args):
    expected = fn(*args)
    for backend in ("xla", "python"):
        result = s2s.jit(fn, backend=backend)(*args)
        assert np.asarray(result).dtype == np.asarray(expected).dtype
        assert_close(result, expected)


def else_reads_the_loop_variable(xs):
    total = 0.0
    for x in xs:
        if x > 100:
            break
        total = total + x
    else:
        total = total * x          # the last item
    return total


def list_made_on_one_path(x):
    if x > 5:
        return x
    parts = []                     # made after the returning if: each path has its own
    for k in range(3):
        parts.append(x * k)
    return parts[0] + parts[1] + parts[2]


def count_with_a_sentinel(x, n):
    i = None
    for i in range(n):
        x = x * 2
    return x, i


@pytest.mark.parametrize("fn, args", [(else_reads_the_loop_variable, (np.array([1.0, 2.0, 5.0]),)),
                                      (list_made_on_one_path, (np.float64(1.0),)),
                                      (count_with_a_sentinel, (np.float64(1.0), np.int64(3)))])
def test_third_review_programs_equal_python(fn, args):
    expected = fn(*args)
    for backend in ("xla", "python"):
        assert_close(s2s.jit(fn, backend=backend)(*args), expected)


def inner_loop_on_a_fresh_value(x, n):
    out = 0.0 * x
    for i in range(n):
        y = x + i                  # set again each pass: the inner loop's reads are its own
        while np.sum(y) < 10.0:
            y = y * 2.0
        out = out + y
    return out


def inner_loop_on_an_annotated_value(x, n):
    out = 0.0 * x
    for i in range(n):
        y: np.ndarray = x + i      # annotated: set again each pass all the same
        while np.sum(y) < 10.0:
            y = y * 2.0
        out = out + y
    return out


@pytest.mark.parametrize("fn", [inner_loop_on_a_fresh_value, inner_loop_on_an_annotated_value])
def test_an_inner_loop_reading_a_name_set_earlier_in_the_pass_is_not_carried(fn):
    x, n = np.array([0.5, 1.0]), np.int64(3)
    for backend in ("xla", "python"):
        assert_close(s2s.jit(fn, backend=backend)(x, n), fn(x, n))
    carried = s2s.make_jaxpr(fn)(x, n).jaxpr.eqns[-1]
    assert carried.primitive.name == "while_loop"
    assert len(carried.outvars) == 2              # the index and `out`: not `y`


def continue_nested(depth: int) -> str:
    """A loop whose `if`s nest `depth` deep, each with a `continue` and then a name that
    only the rest of that `if` assigns (so the skipping path needs a placeholder of its type)."""
    lines = ["import numpy as np", "def f(xs):", "    total = 0.0", "    for x in xs:"]
    for d in range(depth):
        pad = "        " + "    " * d
        lines += [f"{pad}if x > {d}:", f"{pad}    if x > {d + 5}:", f"{pad}        continue",
                  f"{pad}    a{d} = x * {d + 1}.0"]
    for d in reversed(range(depth)):
        pad = "        " + "    " * d
        lines += [f"{pad}else:", f"{pad}    a{d} = -x", f"{pad}total = total + a{d}"]
    return "\n".join(lines + ["    return total", ""])


def test_each_nested_continue_stages_what_it_guards_once(monkeypatch):
    stagings = []
    staged_once = structured.StagedBody.__init__
    monkeypatch.setattr(structured.StagedBody, "__init__", lambda self, *a: stagings.append(1) or staged_once(self, *a))
    xs = np.linspace(-1, 12, 9)
    counts = {}
    for depth in (3, 6):
        fn = load_source(continue_nested(depth), f"nested_{depth}").f
        stagings.clear()
        assert_close(s2s.jit(fn)(xs), fn(xs))
        counts[depth] = len(stagings)
    assert counts[6] < 2 * counts[3], counts     # linear in the depth (it doubled per level)


def comprehension_then_branch(x):
    ys = [t for t in x]
    if np.sum(x) > 0:
        x = x * 2.0
    return x + ys[0]


def comprehension_in_a_while_loop(x):
    s = x
    i = 0
    while np.sum(s) < 50.0:
        s = np.stack([t * 2.0 for t in s])
        i += 1
    return np.sum(s) + i


@pytest.mark.parametrize("fn", [comprehension_then_branch, comprehension_in_a_while_loop])
@pytest.mark.parametrize("backend", ["xla", "python"])
def test_comprehensions_beside_staged_control_flow(fn, backend):
    """A comprehension's target is its own (not a loop carry), and beniget's read of its
    iterable (the comprehension node, which has no position) is placed by that iterable."""
    x = np.array([0.3, 0.7])
    np.testing.assert_allclose(np.asarray(s2s.jit(fn, backend=backend)(x)), fn(x))
    np.testing.assert_allclose(np.asarray(s2s.grad(total_of, argnums=1)(fn, x)),
                               _central_difference(lambda x: total_of(fn, x), x), rtol=1e-6)


def total_of(fn, x):
    return np.sum(fn(x))


def _central_difference(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])
