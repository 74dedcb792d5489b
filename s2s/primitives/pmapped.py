"""`pmap` as a primitive: a pmapped function called inside another transform.

    pmap[jaxpr, axis_name, axis_size, in_axes, out_axes](*operands)

runs its `jaxpr` (a body without constants, staged for one device's shapes under the
named axis `axis_name`) on `axis_size` devices at once: operand i is split along its
`in_axes[i]` axis (None: every device gets all of it), and result k of every device is
stacked at `out_axes[k]` (None: device 0's). `s2s.pmap` called at the top level runs its
body itself (`s2s/pmap.py`); called on staged values (inside jit, grad, vmap or another
pmap) it binds this primitive, so the transforms around see one equation.

Its meaning is the vmap of the body over the named axis (`reference_jaxpr`): the NumPy
impl and the Python emission compute that, the collectives in the body batched away as
reductions over the batch, exactly what `s2s.emit_python` writes for a top-level pmap.
The other rules keep it a pmap:

- jvp: a pmap of the jvp'd body, tangents mapped like their primals.
- partial evaluation: the body split, each half a pmap; the residuals leave the known
  half stacked along axis 0 and enter the unknown half mapped along it.
- transposition: a pmap of the transposed body. The cotangent of a result with out_axes
  None reaches device 0 only (the result was device 0's); the cotangent of an operand
  with in_axes None is the sum over the devices (each read all of it).
- batching (vmap of a pmap): a pmap of the batched body, the vmap's axis in front of each
  operand and result, never the device axis.
- lowering: the module runs on as many XLA replicas as its pmaps need (`replicas_needed`:
  a nested pmap multiplies them). Entering the pmap, each replica slices the mapped
  operands at its index along the axis (from its replica id); the body runs with the
  axis bound, so its collectives find their replica groups (`collectives.py`); leaving,
  the results are all-gathered over the axis's replicas (out_axes None: each keeps its
  own). Outside every pmap, each replica computes the same; the program's result is
  replica 0's.
"""
from __future__ import annotations

import numpy as np

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Var, eval_jaxpr
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, dtype_text, register_statement
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.passes import dce as _dce, jvp as _jvp, partial_eval as _pe, transpose as _transpose, vmap as _vmap
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr
from s2s.passes.simplify import tidy
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.passes.vmap import ANYWHERE, Axis, batch_jaxpr, batched_aval, example_aval
from s2s.primitives import ops
from s2s.primitives.collectives import axis_index_in_replicas, gather_across_replicas
from s2s.primitives.control_flow_bodies import (constant_free, nonzero_mask, prune_body, same_types,
                                                transposed_body, type_list, write_body_in_place)
from s2s.staging import JaxprBuilder, Primitive, inline_jaxpr


# ---------------------------------------------------------------------------------------
# Declaration, the reference meaning, and the one way of binding it.


def _pmap_abstract(*avals, jaxpr, axis_name, axis_size, in_axes, out_axes):
    for aval, axis in zip(avals, in_axes):
        if axis is not None and aval.shape[axis] != axis_size:
            raise ShapeError(f"pmap over {axis_size} devices got an operand {aval.str_short()} "
                             f"mapped along axis {axis}")
    per_device = [example_aval(aval, axis) for aval, axis in zip(avals, in_axes)]
    if not same_types(per_device, list(jaxpr.in_avals)):
        raise ShapeError(f"pmap body takes ({type_list(jaxpr.in_avals)}), but one device's share of "
                         f"the operands is ({type_list(per_device)})")
    return [batched_aval(aval, axis, axis_size) for aval, axis in zip(jaxpr.out_avals, out_axes)]


def reference_jaxpr(jaxpr: ClosedJaxpr, axis_name, axis_size: int, in_axes, out_axes) -> ClosedJaxpr:
    """What a pmap computes, as one jaxpr on the whole batch: its body vmapped over the
    named axis, a result with out_axes None taken from example 0 when it varies."""
    axis = Axis(axis_size, axis_name)
    batched, dims = batch_jaxpr(jaxpr, list(in_axes), axis, [ANYWHERE if o is None else o for o in out_axes])
    if all(o is not None or d is None for o, d in zip(out_axes, dims)):
        return batched
    with JaxprBuilder() as builder:
        args = [builder.new_arg(v.aval, v.hint) for v in batched.jaxpr.invars]
        outs = inline_jaxpr(batched, args)
        return builder.build([ops.index_in_dim(x, 0, d) if o is None and d is not None else x
                              for x, o, d in zip(outs, out_axes, dims)])


