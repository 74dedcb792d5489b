"""A constant a loop body reads one row per step at its counter becomes a scanned input
(`scanned_rows`, which the front end calls when it stages a `for` loop).

`for t in range(n): ... xs[t] ...` is staged as a scan over the counter `np.arange(n)`
with `xs` a constant of the body, read one row per step by a dynamic_slice at the
counter. As written, reverse mode would transpose that read into a full-size
`dynamic_update_slice` of zeros per step, summed into xs's cotangent, and the forward
loop would index with a negative-index wrap it never needs. A constant read only so is
the loop's scanned input (what `lax.scan(f, h, xs)` would have been given): each step
reads its row directly, and its cotangent is one row written per step.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from s2s.passes import dce as _dce
from s2s.primitives import ops


def _at_counter(atom, counters: set, producer: dict) -> bool:
    """Whether `atom` equals a scanned counter: the counter itself, or NumPy's wrap of a
    negative index `where(d < 0, d + n, d)` of a counter d (never negative, so the wrap is
    d)."""
    if atom in counters:
        return True
    eqn = producer.get(atom)
    if eqn is None or eqn.primitive is not ops.primitive(ops.select) or eqn.invars[2] not in counters:
        return False
    test = producer.get(eqn.invars[0])
    return (test is not None and test.primitive is ops.primitive(ops.lt) and test.invars[0] is eqn.invars[2]
            and getattr(test.invars[1], "value", None) == 0)


def _row_read(eqn, const, counters: set, producer: dict) -> bool:
    """Whether `eqn` is `dynamic_slice(const, counter, ...)` of one whole row of `const`
    (later start indices do not matter: a slice the whole size of an axis starts at 0)."""
    return (eqn.primitive is ops.primitive(ops.dynamic_slice) and eqn.invars[0] is const
            and eqn.params["slice_sizes"] == (1,) + tuple(const.aval.shape[1:])
            and const not in eqn.invars[1:]
            and _at_counter(eqn.invars[1], counters, producer))


def scanned_rows(body: ClosedJaxpr, num_consts: int, num_carry: int, length: int,
                 counter_xs: list[bool]) -> tuple[list[int], ClosedJaxpr]:
    """The body's constants that are read only a row per step at the step's counter
    (`counter_xs[k]`: the k-th scanned input is `arange(length)`), and the body with each
    of them taken as a scanned input instead (appended after the others, one row per step).
    The caller passes the first `length` rows of each such constant as that input."""
    jaxpr = body.jaxpr
    xs_vars = jaxpr.invars[num_consts + num_carry:]
    counters = {v for v, is_counter in zip(xs_vars, counter_xs) if is_counter}
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    users: dict = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            users.setdefault(v, []).append(eqn)
    chosen = [k for k, c in enumerate(jaxpr.invars[:num_consts])
              if counters and c.aval.shape and c.aval.shape[0] >= length and c not in jaxpr.outvars
              and users.get(c) and all(_row_read(e, c, counters, producer) for e in users[c])]
    if not chosen:
        return [], body
    rows = {jaxpr.invars[k]: Var(ShapedArray(jaxpr.invars[k].aval.shape[1:], jaxpr.invars[k].aval.dtype),
                                 jaxpr.invars[k].hint) for k in chosen}
    row_of_read: dict = {}   # a rewritten read's (1, ...) result -> the row it holds
    rename: dict = {}        # a squeeze of such a result -> the row
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive is ops.primitive(ops.dynamic_slice) and eqn.invars[0] in rows:
            (out,) = eqn.outvars
            row_of_read[out] = rows[eqn.invars[0]]
            eqn = JaxprEqn(ops.primitive(ops.broadcast_in_dim), [row_of_read[out]], [out],
                           dict(shape=out.aval.shape, broadcast_dimensions=tuple(range(1, out.aval.ndim))),
                           eqn.source_info)
        elif (eqn.primitive is ops.primitive(ops.squeeze) and eqn.params["dimensions"] == (0,)
              and eqn.invars[0] in row_of_read):
            rename[eqn.outvars[0]] = row_of_read[eqn.invars[0]]
            continue
        else:
            eqn = JaxprEqn(eqn.primitive, [rename.get(v, v) for v in eqn.invars], eqn.outvars, eqn.params,
                           eqn.source_info)
        eqns.append(eqn)
    kept = [v for k, v in enumerate(jaxpr.invars) if k not in chosen]
    rewritten = Jaxpr(jaxpr.constvars, kept + list(rows.values()), [rename.get(v, v) for v in jaxpr.outvars], eqns)
    return chosen, ClosedJaxpr(_dce.dce_jaxpr(rewritten), body.consts)
