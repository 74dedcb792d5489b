"""The `remat` and `name` primitives (s2s/primitives/remat.py), rule by rule: abstract eval,
impl, jvp, partial evaluation by policy, transposition, batching, dead-code elimination,
StableHLO lowering and Python emission."""
import numpy as np
import pytest

import s2s
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, check_jaxpr
from s2s.emit.stablehlo import lower
from s2s.errors import ShapeError
from s2s.passes.dce import dce_jaxpr
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.primitives.remat import name_p, remat
from s2s.remat import nothing_saveable

cp = s2s.checkpoint_policies
x = np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3)
W = np.linspace(0.5, -0.5, 9).astype(np.float32).reshape(3, 3)


def block(h, W):
    return np.tanh(np.sin(h @ W) @ W)


def checkpointed_loss(policy=cp.nothing_saveable, prevent_cse=True):
    def loss(h, W):
        return s2s.checkpoint(block, policy=policy, prevent_cse=prevent_cse)(h, W).sum()
    return loss


loss = checkpointed_loss()


def plain_loss(h, W):
    return block(h, W).sum()


def _eqns(closed, primitive):
    """The equations of `primitive`, also inside bodies of control flow."""
    found = []
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive is primitive:
            found.append(eqn)
        for value in eqn.params.values():
            if isinstance(value, ClosedJaxpr):
                found += _eqns(value, primitive)
    return found


def test_staging_binds_one_remat_around_the_body():
    closed = s2s.make_jaxpr(loss)(x, W)
    (eqn,) = _eqns(closed, remat)
    assert eqn.params["policy"] is cp.nothing_saveable and eqn.params["prevent_cse"]
    assert not eqn.params["differentiated"]
    assert [e.primitive.name for e in eqn.params["jaxpr"].eqns] == ["dot_general", "sin", "dot_general", "tanh"]
    check_jaxpr(closed)


def test_abstract_eval_checks_the_operands_against_the_body():
    body = s2s.make_jaxpr(block)(x, W)
    assert remat.abstract_eval(*body.in_avals, jaxpr=body, policy=nothing_saveable, prevent_cse=True,
                               differentiated=False) == body.out_avals
    with pytest.raises(ShapeError, match="remat body takes"):
        remat.abstract_eval(ShapedArray((3,), np.float32), *body.in_avals[1:], jaxpr=body,
                            policy=nothing_saveable, prevent_cse=True, differentiated=False)


def test_impl_runs_the_body():
    body = s2s.make_jaxpr(block)(x, W)
    (out,) = remat.bind(x, W, jaxpr=body, policy=nothing_saveable, prevent_cse=True, differentiated=False)
    np.testing.assert_allclose(out, block(x, W), rtol=1e-6)


def test_outputs_that_are_inputs_or_literals_are_not_returned_by_the_remat():
    def passthrough(h, W):
        return h, block(h, W), 2.0
    closed = s2s.make_jaxpr(lambda h, W: s2s.checkpoint(passthrough)(h, W))(x, W)
    (eqn,) = _eqns(closed, remat)
    assert len(eqn.outvars) == 1
    h_bar = s2s.grad(lambda h, W: sum(np.sum(v) for v in s2s.checkpoint(passthrough)(h, W)))(x, W)
    np.testing.assert_allclose(h_bar, 1 + s2s.grad(plain_loss)(x, W), rtol=1e-6)


def test_jvp_is_a_remat_of_the_jvp_body():
    closed = s2s.make_jaxpr(lambda h, t: s2s.jvp(lambda h: loss(h, W), (h,), (t,)))(x, x)
    (eqn,) = _eqns(closed, remat)
    assert len(eqn.outvars) == 2 and not eqn.params["differentiated"]
    got = s2s.jvp(lambda h: loss(h, W), (x,), (x,))
    want = s2s.jvp(lambda h: plain_loss(h, W), (x,), (x,))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _linearized(policy):
    """Partial evaluation of the jvp of `loss` with the tangents unknown."""
    closed = s2s.make_jaxpr(checkpointed_loss(policy))(x, W)
    jvp_closed, _ = jvp_jaxpr(closed, [True, True])
    return partial_eval_jaxpr(jvp_closed, [False, False, True, True])


def _recomputed(split) -> list[str]:
    """What the backward remat computes from saved values alone (reading no tangent)."""
    (eqn,) = _eqns(split.unknown, remat)
    body = eqn.params["jaxpr"].jaxpr
    tangents = set(body.invars[len(body.invars) - 2:])
    recomputed = []
    for e in body.eqns:
        if any(v in tangents for v in e.invars):
            tangents.update(e.outvars)
        else:
            recomputed.append(e.primitive.name)
    return recomputed