def _pmap_impl(*args, jaxpr, axis_name, axis_size, in_axes, out_axes):
    return eval_jaxpr(reference_jaxpr(jaxpr, axis_name, axis_size, in_axes, out_axes), *args)


pmap_p = Primitive("pmap", _pmap_abstract, _pmap_impl, multiple_results=True)


def bind_pmap(body: ClosedJaxpr, args: list, *, axis_name, axis_size: int, in_axes, out_axes) -> list:
    """Stages a pmap of `body` on `args`; returns its results. The constants of `body`
    become leading operands, given to every device whole; negative axes are counted from
    the end (of an operand; of a result with the device axis)."""
    body, consts = constant_free(body)
    in_axes = [None] * len(consts) + [None if a is None else a % _vmap.ndim(x) for x, a in zip(args, in_axes)]
    out_axes = [None if o is None else o % (aval.ndim + 1) for aval, o in zip(body.out_avals, out_axes)]
    return pmap_p.bind(*consts, *args, jaxpr=body, axis_name=axis_name, axis_size=axis_size,
                       in_axes=tuple(in_axes), out_axes=tuple(out_axes))


def _rebind(body: ClosedJaxpr, args: list, params: dict, in_axes, out_axes) -> list:
    """A pmap like the one of `params` (same axis), of another body."""
    return bind_pmap(tidy(body), args, axis_name=params["axis_name"], axis_size=params["axis_size"],
                     in_axes=in_axes, out_axes=out_axes)


# ---------------------------------------------------------------------------------------
# jvp: a pmap of the jvp'd body.


def _pmap_jvp(primals, tangents, **params):
    jaxpr = params["jaxpr"]
    nonzero = nonzero_mask(tangents)
    jvp_body, out_nonzero = jvp_jaxpr(jaxpr, nonzero, instantiate_out=False)
    given = [instantiate(t) for t in tangents if not is_zero(t)]
    tangent_in_axes = [a for a, nz in zip(params["in_axes"], nonzero) if nz]
    tangent_out_axes = [o for o, nz in zip(params["out_axes"], out_nonzero) if nz]
    outs = _rebind(jvp_body, [*primals, *given], params, [*params["in_axes"], *tangent_in_axes],
                   [*params["out_axes"], *tangent_out_axes])
    n = len(jaxpr.out_avals)
    out_tangents = iter(outs[n:])
    return outs[:n], [next(out_tangents) if nz else Zero(tangent_aval(v.aval))
                      for v, nz in zip(outs[:n], out_nonzero)]


_jvp.register(pmap_p, _pmap_jvp)


# ---------------------------------------------------------------------------------------
# Partial evaluation: two pmaps, the residuals passed between them stacked along axis 0.


def _pmap_partial_eval(eqn, unknown_ins):
    params = eqn.params
    split = partial_eval_jaxpr(params["jaxpr"], unknown_ins)
    size = params["axis_size"]
    known_out = [not u for u in split.out_unknowns]
    known_body = split.known.jaxpr
    residuals = [Var(batched_aval(v.aval, 0, size), v.hint)
                 for v in known_body.outvars[len(known_body.outvars) - split.num_residuals:]]
    known_outvars = [v for v, k in zip(eqn.outvars, known_out) if k] + residuals
    known_eqns = []
    if known_outvars:
        known_eqns.append(JaxprEqn(
            pmap_p, [v for v, u in zip(eqn.invars, unknown_ins) if not u], known_outvars,
            dict(params, jaxpr=split.known,
                 in_axes=tuple(a for a, u in zip(params["in_axes"], unknown_ins) if not u),
                 out_axes=tuple([o for o, k in zip(params["out_axes"], known_out) if k] + [0] * len(residuals))),
            eqn.source_info))
    if not any(split.out_unknowns):
        return known_eqns, [], split.out_unknowns
    unknown_eqn = JaxprEqn(
        pmap_p, residuals + [v for v, u in zip(eqn.invars, unknown_ins) if u],
        [v for v, u in zip(eqn.outvars, split.out_unknowns) if u],
        dict(params, jaxpr=split.unknown,
             in_axes=tuple([0] * len(residuals) + [a for a, u in zip(params["in_axes"], unknown_ins) if u]),
             out_axes=tuple(o for o, u in zip(params["out_axes"], split.out_unknowns) if u)),
        eqn.source_info)
    return known_eqns, [unknown_eqn], split.out_unknowns


