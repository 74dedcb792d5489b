"""s2s.test_util.check_grads: pytree arguments, and that it fails on wrong derivatives."""
import numpy as np
import pytest

import s2s
from s2s.test_util import check_grads


def mlp_loss(params, batch):
    hidden = np.tanh(batch["x"] @ params["w"] + params["b"])
    return np.sum((hidden - batch["y"]) ** 2) + np.sum(params["layers"][0] ** 2)


def pair_and_list(pair, values):
    a, b = pair
    return np.sin(a) * b + values[0] * values[1] ** 2, [np.exp(values[1])]


def random_params(seed=0):
    rng = np.random.default_rng(seed)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2),
              "layers": [rng.standard_normal(4)]}
    batch = {"x": rng.standard_normal((5, 3)), "y": rng.standard_normal((5, 2))}
    return params, batch


@pytest.mark.parametrize("modes", [("fwd",), ("rev",), ("fwd", "rev")])
def test_check_grads_takes_pytree_arguments(modes):
    """check_grads converted each argument with np.asarray, so a dict of parameters failed;
    every leaf of dicts, tuples and lists is now perturbed, to second order."""
    check_grads(mlp_loss, random_params(), order=2, modes=modes)
    check_grads(pair_and_list, ((np.array([0.3, -0.2]), 1.5), [np.array(0.7), np.array([0.1, 2.0])]),
                order=2, modes=modes)


@s2s.custom_vjp
def scaled_norm(params):
    return np.sum(params["w"] ** 2) * params["s"]


def scaled_norm_fwd(params):
    return scaled_norm(params), params


def scaled_norm_bwd_forgets_the_scale(params, g):
    """Wrong: d/dw is 2 w s, not 2 w."""
    return ({"w": 2 * params["w"] * g, "s": np.sum(params["w"] ** 2) * g},)


scaled_norm.defvjp(scaled_norm_fwd, scaled_norm_bwd_forgets_the_scale)


def test_check_grads_catches_a_wrong_custom_vjp_on_a_pytree_argument():
    params = {"w": np.array([0.5, -1.0, 2.0]), "s": np.array(3.0)}
    with pytest.raises(AssertionError, match="vjp vs central differences"):
        check_grads(scaled_norm, (params,), modes=("rev",))
    check_grads(scaled_norm, ({"w": params["w"], "s": np.array(1.0)},), modes=("rev",))


def test_check_grads_catches_a_wrong_second_derivative(monkeypatch):
    """Order 2 checks the derivative of the derivative: a wrong jvp of cos (sin's second
    derivative) passes order 1 and fails order 2."""
    from s2s.passes import jvp as jvp_pass
    from s2s.primitives import elementwise as ew
    x = (np.array([0.1, 0.2]),)
    check_grads(lambda v: np.sin(v).sum(), x, order=1)
    monkeypatch.setitem(jvp_pass.jvp_rules, ew.cos, lambda p, t: (ew.cos.bind(*p), t[0] * 2.0))
    check_grads(lambda v: np.sin(v).sum(), x, order=1)
    with pytest.raises(AssertionError):
        check_grads(lambda v: np.sin(v).sum(), x, order=2)


@s2s.custom_jvp
def doubled(z):
    return 2 * z


@doubled.defjvp
def doubled_jvp_conjugated(primals, tangents):
    """Wrong for complex z: the tangent of 2z is 2t, not 2 conj(t)."""
    (z,), (t,) = primals, tangents
    return doubled(z), 2 * np.conj(t)


def test_complex_arguments_stay_complex_and_are_perturbed_in_both_parts():
    """check_grads cast complex arguments to float64, dropping their imaginary parts (and
    its dot-product test conjugated): a port of autograd's tests had to write its own."""
    z = np.array([0.6 + 0.12j, -1.0 + 2.0j])
    check_grads(lambda v: np.exp(v) * np.conj(v), (z,), order=2)
    check_grads(lambda v: np.sum(np.abs(v) ** 2), (z,), order=2)
    check_grads(doubled, (np.array([0.5, -1.0]),))   # a real tangent: conj(t) == t
    for modes in (("fwd",), ("rev",)):
        with pytest.raises(AssertionError):
            check_grads(doubled, (z,), modes=modes)