def test_partial_eval_saves_what_the_policy_saves_and_the_unknown_half_recomputes_the_rest():
    nothing, everything, dots = (_linearized(p) for p in
                                 (cp.nothing_saveable, cp.everything_saveable, cp.dots_saveable))
    # The forward pass is written out, never a remat; the residuals are the inputs only ...
    assert not _eqns(nothing.known, remat)
    assert [v.aval.shape for v in nothing.known.jaxpr.outvars[1:]] == [(2, 3), (3, 3)]
    # ... and the backward remat recomputes the block from them.
    (backward,) = _eqns(nothing.unknown, remat)
    assert backward.params["differentiated"]
    recomputed = [e.primitive.name for e in backward.params["jaxpr"].eqns]
    assert recomputed.count("sin") == 1 and recomputed.count("tanh") == 1
    # Saving everything recomputes nothing; saving dots recomputes the rest.
    assert _recomputed(everything) == []
    assert set(_recomputed(dots)) == {"sin", "cos", "tanh", "mul", "sub"}   # not the dots
    assert nothing.num_residuals < dots.num_residuals < everything.num_residuals


def test_transpose_keeps_the_recomputation_in_one_backward_remat():
    closed = s2s.make_jaxpr(s2s.grad(loss, (0, 1)))(x, W)
    (eqn,) = _eqns(closed, remat)
    assert eqn.params["differentiated"]
    check_jaxpr(closed)
    got = s2s.grad(loss, (0, 1))(x, W)
    for g, want in zip(got, s2s.grad(plain_loss, (0, 1))(x, W)):
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_batching_is_a_remat_of_the_batched_body():
    xs = np.stack([x, 2 * x])
    closed = s2s.make_jaxpr(s2s.vmap(lambda h: s2s.checkpoint(block)(h, W)))(xs)
    (eqn,) = _eqns(closed, remat)
    assert eqn.outvars[0].aval.shape == (2, 2, 3)
    np.testing.assert_allclose(s2s.vmap(lambda h: s2s.checkpoint(block)(h, W))(xs),
                               np.stack([block(x, W), block(2 * x, W)]), rtol=1e-6)


def test_dead_code_elimination_prunes_the_body_and_its_operands():
    def two(h, W):
        return np.sin(h), np.cos(W)
    closed = s2s.make_jaxpr(lambda h, W: s2s.checkpoint(two)(h, W))(x, W)
    (eqn,) = _eqns(closed, remat)
    jaxpr = closed.jaxpr
    pruned = dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars[:1], jaxpr.eqns))
    (eqn,) = [e for e in pruned.eqns if e.primitive is remat]
    assert [e.primitive.name for e in eqn.params["jaxpr"].eqns] == ["sin"]
    assert len(eqn.invars) == 1 and len(eqn.outvars) == 1


def _hlo(fn, *args) -> str:
    return lower(s2s.make_jaxpr(fn)(*args))


def test_lowering_puts_a_barrier_before_the_backward_recomputation_only():
    assert "stablehlo.optimization_barrier" in _hlo(s2s.grad(loss), x, W)
    assert "stablehlo.optimization_barrier" not in _hlo(lambda h, W: loss(h, W), x, W)
    assert "stablehlo.optimization_barrier" not in _hlo(s2s.grad(checkpointed_loss(prevent_cse=False)), x, W)
    got = s2s.jit(s2s.grad(loss, (0, 1)))(x, W)
    for g, want in zip(got, s2s.grad(plain_loss, (0, 1))(x, W)):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-6)


def test_python_emission_inlines_the_body_and_comments_only_the_recomputation():
    forward = s2s.emit_python(loss, x, W)
    assert "recomputed" not in forward and "np.tanh(np.sin(h @ W) @ W)" in forward
    backward = s2s.emit_python(s2s.grad(loss), x, W, source_comments=False)
    assert "# recomputed (checkpoint, policy nothing_saveable): not saved by the forward pass" in backward
    assert "remat" not in backward.split("def grad_loss", 1)[1]


def test_name_is_the_identity_for_every_rule():
    def named(h):
        return np.sin(s2s.checkpoint_name(h * 2.0, "a")).sum()

    def unnamed(h):
        return np.sin(h * 2.0).sum()
    assert len(_eqns(s2s.make_jaxpr(named)(x), name_p)) == 1
    source = s2s.emit_python(s2s.grad(named), x, source_comments=False)
    assert "(h * 2.0)" in source and "name" not in source.split("def grad_named", 1)[1]
    np.testing.assert_allclose(s2s.grad(named)(x), s2s.grad(unnamed)(x), rtol=1e-6)
    np.testing.assert_allclose(s2s.jit(s2s.grad(named))(x), s2s.grad(unnamed)(x), rtol=1e-6)
    np.testing.assert_allclose(s2s.vmap(s2s.grad(named))(np.stack([x, x])), np.stack([s2s.grad(unnamed)(x)] * 2),
                               rtol=1e-6)
    (ct,) = s2s.linear_transpose(lambda h: s2s.checkpoint_name(h * 2.0, "a"), x)(x)
    np.testing.assert_allclose(ct, 2 * x)
    assert s2s.checkpoint_name(x, "a") is x     # on NumPy values: the value itself
