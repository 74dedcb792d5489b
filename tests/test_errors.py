"""The error boundary (`errors.api_boundary`): a user's mistake leaves every entry point
without the frames of s2s's it came through, the user's own frames kept; a user's own
exception keeps every frame; only the outermost boundary of a call cleans. And the error's
class: for the same mistake, an instance of the class jax raises (TypeError, ValueError,
NameError), raised when the transform is built where jax raises it then."""
import os
import traceback
import types

import jax
import jax.numpy as jnp
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


# ---------------------------------------------------------------------------------------
# JAX's exception classes: code written for JAX catches TypeError or ValueError (NameError
# for an unbound axis name); s2s's error for the same mistake is also one, and is raised
# when the transform is built where JAX raises it then.

JAX_LIB = types.SimpleNamespace(api=jax, np=jnp, lax=jax.lax)
S2S_LIB = types.SimpleNamespace(api=s2s, np=np, lax=lax)
V3, V4 = np.arange(3.0), np.arange(4.0)


def _add(a, b):
    return a + b


def _custom_vjp_with_two_cotangents(api):
    @api.custom_vjp
    def double(x):
        return x * 2.0
    double.defvjp(lambda x: (x * 2.0, x), lambda residual, ct: (ct, ct))
    return double


def _custom_jvp_with_a_misshapen_tangent(api):
    @api.custom_jvp
    def double(x):
        return x * 2.0
    double.defjvp(lambda primals, tangents: (primals[0] * 2.0, np.ones(3)))
    return double


