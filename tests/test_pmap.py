"""s2s.pmap on 8 CPU devices of one process: every collective against NumPy, in_axes and
out_axes, errors naming the argument, the lowered SPMD module, and data-parallel gradients
(a pmean of per-device gradients) equal to the full-batch gradient.

The client's device count is fixed when it is first made, and the suite's process has one
device; so the tests below that run on devices run in a child pytest process started with
S2S_NUM_CPU_DEVICES=8 (`test_pmap_runs_in_a_process_with_8_cpu_devices`). Lowering needs
no devices and is also checked here.
"""
import os
import pathlib
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from tests.helpers import BLOCK_JAX, CHECKOUT_PATH
from s2s import lax
from s2s.errors import StagingError

ROOT = pathlib.Path(__file__).resolve().parent.parent
N = 8
IN_CHILD = os.environ.get("S2S_NUM_CPU_DEVICES") == str(N)
on_devices = pytest.mark.skipif(not IN_CHILD, reason="runs in the 8-device child process")


def _child_env(**extra):
    env = dict(os.environ, S2S_NUM_CPU_DEVICES=str(N), **extra)
    # jax, the oracle, on as many CPU devices
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={N}").strip()
    env["PYTHONPATH"] = CHECKOUT_PATH + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.skipif(IN_CHILD, reason="this is the child")
def test_pmap_runs_in_a_process_with_8_cpu_devices():
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                            cwd=ROOT, env=_child_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def total(x):
    return lax.psum(x, "i")


def mean(x):
    return lax.pmean(x, "i")


def spread(x):
    return lax.pmax(x, "i") - lax.pmin(x, "i")


def biggest(x):
    return lax.pmax(x, "i")


def smallest(x):
    return lax.pmin(x, "i")


def test_lowered_text_is_one_spmd_module_and_needs_no_devices():
    x = np.ones((N, 3))
    text = s2s.pmap(total, "i").lower(x).as_text()
    assert "mhlo.num_replicas = 8" in text
    assert '"stablehlo.all_reduce"' in text and "replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]>" in text
    assert "func.func public @main(%x: tensor<3xf64>)" in text   # one device's shapes
    hlo = s2s.pmap(total, "i").lower(x).as_hlo_text()
    assert "all-reduce" in hlo
    gathered = s2s.pmap(lambda v: lax.all_gather(v, "i"), "i").lower(x).as_text()
    assert '"stablehlo.all_gather"' in gathered and "tensor<8x3xf64>" in gathered
    assert "stablehlo.replica_id" in s2s.pmap(lambda v: v * lax.axis_index("i"), "i").lower(x).as_text()


def test_a_pmaps_lowering_is_jits_lowered_and_refuses_compile_clearly():
    lowered = s2s.pmap(total, "i").lower(np.ones((N, 3)))
    assert type(lowered) is type(s2s.jit(np.sin).lower(np.ones(3)))
    with pytest.raises(s2s.S2SError, match="compile\\(\\) of a pmap's lowering is not supported"):
        lowered.compile()


def test_a_collective_over_a_name_no_pmap_binds_is_an_error():
    with pytest.raises(StagingError, match="'j'"):
        s2s.pmap(lambda v: lax.psum(v, "j"), "i").lower(np.ones((N, 2)))


def test_vmap_behaviour_is_unchanged_a_vmapped_psum_still_batches_away():
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(s2s.jit(s2s.vmap(total, axis_name="i"))(x), np.broadcast_to(x.sum(0), x.shape))


# ---------------------------------------------------------------------------------------
# On 8 devices

X = np.random.default_rng(0).normal(size=(N, 5, 3))


@on_devices
@pytest.mark.parametrize("fn, expected", [
    (total, lambda x: x.sum(0)), (mean, lambda x: x.mean(0)), (biggest, lambda x: x.max(0)),
    (smallest, lambda x: x.min(0)), (spread, lambda x: x.max(0) - x.min(0))])
def test_reductions_against_numpy(fn, expected):
    out = s2s.pmap(fn, "i")(X)
    assert isinstance(out, s2s.Array) and out.shape == X.shape
    np.testing.assert_allclose(out, np.broadcast_to(expected(X), X.shape), rtol=1e-12)


@on_devices
def test_integer_psum_and_axis_index():
    ints = np.arange(N * 2, dtype=np.int32).reshape(N, 2)
    np.testing.assert_array_equal(s2s.pmap(total, "i")(ints), np.broadcast_to(ints.sum(0), ints.shape))
    index = s2s.pmap(lambda v: lax.axis_index("i"), "i")(X)
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index, np.arange(N))
    np.testing.assert_allclose(s2s.pmap(lambda v: v * lax.axis_index("i"), "i")(X),
                               X * np.arange(N)[:, None, None])


@on_devices
@pytest.mark.parametrize("axis, tiled", [(0, False), (1, False), (2, False), (0, True), (1, True)])
def test_all_gather_against_numpy(axis, tiled):
    out = s2s.pmap(lambda v: lax.all_gather(v, "i", axis=axis, tiled=tiled), "i")(X)
    gathered = np.concatenate(list(X), axis=axis) if tiled else np.stack(list(X), axis=axis)
    np.testing.assert_allclose(out, np.broadcast_to(gathered, (N,) + gathered.shape))


PMAP_GROUPS = [[[0, 1, 2, 3], [4, 5, 6, 7]], [[7, 0], [2, 5], [1, 3], [6, 4]], [[0], [1], [2], [3], [4], [5], [6], [7]]]


def test_axis_index_groups_lower_to_replica_groups():
    text = s2s.pmap(lambda v: lax.psum(v, "i", axis_index_groups=PMAP_GROUPS[1]), "i").lower(np.ones((N, 3))).as_text()
    assert "replica_groups = dense<[[7, 0], [2, 5], [1, 3], [6, 4]]> : tensor<4x2xi64>" in text
    with pytest.raises(StagingError, match="must cover axis 'i' \\(size 8\\) exactly, in groups of equal size"):
        s2s.pmap(lambda v: lax.pmax(v, "i", axis_index_groups=[[0, 1, 2], [3, 4, 5, 6, 7]]), "i").lower(np.ones((N, 3)))


