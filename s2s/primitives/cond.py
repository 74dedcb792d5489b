"""`cond` and all its rules: structured branching, carrying each branch as a jaxpr.

- `cond[branches](index, *operands)` runs `branches[index]` (the index clamped into range,
  as lax.switch does) on the operands; every branch has the same output types.

`s2s.lax.cond` and `switch` and the front end's `if` on arrays stage into it. Its rules
are here, as for every family: abstract eval, NumPy impl, jvp, Python emission (a real
`if`/`elif`/`else`, see `s2s/emit/python.py`), StableHLO lowering (`stablehlo.case`),
partial evaluation and transposition (branch by branch), dead-code elimination into
the branches, and batching (a cond of batched branches, or a select of every branch's
results where the index itself is batched). The loops (`loops/`) are the other half of
structured control flow; what both use on their bodies is in `control_flow_bodies.py`.
"""
from __future__ import annotations

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var, eval_jaxpr
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, register_statement
from s2s.errors import ShapeError
from s2s.passes import dce as _dce, jvp as _jvp, partial_eval as _pe, transpose as _transpose, vmap as _vmap
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.passes.vmap import batch_eqns, batch_jaxpr, batched_aval, move_axis, to_dim
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import (constant_free, differentiable_mask, nonzero_mask, per_example_mask,
                                                prune_body, same_types, transposed_body, type_list,
                                                write_assignment)
from s2s.staging import JaxprBuilder, Primitive, inline_jaxpr


def _cond_abstract(index, *operands, branches):
    if index.shape != () or np.dtype(index.dtype).kind not in "iub":
        raise ShapeError(f"cond needs a scalar integer or bool index, got {index.str_short()}")
    outs = branches[0].out_avals
    for i, branch in enumerate(branches):
        if not same_types(list(branch.in_avals), list(operands)):
            raise ShapeError(f"cond branch {i} takes ({type_list(branch.in_avals)}), "
                             f"but the operands are ({type_list(operands)})")
        if not same_types(list(branch.out_avals), list(outs)):
            raise ShapeError(f"cond branches return different types: ({type_list(outs)}) and "
                             f"({type_list(branch.out_avals)})",
                             "make every branch return arrays of the same shapes and dtypes")
    return [a.strip_weak_type() if not all(b.out_avals[k].weak_type for b in branches) else a
            for k, a in enumerate(outs)]


def _cond_impl(index, *operands, branches):
    chosen = min(max(int(index), 0), len(branches) - 1)
    return eval_jaxpr(branches[chosen], *operands)


cond = Primitive("cond", _cond_abstract, _cond_impl, multiple_results=True)


# ---------------------------------------------------------------------------------------
# jvp: each branch is replaced by its JVP jaxpr.


def _cond_jvp(primals, tangents, *, branches):
    index, operands = primals[0], primals[1:]
    operand_tangents = tangents[1:]
    nonzero = nonzero_mask(operand_tangents)
    out_avals = branches[0].out_avals
    differentiable = differentiable_mask(out_avals)
    jvp_branches = tuple(jvp_jaxpr(b, nonzero, instantiate_out=differentiable)[0] for b in branches)
    given = [instantiate(t) for t in operand_tangents if not is_zero(t)]
    outs = cond.bind(index, *operands, *given, branches=jvp_branches)
    n = len(out_avals)
    tangent_outs = iter(outs[n:])
    return outs[:n], [next(tangent_outs) if d else Zero(tangent_aval(a))
                      for a, d in zip(out_avals, differentiable)]


_jvp.register(cond, _cond_jvp)


# ---------------------------------------------------------------------------------------
# Python emission: a real `if` (or `if`/`elif`/`else`) around each branch's equations.


def _emit_cond(block, eqn, operands, names):
    comment = block.comment(eqn)
    args = [block.named(o, None, comment) for o in operands[1:]]
    branches = eqn.params["branches"]
    if len(branches) == 2 and eqn.invars[0].aval.dtype == dtypes.bool_:   # `if pred:` (true: branch 1)
        tests = [f"if {operands[0].text}:", "else:"]
        order = [1, 0]
    else:
        index = block.named(operands[0], "index", comment)
        tests = [f"if {index.text} <= 0:"] + [f"elif {index.text} == {i}:" for i in range(1, len(branches) - 1)] + ["else:"]
        order = list(range(len(branches)))
    outs = [name or block.names.fresh(_result_stem(block, v, [branches[i].jaxpr for i in order], j, args))
            for j, (name, v) in enumerate(zip(names, eqn.outvars))]
    for test, i in zip(tests, order):
        inner = block.nested(apart=True)
        # A branch writes its results straight into the output names (`y = np.sin(x)`).
        body = branches[i].jaxpr
        results = inner.write(body, args, targets=dict(zip(body.outvars, outs)))
        pending = [(o, r) for o, r in zip(outs, results) if r.text != o]
        write_assignment(inner, [o for o, _ in pending], [r for _, r in pending], comment)
        inner.pass_if_empty(0)
        if test == "else:" and _is_one_if_chain(inner.lines, inner.indent):
            # `else:` holding nothing but another `if` chain is written `elif`.
            block.line("el" + inner.lines[0][len(inner.indent):])
            block.lines.extend(line[len("    "):] for line in inner.lines[1:])
        else:
            block.line(test + (comment if i == order[0] else ""))
            block.lines.extend(inner.lines)
    return [Expr(o) for o in outs]


