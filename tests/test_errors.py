"""The error boundary (`errors.api_boundary`): a user's mistake leaves every entry point
without the frames of s2s's it came through, the user's own frames kept; a user's own
exception keeps every frame; only the outermost boundary of a call cleans."""
import os
import traceback

import numpy as np
import pytest

import s2s
import s2s.test_util
import s2s_runtime
from s2s import lax

OWN_DIRS = tuple(os.path.dirname(package.__file__) + os.sep for package in (s2s, s2s_runtime))
# The one frame of s2s's a cleaned traceback may hold: where the error leaves the boundary
# (a Python function: Python adds the frame that raises). A jitted call's boundary is the
# `Caller`, in C, which adds none, unless it runs as Python (fastcall.PythonCaller).
BOUNDARY_FRAMES = {("errors.py", "user_api_boundary"), ("fastcall.py", "__call__")}


def misshapen(x):
    return x.reshape(7).sum()


def squares(x):
    return x * x


def total(x):
    return np.sum(x * x)


no_jvp_rule = s2s.custom_jvp(np.sin)
no_vjp_rule = s2s.custom_vjp(np.sin)
X = np.ones(3)


def donated():
    """An Array whose buffer a donating call took."""
    a = s2s.jit(lambda x: x * 1)(X)
    s2s.jit(lambda x: x + 1, donate_argnums=0)(a)
    return a


# Each public entry point, called with a mistake of the user's.
MISTAKES = {
    "grad": lambda: s2s.grad(misshapen)(X),
    "grad of a non-scalar": lambda: s2s.grad(squares)(X),
    "value_and_grad": lambda: s2s.value_and_grad(misshapen)(X),
    "jacfwd": lambda: s2s.jacfwd(misshapen)(X),
    "jacrev": lambda: s2s.jacrev(misshapen)(X),
    "hessian": lambda: s2s.hessian(misshapen)(X),
    "jvp": lambda: s2s.jvp(misshapen, (X,), (X,)),
    "jvp's tangents": lambda: s2s.jvp(total, (X,), (X, X)),
    "vjp": lambda: s2s.vjp(misshapen, X),
    "vjp's vjp_fn": lambda: s2s.vjp(total, X)[1]((1.0, 2.0)),
    "linearize": lambda: s2s.linearize(misshapen, X),
    "linearize's f_jvp": lambda: s2s.linearize(total, X)[1](X, X),
    "linear_transpose": lambda: s2s.linear_transpose(misshapen, X),
    "vmap": lambda: s2s.vmap(misshapen)(np.ones((2, 3))),
    "vmap's sizes": lambda: s2s.vmap(lambda a, b: a + b)(np.ones(2), np.ones(3)),
    "vmap's in_axes": lambda: s2s.vmap(total, in_axes="x"),
    "jit": lambda: s2s.jit(misshapen)(X),
    "jit, Python backend": lambda: s2s.jit(misshapen, backend="python")(X),
    "jit's lower": lambda: s2s.jit(misshapen).lower(X),
    "grad of a jitted function": lambda: s2s.grad(s2s.jit(misshapen))(X),
    "jit of a donated array": lambda: s2s.jit(total)(donated()),
    "pmap": lambda: s2s.pmap(misshapen)(np.ones((1, 3))),
    "pmap's in_axes": lambda: s2s.pmap(total, in_axes="x"),
    "pmap's lower": lambda: s2s.pmap(misshapen).lower(np.ones((1, 3))),
    "pmap's reference": lambda: s2s.pmap(total, static_broadcasted_argnums=1).reference(),
    "checkpoint's policy": lambda: s2s.checkpoint(total, policy=3),
    "checkpoint's static_argnums": lambda: s2s.grad(s2s.checkpoint(total, static_argnums=3))(X),
    "checkpoint_name": lambda: s2s.checkpoint_name(X, 3),
    "checkpointed": lambda: s2s.checkpointed(range(3), -1),
    "print_saved_residuals": lambda: s2s.print_saved_residuals(misshapen, X),
    "custom_jvp": lambda: s2s.grad(lambda x: no_jvp_rule(x).sum())(X),
    "custom_vjp": lambda: s2s.jit(s2s.grad(lambda x: no_vjp_rule(x).sum()))(X),
    "make_jaxpr": lambda: s2s.make_jaxpr(misshapen)(X),
    "emit_python": lambda: s2s.emit_python(misshapen, X),
    "ShapeDtype": lambda: s2s.ShapeDtype((-1,), "f4"),
    "block_until_ready": lambda: s2s.block_until_ready([donated()]),
    "grad of a donated array": lambda: s2s.grad(total)(donated()),
    "export": lambda: s2s.export(name="1st"),
    "check_grads": lambda: s2s.test_util.check_grads(misshapen, (X,)),
    "distributed.initialize": lambda: s2s.distributed.initialize(1234, 2, 0),
    "lax.cond": lambda: lax.cond(np.array(True), lambda a: a, lambda a: a.sum(), X),
    "lax.switch": lambda: lax.switch(np.array(0), [lambda a: a, lambda a: a.sum()], X),
    "lax.while_loop": lambda: lax.while_loop(lambda c: c.sum() < 3, lambda c: c.sum(), X),
    "lax.scan": lambda: lax.scan(lambda c, a: (c.sum(), a), X, X),
    "lax.fori_loop": lambda: lax.fori_loop(0, 3, lambda i, c: c.sum(), X),
    "lax.map": lambda: lax.map(misshapen, np.ones((2, 3))),
    "lax.custom_root": lambda: lax.custom_root(misshapen, X, lambda f, x0: x0, lambda g, y: y),
    "lax.custom_linear_solve": lambda: lax.custom_linear_solve(lambda v: v.reshape(7), X, lambda m, b: b),
    "lax.odeint": lambda: lax.odeint(lambda y, t: y.reshape(7), X, np.linspace(0.0, 1.0, 3)),
    "lax.psum outside a mapped axis": lambda: lax.psum(X, "i"),
}