@on_devices
@pytest.mark.parametrize("groups", PMAP_GROUPS, ids=str)
def test_axis_index_groups_against_numpy(groups):
    from tests.test_lax_collectives import grouped_collectives, grouped_expected
    out = s2s.pmap(lambda v: grouped_collectives(v, groups, "i"), "i")(X)
    for got, want in zip(out, grouped_expected(X, groups), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


X_NAN = X.copy()
X_NAN[5, 0, :] = np.nan       # on device 5: one row NaN
X_NAN[2, 3, 1] = np.nan       # on device 2: one element


@on_devices
@pytest.mark.parametrize("collective, reduce", [(lax.pmax, np.max), (lax.pmin, np.min)], ids=["pmax", "pmin"])
@pytest.mark.parametrize("groups", [None, PMAP_GROUPS[0]], ids=["all", "halves"])
def test_a_nan_on_one_device_is_the_pmax_and_pmin_on_every_backend_and_so_is_its_derivative(
        collective, reduce, groups):
    """NumPy's max propagates NaN, and so do the Python backend and vmap; XLA:CPU's
    all_reduce skipped it (pmax over [1, nan, 2, 0.5] was 2, its gradient [0, 0, 8, 0]).
    The value and the derivative are NaN where some device of the group holds a NaN, and
    NumPy's elsewhere (the derivative: the group's weights summed, at the device holding
    the extremum), on XLA as on the Python backend and under vmap."""
    def extremum(v):
        return collective(v, "i", axis_index_groups=groups)

    def loss(v, w):
        return np.sum(extremum(v) * w)

    weights = np.arange(1.0, X_NAN.size + 1).reshape(X_NAN.shape)
    expected, expected_grad = np.empty_like(X_NAN), np.empty_like(X_NAN)
    for group in groups or [list(range(N))]:
        expected[group] = reduce(X_NAN[group], axis=0)
        expected_grad[group] = np.where(X_NAN[group] == expected[group], weights[group].sum(0), 0.0)
    expected_grad[np.isnan(expected)] = np.nan
    assert np.isnan(expected).any() and not np.isnan(expected).all()
    values = {"pmap": s2s.pmap(extremum, "i")(X_NAN),
              "python": s2s.jit(s2s.pmap(extremum, "i"), backend="python")(X_NAN),
              "vmap": s2s.vmap(extremum, axis_name="i")(X_NAN)}
    grads = {"pmap": s2s.pmap(s2s.grad(loss), "i")(X_NAN, weights),
             "python": s2s.jit(s2s.pmap(s2s.grad(loss), "i"), backend="python")(X_NAN, weights),
             "vmap": s2s.vmap(s2s.grad(loss), axis_name="i")(X_NAN, weights),
             "grad of pmap": s2s.jit(s2s.grad(lambda v, w: np.sum(s2s.pmap(loss, "i")(v, w))))(X_NAN, weights)}
    for backend, value in values.items():
        np.testing.assert_array_equal(value, expected, err_msg=backend)
    for backend, grad in grads.items():
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, err_msg=backend)


def grouped_gather_loss(x):
    groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    return np.sum(lax.all_gather(x, "i", axis_index_groups=groups) * W[:2]) + np.sum(
        np.sin(lax.psum(x, "i", axis_index_groups=PMAP_GROUPS[0])) ** 2)


@on_devices
def test_grad_through_grouped_collectives_against_jax_pmap():
    import jax
    if jax.device_count() < N:
        pytest.skip("jax sees fewer CPU devices")
    from tests.test_lax import as_jax
    ours = s2s.pmap(s2s.grad(grouped_gather_loss), "i")(X)
    theirs = np.asarray(jax.pmap(jax.grad(as_jax(grouped_gather_loss)), "i")(X))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


RING = [(i, (i + 1) % N) for i in range(N)]


def test_ppermute_psum_scatter_all_to_all_lower_to_xla_collectives():
    x = np.ones((N, 8, 3))
    permuted = s2s.pmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 0)]), "i").lower(x).as_text()
    assert '"stablehlo.collective_permute"' in permuted and "source_target_pairs = dense<[[0, 1], [1, 0]]>" in permuted
    scattered = s2s.pmap(lambda v: lax.psum_scatter(v, "i"), "i").lower(x).as_text()
    assert '"stablehlo.reduce_scatter"' in scattered and "scatter_dimension = 0" in scattered
    exchanged = s2s.pmap(lambda v: lax.all_to_all(v, "i", 0, 1), "i").lower(x).as_text()
    assert '"stablehlo.all_to_all"' in exchanged and "split_count = 8" in exchanged
    assert "collective-permute" in s2s.pmap(lambda v: lax.ppermute(v, "i", RING), "i").lower(x).as_hlo_text()


@on_devices
@pytest.mark.parametrize("perm", [RING, [(0, 3), (5, 1), (7, 7)], []], ids=str)
def test_ppermute_against_numpy(perm):
    from tests.test_lax_collectives import numpy_ppermute
    np.testing.assert_array_equal(s2s.pmap(lambda v: lax.ppermute(v, "i", perm), "i")(X), numpy_ppermute(X, perm))


Y = np.random.default_rng(5).normal(size=(N, 8, 16))


@on_devices
@pytest.mark.parametrize("split, concat, tiled", [(0, 1, False), (1, 0, True), (0, 0, False), (1, 1, True)])
def test_psum_scatter_and_all_to_all_against_numpy(split, concat, tiled):
    from tests.test_lax_collectives import numpy_all_to_all, numpy_psum_scatter
    out = s2s.pmap(lambda v: lax.psum_scatter(v, "i", scatter_dimension=split, tiled=tiled), "i")(Y)
    np.testing.assert_allclose(out, numpy_psum_scatter(Y, split, tiled), rtol=1e-12)
    out = s2s.pmap(lambda v: lax.all_to_all(v, "i", split, concat, tiled=tiled), "i")(Y)
    np.testing.assert_array_equal(out, numpy_all_to_all(Y, split, concat, tiled))


@on_devices
@pytest.mark.parametrize("names", [("i", "j"), ("j", "i")], ids="".join)
def test_exchanges_over_both_names_of_nested_pmaps_against_numpy(names):
    """Over a tuple of names the replicas are numbered as axis_index numbers them, the first
    name major: the same exchange as over one axis of the 8 examples in that order."""
    from tests.test_lax_collectives import numpy_all_to_all, numpy_ppermute, numpy_psum_scatter
    y = Y.reshape(2, 4, 8, 16)                                  # (i, j, ...)
    in_order = y if names == ("i", "j") else np.swapaxes(y, 0, 1)
    cases = [(lambda v: lax.ppermute(v, names, RING[2:]), lambda g: numpy_ppermute(g, RING[2:])),
             (lambda v: lax.psum_scatter(v, names, scatter_dimension=1, tiled=True),
              lambda g: numpy_psum_scatter(g, 1, True)),
             (lambda v: lax.all_to_all(v, names, 0, 1), lambda g: numpy_all_to_all(g, 0, 1, False))]
    for exchange, expected in cases:
        want = expected(in_order.reshape((N,) + y.shape[2:]))
        want = want.reshape(in_order.shape[:2] + want.shape[1:])
        out = s2s.pmap(s2s.pmap(exchange, "j"), "i")(y)
        np.testing.assert_allclose(out, want if names == ("i", "j") else np.swapaxes(want, 0, 1), rtol=1e-12)