def _result_stem(block, out, branches, j: int, args) -> str:
    """What output `j` of a cond is called: its own name, else the first source name a
    branch (in the order they are written) gives the value it returns, else what computes
    it (`exp_X`) where every branch that computes it says the same, else `r`."""
    if out.hint:
        return out.hint
    named = (block.output_name(body, args, body.outvars[j], computed=False) for body in branches)
    computed = {block.output_name(body, args, body.outvars[j], computed=True) for body in branches} - {None}
    return next((name for name in named if name), computed.pop() if len(computed) == 1 else "r")


def _is_one_if_chain(lines: list[str], indent: str) -> bool:
    """Whether `lines` (at `indent`) are a single `if`/`elif`/`else` statement."""
    heads = [line[len(indent):] for line in lines if not line.startswith(indent + " ")]
    return bool(heads) and heads[0].startswith("if ") and all(
        h.startswith(("elif ", "else:")) for h in heads[1:])


register_statement(cond, _emit_cond)


# ---------------------------------------------------------------------------------------
# StableHLO: `stablehlo.case`; branches read outer values directly (regions may capture
# them). Branches that draw random numbers read the generators' states so too and return
# the states they end with after their results (`_hlo.drawn_in`).


def _result_types(avals) -> str:
    types = [_hlo.tensor_type(a) for a in avals]
    return types[0] if len(types) == 1 else f"({', '.join(types)})"


def _lower_cond(ctx, eqn, index, *operands):
    if not eqn.outvars:     # a branch whose results nobody keeps (`if c: z = ...`, z unused)
        return []
    branches = eqn.params["branches"]
    i32 = ShapedArray((), dtypes.int32)
    index_aval = eqn.invars[0].aval
    if index_aval.dtype != dtypes.int32:
        index = ctx.op(f"stablehlo.convert {index} : ({_hlo.tensor_type(index_aval)}) -> tensor<i32>")
    low, high = ctx.constant(0, dtypes.int32), ctx.constant(len(branches) - 1, dtypes.int32)
    index = ctx.op(f"stablehlo.clamp {low}, {index}, {high} : tensor<i32>")
    drawn = _hlo.drawn_in(*(b.jaxpr for b in branches))
    regions = [_hlo.region(ctx, b.jaxpr, list(operands), drawn) for b in branches]
    name = ctx.fresh(eqn.outvars[0].hint if eqn.outvars else "case")
    avals = [v.aval for v in eqn.outvars] + [_hlo.RNG_STATE_AVAL] * len(drawn)
    count = len(avals)
    ctx.lines.append(f"{name}{f':{count}' if count > 1 else ''} = \"stablehlo.case\"({index}) ({{")
    for k, lines in enumerate(regions):
        ctx.lines.extend(lines)
        ctx.lines.append("}, {" if k < len(regions) - 1 else
                         f"}}) : ({_hlo.tensor_type(i32)}) -> {_result_types(avals)}"
                         f"{ctx.location}")
    results = _hlo.results_of(name, count)
    ctx.host_states.update(zip(drawn, results[len(eqn.outvars):]))
    return results[:len(eqn.outvars)]


_hlo.register(cond, _lower_cond)


# ---------------------------------------------------------------------------------------
# Reverse mode: partial evaluation splits a cond branch by branch, every branch returning
# every branch's residuals; the unknown cond transposes branch by branch. A residual that is
# one of the cond's known operands (X, read by `X.T @ g` in a branch) is not returned at
# all: the unknown cond is given that operand too. Cheap equations (`defcheap`) are
# recomputed by the unknown branch from what they read, so `X.T` is not a residual either.
# A loop around the cond then sees a constant it keeps once, not a value per step.


