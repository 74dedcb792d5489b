"""Rematerialization: `remat` and `name`, and all their rules.

- `remat[jaxpr, policy, prevent_cse, differentiated](*operands)` computes its `jaxpr` (a
  body without constants: what it reads from outside is an operand). It is what
  `s2s.checkpoint` stages, and it changes nothing about the values, only about what
  reverse mode keeps: partial evaluation splits it by its `policy`, saving from the
  forward pass only the values the policy saves, and the backward pass recomputes the
  rest from them.
- `name[name](x)` is `x`, tagged for the policies that save values by name
  (`s2s.checkpoint_name`).

A policy is called JAX's way, `policy(primitive, *input_avals, **params) -> bool`, on each
equation of the body that the forward pass computes: True saves its results, False
recomputes them. The body's inputs are always at hand in the backward pass (they are
the remat's own operands), so a value is only ever recomputed from saved values.

Reverse mode of a remat, rule by rule:

- jvp: a remat of the jvp'd body, with the same policy.
- partial evaluation: the body is split with the policy as `recompute` (see
  `partial_eval_jaxpr`): the known half is written out in the forward pass as plain
  equations and returns, besides the known results, the residuals the policy saves; the
  unknown half is a remat (`differentiated=True`) whose body recomputes what was not
  saved and then runs the tangent equations.
- transposition: the body of such a remat mixes recomputation with linear equations, so
  it is split again (`recomputed_first`: what reads no linear input runs forward), the
  linear part is transposed, and the result is again one remat, so the backward pass
  keeps its recomputation apart.
- lowering: a differentiated remat with `prevent_cse` passes its operands through
  `stablehlo.optimization_barrier` first, so XLA cannot merge the recomputation with the
  forward pass that computed the same values (and `s2s_runtime.xla` keeps the barrier on
  CPU). Python emission writes the body in place, under a comment that says it is
  recomputed and by which policy.

Batching is a remat of the batched body; dead-code elimination prunes the body.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, eval_jaxpr, has_effects, literal_value
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import register as _register_python, register_statement
from s2s.errors import ShapeError
from s2s.passes import dce as _dce, jvp as _jvp, partial_eval as _pe, transpose as _transpose, vmap as _vmap
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.simplify import tidy
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.passes.vmap import batch_jaxpr
from s2s.primitives.control_flow_bodies import (constant_free, nonzero_mask, prune_body, same_types,
                                                transposed_body, type_list, write_body_in_place)
from s2s.staging import Primitive


# ---------------------------------------------------------------------------------------
# name: the identity, carrying a name the policies can read. (`name_p`: its parameter is
# called `name` too.) Its tangent is the input's tangent, unnamed: only forward values are
# ever saved.


name_p = Primitive("name", lambda x, *, name: x, lambda x, *, name: x)


def _name_jvp(primals, tangents, *, name):
    return name_p.bind(primals[0], name=name), tangents[0]


def _name_transpose(ct, x, *, name):
    return [ct]


_jvp.register(name_p, _name_jvp)
_transpose.register(name_p, _name_transpose)
_vmap.vectorized(name_p)
_register_python(name_p, lambda eqn, x: x)
_hlo.register(name_p, lambda ctx, eqn, x: [x])


# ---------------------------------------------------------------------------------------
# remat: declaration, and the one way of binding it.


def _remat_abstract(*avals, jaxpr, policy, prevent_cse, differentiated):
    if not same_types(list(jaxpr.in_avals), list(avals)):
        raise ShapeError(f"remat body takes ({type_list(jaxpr.in_avals)}), but the operands are "
                         f"({type_list(avals)})")
    return list(jaxpr.out_avals)


def _remat_impl(*args, jaxpr, policy, prevent_cse, differentiated):
    return eval_jaxpr(jaxpr, *args)


remat = Primitive("remat", _remat_abstract, _remat_impl, multiple_results=True)


def bind_remat(body: ClosedJaxpr, args: list, *, policy, prevent_cse: bool, differentiated: bool) -> list:
    """Stages a remat of `body` on `args`; returns every output of `body`.

    The remat itself returns only the outputs its body's equations compute, each once: an
    output that is an input or a literal is returned from outside (nothing to recompute).
    So partial evaluation can give each known output of a remat the equation that
    computes it in the forward pass. Constants of `body` become leading operands."""
    body, consts = constant_free(body)
    args = [*consts, *args]
    jaxpr = body.jaxpr
    computed = {v for eqn in jaxpr.eqns for v in eqn.outvars}
    kept = list(dict.fromkeys(v for v in jaxpr.outvars if isinstance(v, Var) and v in computed))
    values = dict(zip(jaxpr.invars, args))
    if kept:
        inner = ClosedJaxpr(Jaxpr([], jaxpr.invars, kept, jaxpr.eqns), [])
        values.update(zip(kept, remat.bind(*args, jaxpr=inner, policy=policy, prevent_cse=prevent_cse,
                                           differentiated=differentiated)))
    return [literal_value(v) if isinstance(v, Literal) else values[v] for v in jaxpr.outvars]


class Policy:
    """A policy with a readable name: printed jaxprs and emitted comments show it."""

    def __init__(self, decide, name: str):
        self._decide = decide
        self.__name__ = name

    def __call__(self, primitive, *avals, **params) -> bool:
        return self._decide(primitive, *avals, **params)

    def __repr__(self):
        return self.__name__


# Saves nothing but the remat's inputs: what checkpointed loops stage (frontend/checkpointed.py).
nothing_saveable = Policy(lambda primitive, *avals, **params: False, "nothing_saveable")


def policy_saves(policy, eqn) -> bool:
    """Whether `policy` saves the results of `eqn` (see the module docstring). The results
    of an equation with effects (a draw) are always saved: recomputed, a dropout mask
    would be another mask."""
    return has_effects(eqn) or bool(policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params))


def policy_name(policy) -> str:
    return getattr(policy, "__name__", None) or repr(policy)


# ---------------------------------------------------------------------------------------
# jvp: a remat of the jvp'd body.


def _remat_jvp(primals, tangents, *, jaxpr, **params):
    nonzero = nonzero_mask(tangents)
    jvp_body, out_nonzero = jvp_jaxpr(jaxpr, nonzero, instantiate_out=False)
    given = [instantiate(t) for t in tangents if not is_zero(t)]
    outs = bind_remat(tidy(jvp_body), [*primals, *given], **params)
    n = len(jaxpr.out_avals)
    out_tangents = iter(outs[n:])
    return outs[:n], [next(out_tangents) if nz else Zero(tangent_aval(a))
                      for a, nz in zip(jaxpr.out_avals, out_nonzero)]


_jvp.register(remat, _remat_jvp)


# ---------------------------------------------------------------------------------------
# Partial evaluation by policy: the known half is written out in the forward pass, the
# unknown half recomputes what the policy did not save.


def _remat_partial_eval(eqn, unknown_ins):
    params = eqn.params
    policy = params["policy"]
    def recompute(e):
        return not policy_saves(policy, e)
    with _pe.under_checkpoint(recompute):
        split = partial_eval_jaxpr(params["jaxpr"], unknown_ins, recompute=recompute)
    known_eqns, residuals = _known_half(eqn, split, unknown_ins)
    if not any(split.out_unknowns):     # the unknown operands reach no output
        return known_eqns, [], split.out_unknowns
    unknown_eqn = JaxprEqn(remat, residuals + [v for v, u in zip(eqn.invars, unknown_ins) if u],
                           [v for v, u in zip(eqn.outvars, split.out_unknowns) if u],
                           dict(params, jaxpr=split.unknown, differentiated=True), eqn.source_info)
    return known_eqns, [unknown_eqn], split.out_unknowns


def _known_half(eqn, split, unknown_ins) -> tuple[list[JaxprEqn], list]:
    """The known jaxpr's equations on the remat's known operands, defining its known
    outputs (`bind_remat` made every one the result of an equation), and the residuals
    as atoms of the enclosing jaxpr: saved values, or operands of the remat."""
    known = split.known.jaxpr
    n_known_outs = len(known.outvars) - split.num_residuals
    env = dict(zip(known.invars, [v for v, u in zip(eqn.invars, unknown_ins) if not u]))
    outer_outs = dict(zip(known.outvars[:n_known_outs], [v for v, u in zip(eqn.outvars, split.out_unknowns) if not u]))
    eqns = []
    for inner in known.eqns:
        outvars = [outer_outs[v] if v in outer_outs else Var(v.aval, v.hint) for v in inner.outvars]
        env.update(zip(inner.outvars, outvars))
        eqns.append(JaxprEqn(inner.primitive, [env[v] if isinstance(v, Var) else v for v in inner.invars],
                             outvars, inner.params, inner.source_info))
    undefined = [v for v in outer_outs if v not in {w for e in known.eqns for w in e.outvars}]
    assert not undefined, f"remat outputs {undefined} are not computed by its body: bind it with bind_remat"
    residuals = [env[v] if isinstance(v, Var) else v for v in known.outvars[n_known_outs:]]
    return eqns, residuals


_pe.register(remat, _remat_partial_eval)


# ---------------------------------------------------------------------------------------
# Transposition: the recomputation runs forward, the linear rest is transposed, all in one
# remat of the backward pass.


def _remat_transpose(cts, *args, jaxpr, **params):
    linear = [is_linear(a) for a in args]
    cts = [instantiate(c) for c in cts]
    body = transposed_body(jaxpr, linear)
    nonlinear = [a for a, lin in zip(args, linear) if not lin]
    in_cts = iter(bind_remat(tidy(body), nonlinear + cts, **dict(params, differentiated=True)))
    return [next(in_cts) if lin else None for lin in linear]


_transpose.register(remat, _remat_transpose)


# ---------------------------------------------------------------------------------------
# Batching and dead-code elimination.


def _remat_batch(axis, args, dims, *, jaxpr, **params):
    batched, out_dims = batch_jaxpr(jaxpr, dims, axis)
    return bind_remat(batched, args, **params), out_dims


_vmap.register(remat, _remat_batch)


def _remat_dce(eqn, used):
    body, reads = prune_body(eqn.params["jaxpr"], used)
    pruned = ClosedJaxpr(Jaxpr([], [v for v, r in zip(body.invars, reads) if r], body.outvars, body.eqns), [])
    return JaxprEqn(remat, [v for v, r in zip(eqn.invars, reads) if r], [v for v, u in zip(eqn.outvars, used) if u],
                    dict(eqn.params, jaxpr=pruned), eqn.source_info)


_dce.register(remat, _remat_dce)


# ---------------------------------------------------------------------------------------
# StableHLO: the body in place; a differentiated remat's operands pass through an
# optimization barrier first, so XLA computes the recomputation from them and cannot
# reuse the forward pass's values (common-subexpression elimination would).


def _lower_remat(ctx, eqn, *operands):
    params = eqn.params
    if params["prevent_cse"] and params["differentiated"] and operands:
        types = ", ".join(_hlo.tensor_type(v.aval) for v in eqn.invars)
        barrier = ctx.op(f"stablehlo.optimization_barrier {', '.join(operands)} : {types}", "remat",
                         results=len(operands))
        operands = _hlo.results_of(barrier, len(operands))
    return _hlo.lower_jaxpr(ctx, params["jaxpr"].jaxpr, list(operands))


_hlo.register(remat, _lower_remat)


# ---------------------------------------------------------------------------------------
# Python emission: the body in place. In the backward pass, a comment says that what
# follows is computed again, and by which policy; NumPy has no common-subexpression
# elimination to undo it.


def _emit_remat(block, eqn, operands, names):
    params = eqn.params
    body = params["jaxpr"].jaxpr
    comment = block.comment(eqn)
    args = [block.named(o, v.hint, comment) for o, v in zip(operands, body.invars)]
    if params["differentiated"]:
        block.line(f"# recomputed (checkpoint, policy {policy_name(params['policy'])}): "
                   "not saved by the forward pass")
    return write_body_in_place(block, body, args, names, comment)


register_statement(remat, _emit_remat)