@on_devices
@pytest.mark.parametrize("groups", PMAP_GROUPS[:2], ids=str)
@pytest.mark.parametrize("split, concat, tiled", [(0, 1, False), (1, 0, True)])
def test_grouped_psum_scatter_and_all_to_all_against_numpy(groups, split, concat, tiled):
    from tests.test_lax_collectives import numpy_all_to_all, numpy_psum_scatter, within_groups
    k = len(groups[0])
    y = Y[:, :k] if not tiled else Y
    out = s2s.pmap(lambda v: lax.psum_scatter(v, "i", scatter_dimension=split, axis_index_groups=groups,
                                              tiled=tiled), "i")(y)
    np.testing.assert_allclose(out, within_groups(y, groups, lambda g: numpy_psum_scatter(g, split, tiled)),
                               rtol=1e-12)
    out = s2s.pmap(lambda v: lax.all_to_all(v, "i", split, concat, axis_index_groups=groups, tiled=tiled), "i")(y)
    np.testing.assert_array_equal(out, within_groups(y, groups, lambda g: numpy_all_to_all(g, split, concat, tiled)))


def grouped_exchange_loss(x):
    groups = PMAP_GROUPS[1]
    scattered = lax.psum_scatter(x, "i", scatter_dimension=1, axis_index_groups=groups, tiled=True)
    exchanged = lax.all_to_all(x, "i", 1, 0, axis_index_groups=groups, tiled=True)
    return np.sum(np.sin(scattered) * W[0, :, :1]) + np.sum(np.cos(exchanged) ** 2)


@on_devices
def test_grad_through_grouped_psum_scatter_and_all_to_all_against_jax_pmap():
    import jax
    if jax.device_count() < N:
        pytest.skip("jax sees fewer CPU devices")
    from tests.test_lax import as_jax
    x = np.random.default_rng(7).normal(size=(N, 5, 2))
    ours = s2s.pmap(s2s.grad(grouped_exchange_loss), "i")(x)
    theirs = np.asarray(jax.pmap(jax.grad(as_jax(grouped_exchange_loss)), "i")(x))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def rotated_loss(x):
    return np.sum(np.sin(lax.ppermute(x, "i", RING)) * W)


def partly_sent_loss(x):
    return np.sum(np.sin(lax.ppermute(x, "i", [(0, 3), (5, 1), (7, 7)])) * W)


def scattered_loss(x):
    return np.sum(np.cos(lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True)) * np.arange(3.0))


def exchanged_loss(x):
    return np.sum(np.sin(lax.all_to_all(x, "i", 1, 1, tiled=True)) ** 2)


@on_devices
@pytest.mark.parametrize("loss", [rotated_loss, partly_sent_loss, scattered_loss, exchanged_loss],
                         ids=lambda f: f.__name__)
def test_grad_through_ppermute_psum_scatter_all_to_all_against_jax_pmap(loss):
    import jax
    if jax.device_count() < N:
        pytest.skip("jax sees fewer CPU devices")
    from tests.test_lax import as_jax
    x = X if loss in (rotated_loss, partly_sent_loss) else np.random.default_rng(6).normal(size=(N, 5, 24))
    ours = s2s.pmap(s2s.grad(loss), "i")(x)
    theirs = np.asarray(jax.pmap(jax.grad(as_jax(loss)), "i")(x))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@on_devices
def test_in_axes_none_and_1_and_out_axes():
    w = np.arange(3.0)
    xt = np.moveaxis(X, 0, 1)   # the device axis at 1
    out = s2s.pmap(lambda w, x: x @ w + lax.psum(x, "i").sum(), "i", in_axes=(None, 1))(w, xt)
    np.testing.assert_allclose(out, X @ w + X.sum())
    out1 = s2s.pmap(lambda x: x * 2.0, in_axes=0, out_axes=1)(X)
    np.testing.assert_allclose(out1, np.moveaxis(X * 2.0, 0, 1))
    tree = {"w": w, "x": xt}
    out = s2s.pmap(lambda t: t["x"] @ t["w"], in_axes=({"w": None, "x": 1},))(tree)
    np.testing.assert_allclose(out, X @ w)
    with pytest.raises(StagingError, match="is not a tree prefix of `t`"):
        s2s.pmap(lambda t: t["x"], in_axes=([None, 1],))(tree)
    replicated = s2s.pmap(total, "i", out_axes=None)(X)
    np.testing.assert_allclose(replicated, X.sum(0))


@on_devices
def test_pytrees_keywords_and_static_arguments():
    def step(params, x, scale, *, shift):
        return {"y": (x @ params["W"] + params["b"]) * scale + shift, "n": lax.psum(x.shape[0] * 1.0, "i")}
    params = {"W": np.ones((3, 2)), "b": np.arange(2.0)}
    shift = np.arange(N * 1.0)   # by keyword: mapped along axis 0, as jax.pmap maps it
    out = s2s.pmap(step, "i", in_axes=(None, 0, None), static_broadcasted_argnums=2)(params, X, 3, shift=shift)
    np.testing.assert_allclose(out["y"], (X @ params["W"] + params["b"]) * 3 + shift[:, None, None])
    np.testing.assert_allclose(out["n"], np.full(N, 5.0 * N))
    with pytest.raises(StagingError, match="`shift` has size 4"):
        s2s.pmap(step, "i", in_axes=(None, 0, None), static_broadcasted_argnums=2)(params, X, 3, shift=shift[:4])


@on_devices
def test_fewer_devices_and_size_mismatches_name_the_argument():
    four = s2s.pmap(total, "i")(X[:4])   # as jax: the first 4 devices
    np.testing.assert_allclose(four, np.broadcast_to(X[:4].sum(0), X[:4].shape))
    with pytest.raises(StagingError, match="`x` has size 9, but 8 device"):
        s2s.pmap(total, "i")(np.ones((9, 2)))
    with pytest.raises(StagingError, match="`x` has size 8, but 2 device"):
        s2s.pmap(total, "i", devices=s2s.devices()[:2])(X)
    with pytest.raises(StagingError, match="`a` has size 8, `b` has size 4"):
        s2s.pmap(lambda a, b: a + b)(np.ones((8, 2)), np.ones((4, 2)))


@on_devices
def test_devices_choose_where_it_runs():
    last_two = s2s.devices()[6:]
    np.testing.assert_allclose(s2s.pmap(total, "i", devices=last_two)(X[:2]),
                               np.broadcast_to(X[:2].sum(0), X[:2].shape))