def _cond_partial_eval(eqn, unknown_ins):
    branches = eqn.params["branches"]
    n_out = len(eqn.outvars)
    if unknown_ins[0]:          # the branch taken is unknown: all of it is
        return [], [eqn], [True] * n_out
    ops_uk = list(unknown_ins[1:])
    out_uk = [False] * n_out
    splits = [partial_eval_jaxpr(b, ops_uk, recompute=_pe.body_recompute(eqn)) for b in branches]
    for pe in splits:
        out_uk = [a or b for a, b in zip(out_uk, pe.out_unknowns)]
    operands = eqn.invars[1:]
    known_operands = [v for v, u in zip(operands, ops_uk) if not u]
    if not any(out_uk):     # unknown operands that no result depends on are dropped
        known_eqn = JaxprEqn(cond, [eqn.invars[0]] + known_operands, list(eqn.outvars),
                             dict(branches=tuple(pe.known for pe in splits)), eqn.source_info)
        return [known_eqn], [], out_uk
    splits = [partial_eval_jaxpr(b, ops_uk, instantiate=out_uk, recompute=_pe.body_recompute(eqn)) for b in branches]
    # Each branch's residuals: an operand's position among the known operands, or a slot.
    sources = [_residual_sources(pe) for pe in splits]
    forwarded = sorted({k for branch in sources for k in branch if isinstance(k, int)})
    res_avals = [r.aval for pe, branch in zip(splits, sources) for r, k in zip(_residuals(pe), branch)
                 if k is None]
    known_branches, unknown_branches, start = [], [], 0
    for pe, branch in zip(splits, sources):
        own = branch.count(None)
        known_branches.append(_known_branch(pe, branch, start, res_avals))
        unknown_branches.append(_unknown_branch(pe, branch, start, res_avals, forwarded))
        start += own
    res_vars = [Var(a) for a in res_avals]
    known_eqn = JaxprEqn(cond, [eqn.invars[0]] + known_operands,
                         [v for v, u in zip(eqn.outvars, out_uk) if not u] + res_vars,
                         dict(branches=tuple(known_branches)), eqn.source_info)
    unknown_eqn = JaxprEqn(cond, [eqn.invars[0]] + res_vars + [known_operands[k] for k in forwarded]
                           + [v for v, u in zip(operands, ops_uk) if u],
                           [v for v, u in zip(eqn.outvars, out_uk) if u],
                           dict(branches=tuple(unknown_branches)), eqn.source_info)
    return [known_eqn], [unknown_eqn], out_uk


def _residuals(pe) -> list:
    outvars = pe.known.jaxpr.outvars
    return outvars[len(outvars) - pe.num_residuals:]


def _residual_sources(pe) -> list:
    """For each residual of one branch: the position of the known operand it is, or None
    (a value the branch computes, returned in a slot)."""
    position = {v: k for k, v in enumerate(pe.known.jaxpr.invars)}
    return [position.get(r) if isinstance(r, Var) else None for r in _residuals(pe)]