def s2s_frames(error) -> list[tuple[str, str]]:
    return [(os.path.basename(f.filename), f.name) for f in traceback.extract_tb(error.__traceback__)
            if f.filename.startswith(OWN_DIRS)]


@pytest.mark.parametrize("mistake", MISTAKES.values(), ids=MISTAKES)
def test_every_entry_point_shows_a_mistake_without_s2s_frames(mistake):
    with pytest.raises((s2s.S2SError, s2s.DonatedBufferError)) as info:
        mistake()
    error = info.value
    frames = s2s_frames(error)
    assert len(frames) <= 1 and set(frames) <= BOUNDARY_FRAMES, frames
    assert error.__cause__ is None and (error.__suppress_context__ or error.__context__ is None)   # nothing chained
    # The user's frames stay: the call that made the mistake is the last of this file's.
    assert [f.name for f in traceback.extract_tb(error.__traceback__)
            if f.filename == __file__][-1] == "<lambda>", traceback.format_tb(error.__traceback__)


def export_named_badly():
    return s2s.export(name="1st")


@pytest.mark.parametrize("mistake, where", [(lambda: s2s.grad(misshapen)(X), misshapen),
                                            (export_named_badly, export_named_badly)], ids=["staging", "export"])
def test_the_location_of_a_mistake_is_the_users_line(mistake, where):
    with pytest.raises(s2s.S2SError) as info:
        mistake()
    assert str(info.value).startswith(f"{__file__}:{where.__code__.co_firstlineno + 1}:"), str(info.value)


class Mine(Exception):
    """An exception of the user's, not s2s's."""


class Raising:
    def __init__(self, x):   # run as Python by staging (a class is called as it is)
        raise Mine("the user's own")


def constructs_raising(x):
    Raising(x)
    return np.sum(x)


@pytest.mark.parametrize("transform", [s2s.grad, s2s.vmap, s2s.jit, s2s.make_jaxpr,
                                       lambda f: s2s.jit(s2s.grad(f))], ids=["grad", "vmap", "jit", "make_jaxpr",
                                                                            "jit(grad)"])
def test_a_users_own_exception_keeps_every_frame(transform):
    with pytest.raises(Mine) as info:
        transform(constructs_raising)(X)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "__init__" and frames[-1].filename == __file__
    assert any(f.filename.endswith(os.path.join("frontend", "walker.py")) for f in frames)   # untouched


class Checking:
    def __init__(self, x):   # run as Python by staging, and making a mistake with s2s
        s2s.ShapeDtype((-1,), "f4")


def constructs_checking(x):
    Checking(x)
    return np.sum(x)


@pytest.mark.parametrize("transform", [s2s.grad, s2s.vmap, lambda f: s2s.grad(s2s.jit(f))],
                         ids=["grad", "vmap", "grad(jit)"])
def test_only_the_outermost_boundary_cleans(transform):
    """ShapeDtype and the inner jit are boundaries too, inside grad's or vmap's: they let
    the error through, and the outer one keeps the user's frame that s2s ran as Python.
    (The jitted call, in C, cleaned where it stood, and took that frame with it.)"""
    with pytest.raises(s2s.StagingError) as info:
        transform(constructs_checking)(X)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert (os.path.basename(frames[-1].filename), frames[-1].name) == ("test_errors.py", "__init__"), frames
    assert s2s_frames(info.value) == [("errors.py", "user_api_boundary")]


class CheckingWhileHandling:
    def __init__(self, x):   # a mistake made while handling an exception: nothing chained is shown
        try:
            {}["missing"]
        except KeyError:
            s2s.ShapeDtype((-1,), "f4")


def constructs_checking_while_handling(x):
    CheckingWhileHandling(x)
    return np.sum(x)


@pytest.mark.parametrize("transform", [s2s.jit, lambda f: s2s.jit(f, backend="python"), s2s.grad, s2s.vmap],
                         ids=["jit", "jit_python", "grad", "vmap"])
def test_a_mistake_leaves_without_the_exceptions_it_was_raised_during(transform):
    with pytest.raises(s2s.StagingError) as info:
        transform(constructs_checking_while_handling)(X)
    assert isinstance(info.value.__context__, KeyError) and info.value.__suppress_context__
    assert info.value.__cause__ is None