@on_devices
def test_compiled_once_per_kind_of_arguments(monkeypatch):
    pmap_module = sys.modules["s2s.pmap"]   # (s2s.pmap is the function)
    made = []

    class Counting(pmap_module.ReplicatedExecutable):
        def __init__(self, *args):
            made.append(self)
            super().__init__(*args)
    monkeypatch.setattr(pmap_module, "ReplicatedExecutable", Counting)

    def doubled_total(x):
        return 2.0 * lax.psum(x, "i")
    f = s2s.pmap(doubled_total, "i")
    for _ in range(3):
        np.testing.assert_allclose(f(X), np.broadcast_to(2 * X.sum(0), X.shape))
    assert len(made) == 1
    f(X[:, :2])
    assert len(made) == 2
    # A new function with the same code stages again, and lowers to the same module: the
    # executable is served from the runtime's cache, not compiled again.
    again = types.FunctionType(doubled_total.__code__, doubled_total.__globals__, "doubled_total")
    np.testing.assert_allclose(s2s.pmap(again, "i")(X), np.broadcast_to(2 * X.sum(0), X.shape))
    assert len(made) == 3 and made[2].cache_hit and made[2]._exe is made[0]._exe


@on_devices
def test_vmap_inside_pmap_peels_each_name():
    def centered_then_total(x):   # x: (5, 3) on each device; vmap over its 5 rows
        rows = s2s.vmap(lambda r: r - lax.pmean(r, "j"), axis_name="j")(x)
        return rows + lax.psum(x, "i")
    out = s2s.pmap(centered_then_total, "i")(X)
    np.testing.assert_allclose(out, X - X.mean(1, keepdims=True) + X.sum(0))


@on_devices
def test_collectives_inside_scan_and_cond():
    def scanned(x):
        def body(c, _):
            return c + lax.psum(c, "i") * 0.1, lax.pmax(c, "i")
        return lax.scan(body, x, None, length=3)
    c, ys = s2s.pmap(scanned, "i")(X)
    expected, maxima = X.copy(), []
    for _ in range(3):
        maxima.append(expected.max(0))
        expected = expected + expected.sum(0) * 0.1
    np.testing.assert_allclose(c, expected, rtol=1e-12)
    np.testing.assert_allclose(ys, np.broadcast_to(np.stack(maxima), (N,) + np.stack(maxima).shape))

    def branch(x):
        return lax.cond(lax.axis_index("i") % 2 == 0, lambda v: lax.psum(v, "i"), lambda v: 2.0 * lax.psum(v, "i"), x)
    np.testing.assert_allclose(s2s.pmap(branch, "i")(X),
                               X.sum(0) * np.where(np.arange(N) % 2 == 0, 1.0, 2.0)[:, None, None])


W = np.arange(N * 5 * 3.0).reshape(N, 5, 3)


def gathered_loss(x):
    return np.sum(lax.all_gather(x, "i") * W)


def psum_loss(x):
    return np.sum(np.sin(lax.psum(x, "i")) ** 2)


@on_devices
@pytest.mark.parametrize("loss", [gathered_loss, psum_loss])
def test_grad_through_collectives_against_jax_pmap(loss):
    import jax
    if jax.device_count() < N:
        pytest.skip("jax sees fewer CPU devices")
    from tests.test_lax import as_jax
    ours = s2s.pmap(s2s.grad(loss), "i")(X)
    theirs = np.asarray(jax.pmap(jax.grad(as_jax(loss)), "i")(X))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def mlp_loss(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    return np.mean((h @ params["W2"] + params["b2"] - y) ** 2)


def _mlp_problem(seed):
    """Parameters of a 6-16-2 MLP and a batch of 4 examples per device."""
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(6, 16)) * 0.3, "b1": np.zeros(16),
              "W2": rng.normal(size=(16, 2)) * 0.3, "b2": np.zeros(2)}
    return params, rng.normal(size=(N * 4, 6)), rng.normal(size=(N * 4, 2))


@on_devices
def test_data_parallel_gradient_equals_the_full_batch_gradient():
    params, x, y = _mlp_problem(1)

    def device_grads(params, x, y):
        return lax.pmean(s2s.grad(mlp_loss)(params, x, y), "batch")
    grads = s2s.pmap(device_grads, "batch", in_axes=(None, 0, 0))(params, x.reshape(N, 4, 6), y.reshape(N, 4, 2))
    full = s2s.grad(mlp_loss)(params, x, y)
    for name in params:
        assert grads[name].dtype == np.float64
        for device in range(N):
            np.testing.assert_allclose(grads[name][device], full[name], rtol=1e-12, atol=1e-14)


@on_devices
def test_data_parallel_training_equals_single_device_training():
    params, x, y = _mlp_problem(2)

    def update(params, x, y):
        grads = s2s.grad(mlp_loss)(params, x, y)
        return {k: params[k] - 0.1 * grads[k] for k in params}

    def parallel_update(params, x, y):
        grads = lax.pmean(s2s.grad(mlp_loss)(params, x, y), "batch")
        return {k: params[k] - 0.1 * grads[k] for k in params}
    step = s2s.pmap(parallel_update, "batch", in_axes=(None, 0, 0), out_axes=None)
    single = s2s.jit(update)
    p_parallel, p_single = params, params
    for _ in range(10):
        p_parallel = step(p_parallel, x.reshape(N, 4, 6), y.reshape(N, 4, 2))
        p_single = single(p_single, x, y)
    for name in params:
        np.testing.assert_allclose(p_parallel[name], np.asarray(p_single[name]), rtol=1e-11, atol=1e-13)


NO_JAX_SCRIPT = BLOCK_JAX + textwrap.dedent("""
    import numpy as np
    import s2s
    from s2s import lax
    x = np.arange(16.0).reshape(8, 2)
    out = s2s.pmap(lambda v: lax.psum(v, "i") + lax.all_gather(v, "i").sum(0) * lax.axis_index("i"), "i")(x)
    assert np.allclose(out, x.sum(0) * (1 + np.arange(8))[:, None]), out
    import copy   # a copy's parts typed by s2s: jaxlib's have no aval without jax
    assert np.array_equal(copy.deepcopy({"out": out})["out"], out)
    nested = s2s.jit(s2s.grad(lambda x: s2s.pmap(s2s.pmap(lambda v: lax.psum(v * v, ("i", "j")), "j"), "i")(
        x.reshape(2, 4, 2)).sum()))(x)
    assert np.allclose(nested, 16.0 * x), nested
    assert "jax" not in sys.modules
    print("ok no jax")
""")


