"""print() of staged values in a staged function (issue 42): `debug_print`, made when the
program runs, each time the code around it runs, on every backend, with the loop around it
kept one loop (a 1000-step loop with `print(i)` was unrolled into 27k emitted lines and a
jit that took 209 s to compile).

The oracle is NumPy: the function run as plain Python prints exactly what every s2s
backend must print (eval_jaxpr, the emitted module, jit on Python and on XLA, whose
program calls back into Python to print).
"""
import contextlib
import io

import numpy as np
import pytest

import s2s
from s2s import lax
from s2s.emit.python import load_source
from s2s_runtime.xla import Executable

X = np.array([0.25, -1.5, 2.0])


def printed(run, *args):
    """(the result, what `run(*args)` printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = run(*args)
    return result, out.getvalue()


def emitted(fn, *args):
    source = s2s.emit_python(fn, *args)
    module = load_source(source, "emitted")
    return source, getattr(module, module.__all__[0])


def thousand_steps(x):
    for i in range(1000):
        x = np.sin(x) * 0.9 + 0.1
        print(i)
    return np.sum(x)


def test_a_print_in_a_long_loop_keeps_it_one_loop_and_prints_every_step_on_every_backend():
    expected_value, expected_text = printed(thousand_steps, X)
    assert expected_text == "".join(f"{i}\n" for i in range(1000))
    closed = s2s.make_jaxpr(thousand_steps)(X)
    assert [e.primitive.name for e in closed.jaxpr.eqns].count("scan") == 1
    assert len(closed.jaxpr.eqns) < 10, closed
    source, fn = emitted(thousand_steps, X)
    assert len(source.splitlines()) < 30 and "        print(i)  # " in source, source
    runs = {"eval_jaxpr": lambda x: s2s.eval_jaxpr(closed, x)[0], "emitted": fn,
            "jit python": s2s.jit(thousand_steps, backend="python"), "jit xla": s2s.jit(thousand_steps)}
    for name, run in runs.items():
        value, text = printed(run, X)
        assert text == expected_text, name
        np.testing.assert_allclose(value, expected_value, rtol=1e-14, err_msg=name)


def training(w, x):
    for step in range(3):
        loss = np.sum((w * x - 1.0) ** 2)
        print("step", step, "loss", loss, sep=" | ", end=";\n")
        w = w - 0.1 * 2 * (w * x - 1.0) * x
    return np.sum(w ** 2)


def test_static_and_staged_arguments_sep_and_end_print_as_numpy_prints_them():
    _, expected = printed(training, X.copy(), X)
    assert expected.count("step | ") == 3 and expected.endswith(";\n")
    source, fn = emitted(training, X, X)
    assert "print('step', step, 'loss', loss, sep=' | ', end=';\\n')" in source, source
    for run in (fn, s2s.jit(training, backend="python"), s2s.jit(training)):
        assert printed(run, X, X)[1] == expected


def test_a_gradient_prints_the_forward_pass_once_per_step():
    """The forward values (the loop's, once each): nothing is printed in the backward pass."""
    _, expected = printed(training, X.copy(), X)
    grad = s2s.grad(training)
    for run in (grad, s2s.jit(grad), s2s.jit(grad, backend="python")):
        assert printed(run, X, X)[1] == expected


def branch(x):
    if np.sum(x) > 0:
        print("positive sum", np.sum(x))
        x = x * 2.0
    return x


@pytest.mark.parametrize("x", [X, -X])
def test_a_print_in_a_branch_prints_only_when_the_branch_runs(x):
    expected_value, expected = printed(branch, x)
    for run in (s2s.jit(branch), s2s.jit(branch, backend="python")):
        value, text = printed(run, x)
        assert text == expected
        np.testing.assert_allclose(value, expected_value, rtol=1e-15)


def test_a_while_loop_body_prints_each_step():
    def halve(x):
        return lax.while_loop(lambda c: np.max(np.abs(c)) > 0.3, lambda c: print_and_halve(c), x)

    def print_and_halve(c):
        print("c", c)
        return c / 2

    _, expected = printed(lambda x: numpy_halve(x), X)
    for run in (s2s.jit(halve), s2s.jit(halve, backend="python")):
        assert printed(run, X)[1] == expected


def numpy_halve(c):
    while np.max(np.abs(c)) > 0.3:
        print("c", c)
        c = c / 2
    return c


def test_vmap_prints_a_batched_value_whole_and_an_unbatched_one_as_it_is():
    def shifted(x):
        for k in range(2):
            print(k, x + k)
        return x
    xs = np.stack([X, 2 * X])
    expected = "".join(f"{k} {xs + k}\n" for k in range(2))
    for run in (s2s.vmap(shifted), s2s.jit(s2s.vmap(shifted))):
        assert printed(run, xs)[1] == expected


def test_float32_values_print_as_numpy_prints_them():
    x = np.array([0.1, 1 / 3], np.float32)
    expected = printed(training, x.copy(), x)[1]
    assert printed(s2s.jit(training), x, x)[1] == expected


def prints_a_list_of_arrays(x):
    print([x, x])
    return x


def prints_to_a_file(x):
    print(x, file=io.StringIO())
    return x


@pytest.mark.parametrize("fn, message", [
    (prints_a_list_of_arrays, "print each array as an argument of its own"),
    (prints_to_a_file, "takes only sep=, end= and flush="),
])
def test_what_cannot_be_printed_at_run_time_is_refused_at_its_line(fn, message):
    with pytest.raises(s2s.UnsupportedSyntaxError, match=message) as info:
        s2s.jit(fn)(X)
    assert "print(" in str(info.value)


def test_a_program_on_several_replicas_cannot_print():
    def doubled(x):
        print("x", x)
        return x * 2
    with pytest.raises(s2s.UnsupportedFunctionError, match="several replicas"):
        s2s.pmap(doubled)(X[None])


def test_a_program_that_prints_cannot_be_saved_for_another_process():
    text = s2s.jit(training).lower(X, X).as_text()
    executable = Executable(text, [np.dtype(np.float64)] * 2)
    assert printed(executable, X, X)[1] == printed(training, X.copy(), X)[1]
    with pytest.raises(ValueError, match="prints while it runs"):
        executable.serialize()


def tricky_text(x):
    print('quote " backslash \\ newline \n brace } unicode \u00e9\U0001f600', x, sep="\"}")
    return x


def test_static_text_of_any_kind_prints_as_it_is_under_xla():
    expected = printed(tricky_text, X)[1]
    for run in (s2s.jit(tricky_text), s2s.jit(tricky_text, backend="python")):
        assert printed(run, X)[1] == expected


def test_a_while_loop_whose_condition_prints_is_not_taken_for_one_that_draws(capsys):
    """Reverse mode of a while loop without a bound runs it again; a print in its condition
    prints again (as in JAX), and is no reason to refuse it as a drawing condition is."""
    import s2s

    def halvings(x):
        def keep_going(c):
            print("checking", c[1])
            return c[1] < 3
        return s2s.lax.while_loop(keep_going, lambda c: (c[0] * 0.5, c[1] + 1), (x, 0))[0]
    assert s2s.grad(halvings)(2.0) == 0.125
    assert "checking" in capsys.readouterr().out
