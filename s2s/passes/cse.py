"""Common-subexpression elimination: one equation for each distinct computation
(and none for the identities `x * 1`, `x + 0`).

Two equations are the same when they apply the same primitive with equal parameters to
the same operands (variables by identity, literals by value and type). The later one is
dropped and its outputs are renamed to the earlier one's. Primitives are pure, so this is
always sound; it removes the duplicates that differentiation rules produce (the same
`cos x` for two tangents, the same `x - mean` the user wrote twice).
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var


def _atom_key(v):
    if isinstance(v, Literal):
        value = v.value.item() if hasattr(v.value, "item") else v.value
        return ("literal", repr(value), v.aval)   # repr: tells -0.0 from 0.0
    return ("var", id(v))


def _params_key(params: dict):
    try:
        key = tuple(sorted(params.items()))
        hash(key)
        return key
    except TypeError:
        return None  # parameters we cannot compare (sub-jaxprs): never merged


def _identity_operand(eqn, invars, filled: dict):
    """The operand an equation merely passes through (`x * 1`, `x + 0`), if any.

    Differentiation makes these (the cotangent seed is a literal 1, and the transpose of a
    sum broadcasts it); dropping them keeps emitted derivatives free of `1.0 * t` noise.
    `filled` maps variables that are a broadcast literal to that literal's value.
    """
    name = eqn.primitive.name
    if name not in ("mul", "add", "add_any", "sub") or len(invars) != 2:
        return None
    unit = 1 if name == "mul" else 0
    out = eqn.outvars[0].aval
    candidates = [(0, 1), (1, 0)] if name != "sub" else [(0, 1)]
    for keep, other in candidates:
        constant, var = invars[other], invars[keep]
        value = constant.value if isinstance(constant, Literal) else filled.get(constant)
        if (value is not None and isinstance(var, Var) and value == unit
                and var.aval.shape == out.shape and var.aval.dtype == out.dtype):
            return var
    return None


def _fold_broadcast(eqn, invars, broadcasts: dict):
    """A broadcast (or expand_dims) of a broadcast, as one broadcast_in_dim of the source.

    Transposed reductions produce chains like broadcast -> expand_dims -> broadcast;
    folding them keeps emitted gradients to one `np.broadcast_to`. Returns the
    replacement equation, or None.
    """
    name = eqn.primitive.name
    if name not in ("broadcast_in_dim", "expand_dims") or not isinstance(invars[0], Var):
        return None
    inner = broadcasts.get(invars[0])
    if inner is None:
        return None
    source, inner_dims = inner
    out_shape = eqn.outvars[0].aval.shape
    if name == "broadcast_in_dim":
        outer = eqn.params["broadcast_dimensions"]
    else:   # expand_dims: input dim i lands on the i-th output dim that was not inserted
        inserted = {d % len(out_shape) for d in eqn.params["dimensions"]}
        outer = tuple(d for d in range(len(out_shape)) if d not in inserted)
    params = {"shape": tuple(out_shape), "broadcast_dimensions": tuple(outer[d] for d in inner_dims)}
    primitive = eqn.primitive if name == "broadcast_in_dim" else _broadcast_primitive()
    return JaxprEqn(primitive, [source], eqn.outvars, params, eqn.source_info)


def _broadcast_primitive():
    from s2s.staging import PRIMITIVES
    return PRIMITIVES["broadcast_in_dim"]


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    jaxpr = closed.jaxpr
    rename: dict[Var, Var] = {}
    seen: dict[tuple, list[Var]] = {}
    filled: dict[Var, object] = {}   # var -> the literal it is a broadcast of
    broadcasts: dict[Var, tuple] = {}  # var -> (source atom, broadcast_dimensions) it came from
    eqns = []

    def sub(v):
        return rename.get(v, v) if isinstance(v, Var) else v

    for eqn in jaxpr.eqns:
        invars = [sub(v) for v in eqn.invars]
        folded = _fold_broadcast(eqn, invars, broadcasts)
        if folded is not None:
            eqn, invars = folded, folded.invars
        passthrough = _identity_operand(eqn, invars, filled)
        if passthrough is not None:
            rename[eqn.outvars[0]] = passthrough
            if passthrough.hint is None:
                passthrough.hint = eqn.outvars[0].hint
            continue
        if eqn.primitive.name == "broadcast_in_dim":
            broadcasts[eqn.outvars[0]] = (invars[0], eqn.params["broadcast_dimensions"])
            if isinstance(invars[0], Literal):
                filled[eqn.outvars[0]] = invars[0].value
        params_key = _params_key(eqn.params)
        key = None
        if params_key is not None:
            key = (eqn.primitive.name, tuple(_atom_key(v) for v in invars), params_key)
        if key is not None and key in seen:
            for old, new in zip(eqn.outvars, seen[key]):
                rename[old] = new
                if new.hint is None:
                    new.hint = old.hint
            continue
        new_eqn = JaxprEqn(eqn.primitive, invars, eqn.outvars, eqn.params, eqn.source_info)
        eqns.append(new_eqn)
        if key is not None:
            seen[key] = eqn.outvars
    outvars = [sub(v) for v in jaxpr.outvars]
    return ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns), closed.consts)