@on_devices
def test_pmap_runs_without_jax(tmp_path):
    script = tmp_path / "no_jax_pmap.py"   # a file: s2s reads the lambda's source
    script.write_text(NO_JAX_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=_child_env(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok no jax" in result.stdout


# ---------------------------------------------------------------------------------------
# Results stay on the devices


@on_devices
def test_a_result_feeds_the_next_pmap_without_a_host_round_trip(monkeypatch):
    """pmap's results are s2s.Arrays with one part per device; a pmap over the same devices
    mapping the same axis takes those parts as they are: nothing is put on a device again."""
    from s2s_runtime import replicated
    scaled = s2s.pmap(lambda v: v * 2.0 + lax.axis_index("i"), "i")
    first = scaled(X)
    assert isinstance(first, s2s.Array) and first.shape == X.shape
    puts = []
    put = replicated.xla_client.batched_device_put
    monkeypatch.setattr(replicated.xla_client, "batched_device_put", lambda *a, **k: puts.append(1) or put(*a, **k))
    second = s2s.pmap(lambda v: lax.psum(v, "i"), "i")(first)
    assert puts == []
    expected = (X * 2.0 + np.arange(N)[:, None, None]).sum(0)
    np.testing.assert_allclose(second, np.broadcast_to(expected, X.shape), rtol=1e-12)
    # mapped along another axis, or read by jit: its NumPy value, as for any array
    moved = s2s.pmap(lambda v: v.sum(), "i", in_axes=1)(np.asarray(first).transpose(1, 0, 2)[:, :, :])
    np.testing.assert_allclose(moved, np.asarray(first).sum(axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(lambda v: v.sum())(first), np.asarray(first).sum(), rtol=1e-12)


@on_devices
def test_out_axes_none_gives_one_array_and_out_axes_1_stacks_there():
    replicated_sum = s2s.pmap(lambda v: lax.psum(v, "i"), "i", out_axes=None)(X)
    assert isinstance(replicated_sum, s2s.Array) and replicated_sum.shape == X.shape[1:]
    np.testing.assert_allclose(replicated_sum, X.sum(0), rtol=1e-12)
    stacked = s2s.pmap(lambda v: v + 1.0, "i", out_axes=1)(X)
    assert stacked.shape == (5, N, 3)
    np.testing.assert_allclose(stacked, np.moveaxis(X, 0, 1) + 1.0)


# ---------------------------------------------------------------------------------------
# Emitted Python: the semantics written down


def gathered_and_ranked(x):
    return lax.psum(x, "i") - lax.pmax(x, "i") + lax.all_gather(x, "i").sum(0) * lax.axis_index("i")


def test_emitted_python_of_a_pmap_is_its_vmapped_reference():
    """No devices needed: the emitted module computes the pmap on NumPy, its collectives
    reductions over the batch axis."""
    from s2s.emit.python import load_source
    source = s2s.emit_python(s2s.pmap(gathered_and_ranked, "i"), X)
    assert "def pmap_gathered_and_ranked(" in source and "import numpy as np" in source, source
    module = load_source(source, "emitted")
    emitted = getattr(module, module.__all__[0])
    expected = X.sum(0) - X.max(0) + X.sum(0) * np.arange(N)[:, None, None]
    np.testing.assert_allclose(emitted(X), expected, rtol=1e-12)
    if IN_CHILD:    # and the compiled pmap computes the same
        np.testing.assert_allclose(s2s.pmap(gathered_and_ranked, "i")(X), emitted(X), rtol=1e-12)


@on_devices
def test_donated_parameters_hold_the_results():
    """A training step donating its parameters: the module aliases them with the results,
    the step computes what it does without donation, and the donated array is used up."""
    step = s2s.pmap(lambda w, x: w - 0.1 * lax.pmean(x * w, "i"), "i", donate_argnums=0)
    w = s2s.pmap(lambda v: v * 1.0, "i")(np.ones((N, 5, 3)))
    assert "tf.aliasing_output = 0" in step.lower(np.ones((N, 5, 3)), X).as_text()
    expected = np.ones((N, 5, 3)) - 0.1 * X.mean(0)
    new_w = step(w, X)
    np.testing.assert_allclose(new_w, expected, rtol=1e-12)
    with pytest.raises(s2s.DonatedBufferError):
        np.asarray(w)
    np.testing.assert_allclose(step(new_w, X), expected - 0.1 * (X * expected).mean(0), rtol=1e-12)


@on_devices
def test_a_copy_of_a_pmap_result_owns_its_parts():
    """A copy of a pmap's result shared its parts, which a donation of the original used
    up. Each part of a copy is a buffer of its own on its device; pickled, a result is its
    NumPy value."""
    import copy
    import pickle
    w = s2s.pmap(lambda v: v * 2.0, "i")(X)
    copies = copy.copy(w), copy.deepcopy({"w": w})["w"]
    s2s.pmap(lambda v: v + 1.0, "i", donate_argnums=0)(w)
    for copied in copies:
        assert type(copied) is type(w) and copied.shape == X.shape
        np.testing.assert_array_equal(np.asarray(copied), 2 * X)
        np.testing.assert_array_equal(s2s.pmap(lambda v: v - 1.0, "i")(copied), 2 * X - 1)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(copies[0])), 2 * X)


# ---------------------------------------------------------------------------------------
# A pmap inside other transforms (jit, grad, vmap, another pmap): one `pmap` equation
# (s2s/primitives/pmapped.py). The functions below name `pmap`, `vmap`, `np` and `lax`
# as globals, so `_as_jax` runs the same source as jax's oracle.


pmap, vmap = s2s.pmap, s2s.vmap
GRID = np.random.default_rng(1).normal(size=(2, 4, 3))   # nested: 2 x 4 of the 8 devices


def _as_jax(fn, pmap_as_named_vmap=False):
    """`fn` run by jax. jax 0.10's pmap does not nest (each is a shard_map over a mesh of
    its own axis), so nested pmaps are checked against what they mean: jax's vmaps with
    the same axis names (`pmap_as_named_vmap`)."""
    import jax
    def named_vmap(f, axis_name):
        return jax.vmap(f, axis_name=axis_name)
    namespace = {**fn.__globals__, "np": jax.numpy, "lax": jax.lax, "vmap": jax.vmap,
                 "pmap": named_vmap if pmap_as_named_vmap else jax.pmap}
    namespace["nested_collectives"] = types.FunctionType(nested_collectives.__code__, namespace, "nested_collectives")
    return types.FunctionType(fn.__code__, namespace, fn.__name__)


def _jax_with_devices():
    import jax
    if jax.device_count() < N:
        pytest.skip("jax sees fewer CPU devices")
    return jax


def scaled_total(x):
    return pmap(lambda v: lax.psum(v, "i") * v, "i")(x) * 2.0


def squared_gathered(x):
    return np.sum(pmap(lambda v: np.sin(lax.all_gather(v, "i")).sum(0) * v, "i")(x) ** 2)


def replicated_weights_loss(w, x):
    return np.sum(pmap(lambda w, v: lax.pmean(np.tanh(v @ w), "i"), "i", in_axes=(None, 0))(w, x) ** 2)


def vmapped_over_rows(x):   # x: (8, 5, 3), the vmap over its axis 1
    return vmap(pmap(lambda v: lax.psum(v, "i") * lax.axis_index("i") + v, "i"), in_axes=1)(x)


def nested_collectives(x):   # x: (2, 4, 3) over axes "i" (2) and "j" (4)
    def inner(v):
        ranks = (lax.axis_index("i") * 1000.0 + lax.axis_index("j") * 100.0
                 + lax.axis_index(("i", "j")) * 10.0)
        return (lax.psum(v, "i") + lax.psum(v, "j") * 2.0 + lax.psum(v, ("i", "j")) * 3.0 + ranks,
                lax.all_gather(v, "i"), lax.all_gather(v, "j"))
    return pmap(pmap(inner, "j"), "i")(x)


def nested_loss(x):
    y, gi, gj = nested_collectives(x)
    return np.sum(np.sin(y) * x) + np.sum(gi ** 2) + np.sum(gj * x[:, :, None])


def test_a_pmap_inside_jit_is_one_equation_lowered_to_one_replicated_module():
    assert str(s2s.make_jaxpr(scaled_total)(X)).count("pmap[") == 1
    text = s2s.jit(scaled_total).lower(X).as_text()
    assert "mhlo.num_replicas = 8" in text
    assert "func.func public @main(%x: tensor<8x5x3xf64>)" in text   # every replica has the whole batch
    assert "stablehlo.dynamic_slice" in text and '"stablehlo.all_gather"' in text   # in: its share; out: all


def test_nested_pmaps_lower_replica_groups_per_axis_name():
    """Replica r is (i, j) = divmod(r, 4): a collective over "i" combines the replicas with
    the same j, over "j" those with the same i, over both all of them."""
    text = pmap(pmap(lambda v: (lax.psum(v, "i"), lax.psum(v, "j"), lax.psum(v, ("i", "j"))), "j"),
                "i").lower(GRID).as_text()
    assert "mhlo.num_replicas = 8" in text
    assert "replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>" in text
    assert "replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>" in text
    assert "replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>" in text


def test_pmaps_one_after_another_share_the_replicas_of_the_biggest():
    def two(x):
        return pmap(total, "i")(x), pmap(lambda v: lax.psum(v, "k"), "k")(x[:4])
    text = s2s.jit(two).lower(X).as_text()
    assert "mhlo.num_replicas = 8" in text
    assert "replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]>" in text   # "k": the rest is minor
    with pytest.raises(s2s.errors.UnsupportedFunctionError, match="cannot share"):
        s2s.jit(lambda x: (pmap(total, "i")(x), pmap(lambda v: v * 2.0, "k")(x[:3]))).lower(X)


def test_grad_and_vmap_of_a_pmap_without_devices_compute_its_vmapped_reference():
    """On NumPy values (no devices), grad and vmap run the emitted Python, which writes the
    pmap as its reference: the body vmapped over the axis."""
    def with_vmap(x):
        return np.sum(vmap(lambda v: np.sin(lax.all_gather(v, "i")).sum(0) * v, axis_name="i")(x) ** 2)
    np.testing.assert_allclose(s2s.grad(squared_gathered)(X), s2s.grad(with_vmap)(X), rtol=1e-12)
    expected = np.moveaxis(X.sum(0) * np.arange(N)[:, None, None] + X, 1, 0)
    np.testing.assert_allclose(vmapped_over_rows(X), expected, rtol=1e-12)
    from s2s.core import eval_jaxpr   # the reference interpreter runs the pmap equation's NumPy impl
    (interpreted,) = eval_jaxpr(s2s.make_jaxpr(scaled_total)(X), X)
    np.testing.assert_allclose(interpreted, 2.0 * X.sum(0) * X, rtol=1e-12)
    assert "# pmap over axis 'i' (8 devices)" in s2s.emit_python(s2s.grad(squared_gathered), X)


def test_out_axes_tree_prefix_errors_name_it():
    pair = lambda v: {"a": v, "b": (v, v)}   # noqa: E731
    with pytest.raises(StagingError, match=r"out_axes \{'a': 0\} is not a tree prefix of the results of pmap"):
        pmap(pair, "i", out_axes={"a": 0}).lower(X)
    with pytest.raises(StagingError, match="out_axes must hold ints and None"):
        pmap(pair, "i", out_axes={"a": "first"})
    for out_axes in (3, -4):   # X's slices are rank 2: with the device axis, axes -3 to 2
        with pytest.raises(StagingError, match=f"out_axes {out_axes} is out of range for a result of rank 2"):
            pmap(lambda v: v * 2, "i", out_axes=out_axes).lower(X)
        with pytest.raises(StagingError, match="out of range"):
            s2s.make_jaxpr(lambda x: pmap(lambda v: v * 2, "i", out_axes=out_axes)(x))(X)
    assert "tensor<5x3xf64>" in pmap(lambda v: v * 2, "i", out_axes=-3).lower(X).as_text()


@on_devices
def test_jit_of_pmap_equals_the_pmap_and_pmap_of_jit_still_runs():
    expected = 2.0 * X.sum(0) * X
    np.testing.assert_allclose(s2s.jit(scaled_total)(X), expected, rtol=1e-12)
    np.testing.assert_allclose(pmap(s2s.jit(lambda v: lax.psum(v, "i") * v), "i")(X) * 2.0, expected, rtol=1e-12)
    with pytest.warns(UserWarning, match="none is donated"):
        np.testing.assert_allclose(s2s.jit(scaled_total, donate_argnums=0)(X.copy()), expected, rtol=1e-12)
    total_8, total_4 = s2s.jit(lambda x: (pmap(total, "i")(x), pmap(lambda v: lax.psum(v, "k"), "k")(x[:4])))(X)
    np.testing.assert_allclose(total_8, np.broadcast_to(X.sum(0), X.shape), rtol=1e-12)
    np.testing.assert_allclose(total_4, np.broadcast_to(X[:4].sum(0), X[:4].shape), rtol=1e-12)


@on_devices
@pytest.mark.parametrize("loss", [squared_gathered, replicated_weights_loss], ids=lambda f: f.__name__)
def test_grad_of_a_function_calling_pmap_against_jax(loss):
    jax = _jax_with_devices()
    args = (X,) if loss is squared_gathered else (np.random.default_rng(2).normal(size=(3, 4)), X)
    argnums = tuple(range(len(args)))
    theirs = jax.grad(_as_jax(loss), argnums)(*args)
    for ours in (s2s.jit(s2s.grad(loss, argnums))(*args), s2s.grad(loss, argnums)(*args)):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-10, atol=1e-12)
    value, tangent = s2s.jit(lambda *a: s2s.jvp(loss, a, tuple(np.ones_like(x) for x in a)))(*args)
    their_value, their_tangent = jax.jvp(_as_jax(loss), args, tuple(np.ones_like(x) for x in args))
    np.testing.assert_allclose(tangent, their_tangent, rtol=1e-10)