# (what, lambda lib: (build the transform, call what was built)); the same program for both.
SAME_MISTAKES = {
    "vmap in_axes a string": lambda L: (lambda: L.api.vmap(squares, in_axes="a"), lambda f: f(V3)),
    "vmap in_axes a float": lambda L: (lambda: L.api.vmap(squares, in_axes=1.5), lambda f: f(V3)),
    "vmap in_axes True": lambda L: (lambda: L.api.vmap(squares, in_axes=True), lambda f: f(V3)),
    "vmap in_axes a dict for all arguments": lambda L: (lambda: L.api.vmap(squares, in_axes={"a": 0}),
                                                        lambda f: f(V3)),
    "vmap in_axes holding a string": lambda L: (lambda: L.api.vmap(_add, in_axes=(0, "a")), lambda f: f(V3, V3)),
    "vmap out_axes a string": lambda L: (lambda: L.api.vmap(squares, out_axes="a"), lambda f: f(V3)),
    "vmap of a non-function": lambda L: (lambda: L.api.vmap(3), lambda f: f(V3)),
    "vmap in_axes of another length": lambda L: (lambda: L.api.vmap(squares, in_axes=(0, 0)), lambda f: f(V3)),
    "vmap of inconsistent sizes": lambda L: (lambda: L.api.vmap(_add), lambda f: f(V3, V4)),
    "vmap of inconsistent keyword sizes": lambda L: (lambda: L.api.vmap(_add), lambda f: f(V3, b=V4)),
    "vmap in_axes out of range": lambda L: (lambda: L.api.vmap(squares, in_axes=1), lambda f: f(V3)),
    "vmap of a scalar": lambda L: (lambda: L.api.vmap(squares), lambda f: f(3.0)),
    "vmap mapping nothing": lambda L: (lambda: L.api.vmap(squares, in_axes=None), lambda f: f(V3)),
    "vmap axis_size unlike the sizes": lambda L: (lambda: L.api.vmap(squares, axis_size=5), lambda f: f(V3)),
    "vmap in_axes not a prefix": lambda L: (lambda: L.api.vmap(lambda p: p["a"], in_axes=({"b": 0},)),
                                            lambda f: f({"a": V3})),
    "vmap out_axes out of range": lambda L: (lambda: L.api.vmap(squares, out_axes=2), lambda f: f(V3)),
    "vmap out_axes None of a batched result": lambda L: (lambda: L.api.vmap(squares, out_axes=None),
                                                         lambda f: f(V3)),
    "vmap out_axes not a prefix": lambda L: (lambda: L.api.vmap(lambda x: (x, x), out_axes=(0,)), lambda f: f(V3)),
    "vmap of a string": lambda L: (lambda: L.api.vmap(lambda s: 1.0), lambda f: f("abc")),
    "vmap bool of a mapped value": lambda L: (lambda: L.api.vmap(lambda x: x if x > 0 else -x), lambda f: f(V3)),
    "grad of a non-scalar": lambda L: (lambda: L.api.grad(squares), lambda f: f(V3)),
    "grad argnums a string": lambda L: (lambda: L.api.grad(total, argnums="a"), lambda f: f(V3)),
    "grad argnums past the arguments": lambda L: (lambda: L.api.grad(total, argnums=5), lambda f: f(V3)),
    "grad argnums before the arguments": lambda L: (lambda: L.api.grad(total, argnums=-5), lambda f: f(V3)),
    "grad of an int input": lambda L: (lambda: L.api.grad(lambda x: x * 2.0), lambda f: f(3)),
    "grad of an int array input": lambda L: (lambda: L.api.grad(lambda x: (x * 2.0).sum()), lambda f: f(np.arange(3))),
    "grad has_aux of no pair": lambda L: (lambda: L.api.grad(total, has_aux=True), lambda f: f(V3)),
    "grad of a non-function": lambda L: (lambda: L.api.grad(3), lambda f: f(V3)),
    "grad of no arguments": lambda L: (lambda: L.api.grad(lambda: 1.0), lambda f: f()),
    "jacrev of an int output": lambda L: (lambda: L.api.jacrev(lambda x: (x > 0).astype(L.np.int32)),
                                          lambda f: f(V3)),
    "jacfwd of an int input": lambda L: (lambda: L.api.jacfwd(lambda x: x * 2), lambda f: f(np.arange(3))),
    "jacfwd argnums past the arguments": lambda L: (lambda: L.api.jacfwd(squares, argnums=5), lambda f: f(V3)),
    "jit static_argnums a string": lambda L: (lambda: L.api.jit(squares, static_argnums="a"), lambda f: f(V3)),
    "jit static_argnums past the parameters": lambda L: (lambda: L.api.jit(squares, static_argnums=5),
                                                         lambda f: f(V3)),
    "jit static_argnames no parameter has": lambda L: (lambda: L.api.jit(squares, static_argnames="zz"),
                                                       lambda f: f(V3)),
    "jit of a non-function": lambda L: (lambda: L.api.jit(3), lambda f: f(V3)),
    "jit bool of a staged value": lambda L: (lambda: L.api.jit(lambda x: x if x.sum() > 0 else -x),
                                             lambda f: f(V3)),
    "jit int of a staged value": lambda L: (lambda: L.api.jit(lambda x: L.np.zeros(int(x.sum()))),
                                            lambda f: f(V3)),
    "jit called with too many arguments": lambda L: (lambda: L.api.jit(squares), lambda f: f(V3, V3)),
    "jit of mismatched shapes": lambda L: (lambda: L.api.jit(_add), lambda f: f(V3, V4)),
    "jit of a reshape that does not fit": lambda L: (lambda: L.api.jit(lambda x: x.reshape(5)), lambda f: f(V3)),
    "jvp with more tangents than primals": lambda L: (lambda: None, lambda _: L.api.jvp(squares, (V3,), (V3, V3))),
    "jvp of a misshapen tangent": lambda L: (lambda: None, lambda _: L.api.jvp(squares, (V3,), (V4,))),
    "jvp of an int tangent": lambda L: (lambda: None, lambda _: L.api.jvp(squares, (V3,), (np.arange(3),))),
    "jvp of primals not in a tuple": lambda L: (lambda: None, lambda _: L.api.jvp(squares, V3, V3)),
    "vjp of a misshapen cotangent": lambda L: (lambda: None, lambda _: L.api.vjp(squares, V3)[1](V4)),
    "vjp of a cotangent of another structure": lambda L: (lambda: None,
                                                          lambda _: L.api.vjp(squares, V3)[1]((V3, V3))),
    "vjp of an int cotangent": lambda L: (lambda: None, lambda _: L.api.vjp(squares, V3)[1](np.arange(3))),
    "linearize of a misshapen tangent": lambda L: (lambda: None, lambda _: L.api.linearize(squares, V3)[1](V4)),
    "cond of a non-scalar predicate": lambda L: (lambda: None, lambda _: L.api.jit(
        lambda x: L.lax.cond(x > 0, lambda: 1.0, lambda: 2.0))(V3)),
    "cond of branches of other structures": lambda L: (lambda: None, lambda _: L.api.jit(
        lambda x: L.lax.cond(x.sum() > 0, lambda: (x, x), lambda: x))(V3)),
    "scan of xs shorter than length": lambda L: (lambda: None, lambda _: L.lax.scan(lambda c, x: (c, x), 0.0, V3,
                                                                                    length=5)),
    "scan of no xs and no length": lambda L: (lambda: None, lambda _: L.lax.scan(lambda c, x: (c, x), 0.0, None)),
    "scan of a carry of another structure": lambda L: (lambda: None, lambda _: L.lax.scan(
        lambda c, x: ((c, c), x), 0.0, V3)),
    "scan of a carry of another shape": lambda L: (lambda: None, lambda _: L.lax.scan(
        lambda c, x: (c * V3, x), 0.0, V3)),
    "while_loop of a carry of another structure": lambda L: (lambda: None, lambda _: L.lax.while_loop(
        lambda c: c < 3, lambda c: (c, c), 0.0)),
    "while_loop of a non-scalar condition": lambda L: (lambda: None, lambda _: L.lax.while_loop(
        lambda c: c < 3, lambda c: c + 1, V3)),
    "fori_loop of a carry of another shape": lambda L: (lambda: None, lambda _: L.lax.fori_loop(
        0, 3, lambda i, c: c * V3, 0.0)),
    "psum over an unbound name": lambda L: (lambda: None, lambda _: L.api.jit(lambda x: L.lax.psum(x, "i"))(V3)),
    "psum over a name vmap does not bind": lambda L: (lambda: None, lambda _: L.api.vmap(
        lambda x: L.lax.psum(x, "j"), axis_name="i")(V3)),
    "checkpoint static_argnums past the arguments": lambda L: (
        lambda: L.api.checkpoint(squares, static_argnums=(3,)), lambda f: L.api.grad(lambda x: f(x).sum())(V3)),
    "pmap over more devices than there are": lambda L: (lambda: L.api.pmap(squares),
                                                        lambda f: f(np.ones((9, 3)))),
    "pmap in_axes a string": lambda L: (lambda: L.api.pmap(squares, in_axes="a"), lambda f: f(np.ones((1, 3)))),
    "pmap of inconsistent sizes": lambda L: (lambda: L.api.pmap(_add), lambda f: f(np.ones((1, 3)), np.ones((2, 3)))),
    "pmap of a scalar": lambda L: (lambda: L.api.pmap(squares), lambda f: f(3.0)),
    "pmap static argument past the arguments": lambda L: (
        lambda: L.api.pmap(squares, static_broadcasted_argnums=(3,)), lambda f: f(np.ones((1, 3)))),
    "pmap static argument a string": lambda L: (lambda: L.api.pmap(squares, static_broadcasted_argnums="a"),
                                                lambda f: f(np.ones((1, 3)))),
    "custom_vjp bwd of too many cotangents": lambda L: (lambda: None, lambda _: L.api.grad(
        _custom_vjp_with_two_cotangents(L.api))(1.0)),
    "custom_jvp of a misshapen tangent": lambda L: (lambda: None, lambda _: L.api.grad(
        _custom_jvp_with_a_misshapen_tangent(L.api))(1.0)),
    "make_jaxpr static_argnums a string": lambda L: (lambda: None, lambda _: L.api.make_jaxpr(
        squares, static_argnums="a")(V3)),
}