def _known_branch(pe, sources: list, start: int, res_avals) -> ClosedJaxpr:
    """The known part of one branch, returning all branches' residual slots (its own
    computed residuals in its slots, zeros in the others')."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(a) for a in pe.known.in_avals]
        outs = inline_jaxpr(pe.known, args)
        n_known = len(outs) - pe.num_residuals
        own = [o for o, k in zip(outs[n_known:], sources) if k is None]
        slots = [instantiate(Zero(a)) for a in res_avals[:start]] + own + \
            [instantiate(Zero(a)) for a in res_avals[start + len(own):]]
        return builder.build(list(outs[:n_known]) + slots)


def _unknown_branch(pe, sources: list, start: int, res_avals, forwarded: list) -> ClosedJaxpr:
    """The unknown part of one branch, taking all branches' residual slots, then the known
    operands that are residuals of some branch, then the unknown operands."""
    with JaxprBuilder() as builder:
        slots = [builder.new_arg(a) for a in res_avals]
        operand_args = {k: builder.new_arg(pe.known.in_avals[k]) for k in forwarded}
        unknown_ins = [builder.new_arg(a) for a in pe.unknown.in_avals[pe.num_residuals:]]
        own = iter(slots[start:])
        residuals = [next(own) if k is None else operand_args[k] for k in sources]
        outs = inline_jaxpr(pe.unknown, residuals + unknown_ins)
        return builder.build(outs)


def _cond_transpose(cts, index, *operands, branches):
    if is_linear(index):
        raise _transpose.NonLinearEquationError("cond transpose: the index is linear")
    linear = [is_linear(o) for o in operands]
    out_avals = branches[0].out_avals
    cts = [instantiate(c) if not is_zero(c) else instantiate(Zero(a)) for c, a in zip(cts, out_avals)]
    transposed = tuple(transposed_body(b, linear) for b in branches)
    residuals = [o for o, lin in zip(operands, linear) if not lin]
    outs = iter(cond.bind(index, *residuals, *cts, branches=transposed))
    return [None] + [next(outs) if lin else None for lin in linear]


_pe.register(cond, _cond_partial_eval)
_transpose.register(cond, _cond_transpose)


# ---------------------------------------------------------------------------------------
# Dead-code elimination into the branches: outputs nobody reads are not computed.


def _cond_dce(eqn, used):
    branches = eqn.params["branches"]
    pruned = [prune_body(b, used) for b in branches]
    keep_in = [any(reads[i] for _, reads in pruned) for i in range(len(eqn.invars) - 1)]
    new_branches = tuple(ClosedJaxpr(Jaxpr([], [v for v, k in zip(body.invars, keep_in) if k],
                                           body.outvars, body.eqns), [])
                         for body, _ in pruned)
    return JaxprEqn(cond, [eqn.invars[0]] + [v for v, k in zip(eqn.invars[1:], keep_in) if k],
                    [v for v, k in zip(eqn.outvars, used) if k], dict(branches=new_branches),
                    eqn.source_info)


_dce.register(cond, _cond_dce)


# ---------------------------------------------------------------------------------------
# Batching. With an index shared by the batch, the cond stays one cond of batched branches,
# every branch returning each output batched at the same position (or all unbatched).
# With a batched index each example may take another branch: every branch runs on the
# whole batch and each example's results are selected by its own (clamped) index.


def _agreed_out_dims(branches, dims, axis) -> list:
    """Where each output must be batched for all branches to agree: where the first branch
    that batches it puts it, or None when no branch does."""
    per_branch = [batch_jaxpr(b, dims, axis)[1] for b in branches]
    return [next((d for d in column if d is not None), None) for column in zip(*per_branch)]


def _cond_batch(axis, args, dims, *, branches):
    index, operands = args[0], args[1:]
    index_dim, operand_dims = dims[0], dims[1:]
    if index_dim is None:
        out_dims = _agreed_out_dims(branches, operand_dims, axis)
        new_branches, consts = _sharing_consts(
            [constant_free(batch_jaxpr(b, operand_dims, axis, out_dims)[0]) for b in branches])
        return cond.bind(index, *consts, *operands, branches=new_branches), out_dims
    out_dims = [0 if d is None else d for d in _agreed_out_dims(branches, operand_dims, axis)]
    results = [[to_dim(x, d, want, axis.size) for x, d, want in
                zip(*batch_eqns(b, operands, operand_dims, axis), out_dims)] for b in branches]
    index = move_axis(index, index_dim, 0)
    if len(branches) == 2 and index.aval.dtype == dtypes.bool_:
        picks = [index]
    else:
        last = ops.literal(len(branches) - 1, index.aval.dtype)
        clamped = ops.clamp(ops.literal(0, index.aval.dtype), index, last)
        picks = [ops.eq(clamped, ops.literal(k, index.aval.dtype)) for k in range(1, len(branches))]
    outs = []
    for k, (want, aval) in enumerate(zip(out_dims, branches[0].out_avals)):
        chosen = results[0][k]
        shape = batched_aval(aval, want, axis.size).shape
        for pick, branch_results in zip(picks, results[1:]):
            chosen = ops.select(per_example_mask(pick, shape, want), branch_results[k], chosen)
        outs.append(chosen)
    return outs, out_dims


def _sharing_consts(batched: list) -> tuple[tuple, list]:
    """Batched branches, each with the constants its batching made (`constant_free` put
    them first), all taking every branch's constants in order; and those constants."""
    counts = [len(consts) for _, consts in batched]
    const_avals = [[v.aval for v in body.jaxpr.invars[:n]] for (body, _), n in zip(batched, counts)]
    shared = []
    for k, (body, _) in enumerate(batched):
        invars = [v for j, avals in enumerate(const_avals)
                  for v in (body.jaxpr.invars[:counts[k]] if j == k else [Var(a) for a in avals])]
        shared.append(ClosedJaxpr(Jaxpr([], invars + list(body.jaxpr.invars[counts[k]:]), body.jaxpr.outvars,
                                        body.jaxpr.eqns), []))
    return tuple(shared), [c for _, consts in batched for c in consts]


_vmap.register(cond, _cond_batch)