@on_devices
def test_vmap_of_pmap_against_jax():
    jax = _jax_with_devices()
    theirs = np.asarray(_as_jax(vmapped_over_rows)(X))
    np.testing.assert_allclose(s2s.jit(vmapped_over_rows)(X), theirs, rtol=1e-12)
    grad_theirs = jax.grad(lambda x: jax.numpy.sum(_as_jax(vmapped_over_rows)(x) ** 2))(X)
    np.testing.assert_allclose(s2s.jit(s2s.grad(lambda x: np.sum(vmapped_over_rows(x) ** 2)))(X),
                               grad_theirs, rtol=1e-10)


@on_devices
def test_nested_pmap_collectives_over_each_name_and_both_against_jax():
    theirs = [np.asarray(t) for t in _as_jax(nested_collectives, pmap_as_named_vmap=True)(GRID)]
    i, j = np.arange(2)[:, None, None], np.arange(4)[None, :, None]
    np.testing.assert_allclose(theirs[0], GRID.sum(0) + 2.0 * GRID.sum(1, keepdims=True) + 3.0 * GRID.sum((0, 1))
                               + i * 1000.0 + j * 100.0 + (i * 4 + j) * 10.0, rtol=1e-12)
    for ours in (nested_collectives(GRID), s2s.jit(nested_collectives)(GRID)):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    # jax's vmap gathers over one name at a time; over both, every device gets all of them
    everything = pmap(pmap(lambda v: lax.all_gather(v, ("i", "j")), "j"), "i")(GRID)
    np.testing.assert_allclose(everything, np.broadcast_to(GRID.reshape(8, 3), (2, 4, 8, 3)))