JAX_CLASSES = (TypeError, ValueError, NameError)


def _raised(build, call) -> tuple[str, Exception]:
    """When (at "build" or at the "call") and what the program raises."""
    stage = "build"
    try:
        made = build()
        stage = "call"
        call(made)
    except Exception as error:   # noqa: BLE001 (what is raised is what is compared)
        return stage, error
    raise AssertionError("the program raised nothing")


@pytest.mark.parametrize("mistake", SAME_MISTAKES.values(), ids=SAME_MISTAKES)
def test_the_same_mistake_raises_an_instance_of_jaxs_class(mistake):
    jax_stage, jax_error = _raised(*mistake(JAX_LIB))
    stage, error = _raised(*mistake(S2S_LIB))
    assert isinstance(error, s2s.S2SError), error              # with its location and help
    wanted = [cls for cls in JAX_CLASSES if isinstance(jax_error, cls)]
    assert wanted, jax_error
    assert all(isinstance(error, cls) for cls in wanted), (type(error).__mro__, type(jax_error).__mro__)
    if jax_stage == "build":
        assert stage == "build", error


def test_errors_of_jaxs_classes_keep_their_location_and_help():
    with pytest.raises(ValueError) as info:
        s2s.vmap(lambda a, b: a + b)(np.ones(2), np.ones(3))
    assert isinstance(info.value, s2s.StagingError) and "help: every mapped argument" in str(info.value)
    with pytest.raises(TypeError) as info:
        s2s.jit(lambda x: x if x.sum() > 0 else -x)(X)
    assert isinstance(info.value, s2s.errors.ConcretizationError)
    assert str(info.value).startswith(f"{__file__}:") and "^" in str(info.value)


def adds_a_string(x):
    return x + "a"


def test_a_python_error_raised_while_staging_keeps_its_class():
    """A TypeError the user's expression raises (a string added to an array) stays one, as
    it is under jax.jit, with the line it came from."""
    with pytest.raises(TypeError) as info:
        s2s.jit(adds_a_string)(X)
    assert isinstance(info.value, s2s.StagingError)
    assert str(info.value).startswith(f"{__file__}:{adds_a_string.__code__.co_firstlineno + 1}:")


def test_a_result_that_is_not_an_array_is_a_type_error_as_jaxs():
    def greeting(x):
        return "hello"
    for transform in (s2s.vmap, s2s.jit, s2s.grad):
        with pytest.raises(TypeError, match="returns a str, which is not an array"):
            transform(greeting)(np.ones(3))