_pe.register(pmap_p, _pmap_partial_eval)


# ---------------------------------------------------------------------------------------
# Transposition: a pmap of the transposed body.


def _to_device_zero(ct, size: int):
    """The cotangent of a result that was device 0's: stacked along a new axis 0, zeros
    for every other device."""
    shape = (size,) + tuple(ct.shape)
    stacked = ops.broadcast_in_dim(ct, shape, tuple(range(1, len(shape))))
    first = ops.broadcast_in_dim(np.arange(size) == 0, shape, (0,))
    return ops.select(first, stacked, ops.full(shape, 0, ct.aval.dtype))


def _pmap_transpose(cts, *args, **params):
    in_axes, out_axes, size = params["in_axes"], params["out_axes"], params["axis_size"]
    linear = [is_linear(a) for a in args]
    cts = [instantiate(c) for c in cts]
    body = transposed_body(params["jaxpr"], linear)
    cts = [c if o is not None else _to_device_zero(c, size) for c, o in zip(cts, out_axes)]
    nonlinear = [(a, axis) for a, axis, lin in zip(args, in_axes, linear) if not lin]
    linear_axes = [axis for axis, lin in zip(in_axes, linear) if lin]
    in_cts = iter(_rebind(body, [a for a, _ in nonlinear] + cts, params,
                          [axis for _, axis in nonlinear] + [0 if o is None else o for o in out_axes],
                          [0 if axis is None else axis for axis in linear_axes]))
    result = []
    for lin, axis in zip(linear, in_axes):
        if not lin:
            result.append(None)
            continue
        ct = next(in_cts)
        result.append(ops.reduce_sum(ct, (0,)) if axis is None else ct)   # every device read all of it
    return result


_transpose.register(pmap_p, _pmap_transpose)


# ---------------------------------------------------------------------------------------
# Batching (vmap of a pmap): the vmap's axis goes in front of every operand and result,
# so the device axis moves one place on and the body sees the batch at 0.


def _pmap_batch(axis, args, dims, **params):
    moved, in_axes, body_dims = [], [], []
    for x, d, a in zip(args, dims, params["in_axes"]):
        moved.append(x if d is None else _vmap.move_axis(x, d, 0))
        in_axes.append(a if d is None or a is None else a + 1)
        body_dims.append(None if d is None else 0)
    n_out = len(params["jaxpr"].out_avals)
    batched, _ = batch_jaxpr(params["jaxpr"], body_dims, axis, [0] * n_out)
    outs = _rebind(batched, moved, params, in_axes, [None if o is None else o + 1 for o in params["out_axes"]])
    return outs, [0] * n_out


_vmap.register(pmap_p, _pmap_batch)


def _pmap_dce(eqn, used):
    body, reads = prune_body(eqn.params["jaxpr"], used)
    pruned = ClosedJaxpr(Jaxpr([], [v for v, r in zip(body.invars, reads) if r], body.outvars, body.eqns), [])
    params = eqn.params
    return JaxprEqn(pmap_p, [v for v, r in zip(eqn.invars, reads) if r], [v for v, u in zip(eqn.outvars, used) if u],
                    dict(params, jaxpr=pruned, in_axes=tuple(a for a, r in zip(params["in_axes"], reads) if r),
                         out_axes=tuple(o for o, u in zip(params["out_axes"], used) if u)),
                    eqn.source_info)


_dce.register(pmap_p, _pmap_dce)


# ---------------------------------------------------------------------------------------
# StableHLO: the body between slicing each replica's share and gathering the results.