@on_devices
def test_grad_of_nested_pmaps_against_jax():
    import jax
    theirs = jax.grad(_as_jax(nested_loss, pmap_as_named_vmap=True))(GRID)
    np.testing.assert_allclose(s2s.jit(s2s.grad(nested_loss))(GRID), theirs, rtol=1e-10)
    np.testing.assert_allclose(s2s.grad(nested_loss)(GRID), theirs, rtol=1e-10)   # its emitted Python


@on_devices
def test_out_axes_tree_prefix_of_the_results():
    def parts(v):
        return {"summed": lax.psum(v, "i"), "own": (v * 2.0, v + 1.0)}
    out = pmap(parts, "i", out_axes={"summed": None, "own": (0, 1)})(X)
    np.testing.assert_allclose(out["summed"], X.sum(0), rtol=1e-12)
    np.testing.assert_allclose(out["own"][0], X * 2.0)
    np.testing.assert_allclose(out["own"][1], np.moveaxis(X + 1.0, 0, 1))
    inside = s2s.jit(lambda x: pmap(parts, "i", out_axes={"summed": None, "own": (0, 1)})(x))(X)
    assert s2s.tree_flatten(inside)[1] == s2s.tree_flatten(out)[1]
    for a, b in zip(s2s.tree_flatten(inside)[0], s2s.tree_flatten(out)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def summed_squares_replicated(x):   # out_axes None: the result is device 0's
    return np.sum(np.sin(pmap(lambda v: lax.psum(v * v, "i"), "i", out_axes=None)(x)))


def rows_times_shared(w, x):   # w: (4, 3, 2) batched by the vmap, given whole to every device
    return vmap(pmap(lambda w, v: lax.psum(v @ w, "i"), "i", in_axes=(None, 0)), in_axes=(0, None))(w, x)


def exchanged_over_nested_names(x):   # x: (2, 4, 8, 3)
    def inner(v):
        return (lax.ppermute(v, "i", [(0, 1), (1, 0)]) + lax.all_to_all(v, "j", 0, 0, tiled=True)
                + lax.psum_scatter(v, "j", scatter_dimension=0, tiled=True).sum())
    return pmap(pmap(inner, "j"), "i")(x)


@on_devices
def test_grad_of_a_replicated_result_and_vmap_with_replicated_operands_against_jax():
    """A result with out_axes None is device 0's: its cotangent reaches device 0 only, as
    in jax; an operand every device reads whole gets the sum of their cotangents."""
    jax = _jax_with_devices()
    np.testing.assert_allclose(s2s.jit(s2s.grad(summed_squares_replicated))(X),
                               jax.grad(_as_jax(summed_squares_replicated))(X), rtol=1e-10)
    w = np.random.default_rng(3).normal(size=(4, 3, 2))
    np.testing.assert_allclose(s2s.jit(rows_times_shared)(w, X), _as_jax(rows_times_shared)(w, X), rtol=1e-12)
    loss = lambda w, x: np.sum(np.tanh(rows_times_shared(w, x)))   # noqa: E731
    their_loss = lambda w, x: jax.numpy.sum(jax.numpy.tanh(_as_jax(rows_times_shared)(w, x)))   # noqa: E731
    for ours, theirs in zip(s2s.jit(s2s.grad(loss, (0, 1)))(w, X), jax.grad(their_loss, (0, 1))(w, X)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@on_devices
def test_ppermute_all_to_all_psum_scatter_over_one_of_two_nested_names_against_jax():
    import jax
    x = np.random.default_rng(4).normal(size=(2, 4, 8, 3))
    theirs = _as_jax(exchanged_over_nested_names, pmap_as_named_vmap=True)
    np.testing.assert_allclose(s2s.jit(exchanged_over_nested_names)(x), theirs(x), rtol=1e-12)
    grad = s2s.jit(s2s.grad(lambda x: np.sum(np.sin(exchanged_over_nested_names(x)))))(x)
    np.testing.assert_allclose(grad, jax.grad(lambda x: jax.numpy.sum(jax.numpy.sin(theirs(x))))(x), rtol=1e-10)


def grouped_then_shifted(x):
    return pmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]]) * 2.0, "i")(x) + 1.0


def test_emitted_python_of_a_function_calling_a_pmap_writes_its_reference():
    """The index arrays a grouped collective's reference needs are written as literals;
    the module computes what the pmap does (and, in the child, what the jit runs)."""
    from s2s.emit.python import load_source
    source = s2s.emit_python(grouped_then_shifted, X)
    assert "# pmap over axis 'i' (8 devices)" in source and "np.array([0, 0, 0, 0, 1, 1, 1, 1]" in source
    module = load_source(source, "emitted")
    emitted = getattr(module, module.__all__[0])(X)
    halves = X.reshape(2, 4, 5, 3).sum(1, keepdims=True)
    np.testing.assert_allclose(emitted, np.broadcast_to(halves, (2, 4, 5, 3)).reshape(X.shape) * 2.0 + 1.0, rtol=1e-12)
    if IN_CHILD:
        np.testing.assert_allclose(s2s.jit(grouped_then_shifted)(X), emitted, rtol=1e-12)