def _replicas(eqn) -> int:
    return eqn.params["axis_size"] * _hlo.replicas_needed(eqn.params["jaxpr"].jaxpr)


def _share(ctx, x: str, aval, axis: int, index: str, hint) -> str:
    """This replica's slice of `x` (of `aval`) at `index` along `axis`, that axis dropped."""
    zero = ctx.constant(0, np.int32)
    starts = ", ".join(index if d == axis else zero for d in range(aval.ndim))
    one = aval.shape[:axis] + (1,) + aval.shape[axis + 1:]
    sliced = ctx.op(f"stablehlo.dynamic_slice {x}, {starts}, sizes = [{', '.join(map(str, one))}] : "
                    f"({_hlo.tensor_type(aval)}, {', '.join(['tensor<i32>'] * aval.ndim)}) -> "
                    f"{_hlo.tensor_type(aval.update(shape=one))}")
    share = example_aval(aval, axis)
    return ctx.op(f"stablehlo.reshape {sliced} : ({_hlo.tensor_type(aval.update(shape=one))}) -> "
                  f"{_hlo.tensor_type(share)}", hint)


def _lower_pmap(ctx, eqn, *operands):
    params = eqn.params
    size = params["axis_size"]
    # A name of its own for an unnamed axis: no collective refers to it.
    axes = ((params["axis_name"] if params["axis_name"] is not None else object(), size),)
    outer = ctx.replica_axes
    spanned = size * int(np.prod([s for _, s in outer], dtype=np.int64))
    if ctx.replicas % spanned:
        inside = f" inside pmaps over {spanned // size}" if outer else ""
        raise UnsupportedFunctionError(f"a pmap over {size} devices{inside} cannot share the {ctx.replicas} "
                                       f"replicas this program's other pmaps need: {ctx.replicas} is not a "
                                       f"multiple of {spanned}",
                                       "give pmaps one after another in one jit sizes that divide each other")
    ctx.replica_axes = outer + axes
    try:
        index = axis_index_in_replicas(ctx, axes, "device")
        shares = [x if a is None else _share(ctx, x, v.aval, a, index, body_v.hint)
                  for x, v, a, body_v in zip(operands, eqn.invars, params["in_axes"], params["jaxpr"].jaxpr.invars)]
        # Each device draws its own numbers; the code after the pmap, the same on every replica.
        continuing = _hlo.states_per_replica(ctx, _hlo.drawn_in(params["jaxpr"].jaxpr), index, "tensor<i32>")
        outs = _hlo.lower_jaxpr(ctx, params["jaxpr"].jaxpr, shares)
        ctx.host_states.update(continuing)
        return [x if o is None else gather_across_replicas(ctx, x, v.aval, axes, o, hint=out.hint)
                for x, v, o, out in zip(outs, params["jaxpr"].jaxpr.outvars, params["out_axes"], eqn.outvars)]
    finally:
        ctx.replica_axes = outer


_hlo.register(pmap_p, _lower_pmap, replicas=_replicas)


# ---------------------------------------------------------------------------------------
# Python emission: the reference (the body vmapped over the axis) written in place, under
# a comment that says so. Its constants (index arrays of grouped collectives) are written
# as array literals before it.


def _emit_pmap(block, eqn, operands, names):
    params = eqn.params
    reference, consts = constant_free(reference_jaxpr(**params))
    comment = block.comment(eqn)
    axis = "" if params["axis_name"] is None else f" {params['axis_name']!r}"
    block.line(f"# pmap over axis{axis} ({params['axis_size']} devices): every device's share at once")
    const_exprs = []
    for value, v in zip(consts, reference.jaxpr.invars):
        value = np.asarray(value)
        name = block.names.fresh(v.hint or "c")
        block.line(f"{name} = np.array({value.tolist()!r}, dtype={dtype_text(value.dtype)})")
        const_exprs.append(Expr(name))
    body = reference.jaxpr
    args = const_exprs + [block.named(o, v.hint, comment) for o, v in zip(operands, body.invars[len(consts):])]
    return write_body_in_place(block, body, args, names, comment)


register_statement(pmap_p, _emit_pmap)