@pytest.mark.skipif(IN_CHILD, reason="needs a process with fewer devices than the pmap")
def test_a_jit_whose_pmaps_need_more_devices_than_there_are_says_so():
    with pytest.raises(StagingError, match="need 8 devices together, but 1 are available"):
        s2s.jit(scaled_total)(X)


@on_devices
@settings(max_examples=12, deadline=None)
@given(x_axis=st.sampled_from([0, 1, 2, -1]), w_axis=st.sampled_from([None, 0, 1]), out_axis=st.sampled_from([0, 1, -1]),
       vmap_axis=st.sampled_from([None, 0, 2]))
def test_jit_and_vmap_of_pmap_equal_the_reference_for_any_axes(x_axis, w_axis, out_axis, vmap_axis):
    """in_axes and out_axes anywhere, under jit and a vmap (over x's axis `vmap_axis`):
    the same as the vmapped reference, which is what the pmap means."""
    rng = np.random.default_rng([x_axis % 3, 0 if w_axis is None else w_axis + 1, out_axis % 3])
    x = np.moveaxis(rng.normal(size=(N, 6, 4)), 0, x_axis)
    w = rng.normal(size=(4,)) if w_axis is None else np.moveaxis(rng.normal(size=(N, 4)), 0, w_axis)
    def body(x, w):
        return {"scaled": x * w + lax.axis_index("i"), "total": lax.psum(x, "i")}
    axes = dict(in_axes=(x_axis, w_axis), out_axes={"scaled": out_axis, "total": None})
    pmapped, reference = pmap(body, "i", **axes), s2s.vmap(body, axis_name="i", **axes)
    if vmap_axis is not None:
        x = np.stack([x, x + 1.0, 2.0 * x], axis=vmap_axis)
        pmapped = s2s.vmap(pmapped, in_axes=(vmap_axis, None))
        reference = s2s.vmap(reference, in_axes=(vmap_axis, None))
    ours, expected = s2s.jit(pmapped)(x, w), reference(x, w)
    for key in ("scaled", "total"):
        np.testing.assert_allclose(ours[key], expected[key], rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Random draws: every device draws its own numbers from the seeds it is given on each call
# (the same for every device), the replica's index folded into the generator's state.

noise = np.random.RandomState(0)


def _independent(a, b) -> bool:
    """Two samples of one length look uncorrelated: |r| within 5 standard errors."""
    return abs(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1]) < 5 / np.sqrt(np.size(a))


def noisy(v):
    return v + noise.standard_normal(v.shape)


def noisy_and_summed(v):
    eps = noise.standard_normal(v.shape)
    return eps, lax.psum(eps, "i")


def test_a_pmap_that_draws_takes_the_seeds_and_folds_in_the_replica():
    text = pmap(noisy, "i").lower(X).as_text()
    assert "func.func public @main(%v: tensor<5x3xf64>, %random_state_state: tensor<2xui64>)" in text
    assert "stablehlo.replica_id" in text and "stablehlo.xor" in text
    inside_jit = s2s.jit(lambda x: (pmap(noisy, "i")(x), noise.standard_normal(3))).lower(X).as_text()
    assert "%random_state_state: tensor<2xui64>" in inside_jit and "stablehlo.xor" in inside_jit
    assert "stablehlo.xor" not in pmap(total, "i").lower(X).as_text()


def _check_devices_draw_apart(per_device):
    """Rows (one per device) pairwise independent, and all standard normal (KS at 0.1%)."""
    from scipy import stats
    rows = np.asarray(per_device).reshape(N, -1)
    assert len({row.tobytes() for row in rows}) == N
    assert all(_independent(a, b) for a, b in zip(rows[:-1], rows[1:]))
    assert stats.kstest(rows.ravel(), "norm").pvalue > 1e-3


@on_devices
def test_each_device_draws_its_own_samples_on_every_call():
    global noise
    zeros = np.zeros((N, 2000))
    noise = np.random.RandomState(5)
    first, second = np.asarray(pmap(noisy, "i")(zeros)), np.asarray(pmap(noisy, "i")(zeros))
    _check_devices_draw_apart(first)
    assert not np.array_equal(first, second)   # a fresh seed on every call
    noise = np.random.RandomState(5)
    np.testing.assert_array_equal(np.asarray(pmap(noisy, "i")(zeros)), first)   # reproducible from the generator


@on_devices
def test_a_pmap_that_draws_and_psums_is_right_in_distribution():
    """The psum of the devices' draws is their sum on every device (the draws each device
    returns are the ones it summed), and a sum of 8 independent standard normals: N(0, 8)."""
    from scipy import stats
    eps, summed = (np.asarray(v) for v in pmap(noisy_and_summed, "i")(np.zeros((N, 4000))))
    _check_devices_draw_apart(eps)
    np.testing.assert_allclose(summed, np.broadcast_to(eps.sum(0), summed.shape), rtol=1e-12, atol=1e-12)
    assert stats.kstest(summed[0] / np.sqrt(N), "norm").pvalue > 1e-3


@on_devices
def test_pmaps_inside_jit_and_nested_draw_apart_and_apart_from_the_code_around_them():
    """Inside jit, the code around the pmaps draws the same numbers on every replica: a
    draw after a pmap that draws, split over the devices by a second pmap, comes back whole."""
    def around(x):
        inside = pmap(noisy, "i")(x)
        outside = noise.standard_normal(x.shape)
        return inside, outside, pmap(lambda v: v * 1.0, "i")(outside), pmap(noisy, "i")(x)
    first, outside, shared, later = (np.asarray(v) for v in s2s.jit(around)(np.zeros((N, 2000))))
    np.testing.assert_array_equal(shared, outside)
    _check_devices_draw_apart(first)
    _check_devices_draw_apart(later)
    assert all(_independent(a, b) for a, b in zip(first, outside))
    assert all(_independent(a, b) for a, b in zip(first, later))
    nested = np.asarray(pmap(pmap(noisy, "j"), "i")(np.zeros((2, 4, 2000))))
    _check_devices_draw_apart(nested.reshape(N, -1))


@on_devices
def test_a_scan_that_draws_inside_a_pmap():
    def steps(v):
        return lax.scan(lambda c, _: (c, noise.standard_normal(v.shape)), 0.0, None, length=3)[1]
    draws = np.asarray(pmap(steps, "i")(np.zeros((N, 1000))))   # (device, step, sample)
    _check_devices_draw_apart(draws)
    rows = draws.reshape(N * 3, -1)
    assert len({row.tobytes() for row in rows}) == N * 3
