"""Python emission of `while_loop`, `scan` and `while_reverse`: real `while` / `for`
statements around the bodies' equations, written the way the source was.

- A loop over a step counter is `for step in range(50):`, with the user's name for the
  counter, else `i` (a bounded `while_loop` counts in `step`). The counter is whatever the
  staging made of it: a scanned `np.arange(n)` (a Python `for` over `range`), or a carry
  that starts at a constant and gains one per step (`lax.fori_loop`). The body reads the
  Python int `range` yields wherever that computes what the counter of its dtype would
  (see `_python_int_values`), else `t = np.int64(i)` first.
- A carry the body only adds to (`k_bar = k_bar + term`, the cotangent a backward loop
  accumulates for a value every step reads) is summed in place, `k_bar += term`, right
  where `term` is computed: one array for the whole loop instead of a new one per step
  and two alive at once. The loop owns that array: it starts as a fresh allocation
  (`np.full(...)`) or as a copy of the initial value, never as a caller's array.
- A stacked output is a buffer named after the value it holds on each step: the user's
  name for the stacked values if they have one, else `p_per_step` for the body's `p` (the
  residuals reverse mode saves are such buffers), and a loop reading one back calls its row
  `p`, or reads `p_per_step[i]` where it is used once.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from s2s import dtypes
from s2s.core import Jaxpr, JaxprEqn, Literal, Var
from s2s.emit.pyexpr import (ATOM, BARE_SCALAR_OK, STATEMENT_RULES, Expr, dtype_text, python_rules, register_statement,
                             typed_scalar)
from s2s.primitives import ops
from s2s.primitives.control_flow_bodies import write_assignment
from s2s.primitives.loops.checkpoints import while_reverse
from s2s.primitives.loops.definitions import scan, while_loop
from s2s.primitives.loops.unrolling import unrolled_scan

PER_STEP = "_per_step"   # the suffix of a buffer holding one value per step


def _held(expr: Expr) -> str | None:
    """The value a per-step buffer, or a row of one, holds: `p` for `p_per_step` and for
    `p_per_step[i]` (a loop reading it calls it that), else None."""
    match = re.fullmatch(rf"(\w+?){PER_STEP}(_\d+)?(\[[^\]]*\])?", expr.text)
    return match and match.group(1)


def _carry_names(block, body_invars, outvars, given) -> list[str]:
    """Names for loop carries: a name the function gave out already for the loop's result
    (an argument's cotangent, `W_bar`), else the body's parameter names where it has them."""
    return [name or block.names.fresh(b.hint or o.hint or "carry")
            for b, o, name in zip(body_invars, outvars, given)]


def _typed(expr: Expr, var) -> Expr:
    """A literal initial value written with its dtype (`np.int64(0)`), so the carry keeps it."""
    return typed_scalar(expr, var.aval.dtype) if isinstance(var, Literal) else expr


def _emit_while(block, eqn, operands, names):
    p = eqn.params
    comment = block.comment(eqn)
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    cond_consts = [block.named(o, _held(o), comment) for o in operands[:n_cond]]
    body_consts = [block.named(o, _held(o), comment) for o in operands[n_cond:n_cond + n_body]]
    body_invars = p["body_jaxpr"].jaxpr.invars[n_body:]
    carry = _carry_names(block, body_invars, eqn.outvars, names)
    write_assignment(block, carry, [_typed(o, v) for o, v in zip(operands[n_cond + n_body:],
                                                                 eqn.invars[n_cond + n_body:])], comment)
    carry_exprs = [Expr(c) for c in carry]
    header_at = len(block.lines)
    bounded = p["max_iters"] is not None     # `for step in range(n):` testing the condition first
    block.line((f"for {block.names.fresh('step')} in range({p['max_iters']}):" if bounded else "while True:")
               + comment)
    inner = block.nested()
    condition_start = len(block.lines)
    (pred,) = inner.write(p["cond_jaxpr"].jaxpr, cond_consts + carry_exprs)
    if len(block.lines) == condition_start and not bounded:    # the condition is one expression
        block.lines[header_at] = f"{block.indent}while {pred.text}:{comment}"
    else:
        inner.line(f"if not {pred.wrap(8)}:")
        inner.nested().line("break")
    write_assignment(inner, carry, inner.write(p["body_jaxpr"].jaxpr, body_consts + carry_exprs), comment)
    inner.pass_if_empty(header_at + 1)   # `while pred:` over a body that changes nothing
    return carry_exprs


# ---------------------------------------------------------------------------------------
# The step counter


def _counting_carry(eqn) -> tuple[int, int] | None:
    """(k, start) where carry k of a forward scan counts steps: it starts at the integer
    literal `start` and the body's new value is the old one plus 1 (how `fori_loop` with
    static bounds is staged). Then it is the loop variable of `range(start, start + n)`."""
    p = eqn.params
    if p["reverse"]:
        return None
    n_consts, body = p["num_consts"], p["jaxpr"].jaxpr
    producers = {v: e for e in body.eqns for v in e.outvars}
    for k in range(p["num_carry"]):
        init, var, new = eqn.invars[n_consts + k], body.invars[n_consts + k], body.outvars[k]
        step = producers.get(new)
        if (isinstance(init, Literal) and dtypes.is_integer(var.aval.dtype) and step is not None
                and step.primitive is ops.primitive(ops.add) and var in step.invars
                and any(isinstance(v, Literal) and v.value == 1 for v in step.invars)):
            return k, int(init.value)
    return None


def _spelled_as_call(eqn) -> bool:
    """Whether `eqn` is written as a NumPy or runtime function (`np.where(p, a, b)`), which
    returns a NumPy value for Python operands, rather than an operator (`a + b`), which
    keeps Python ints Python ints."""
    text = python_rules[eqn.primitive](eqn, *(Expr(f"x{k}") for k in range(len(eqn.invars)))).text
    return re.match(r"(np|rt)\.\w+\(", text) is not None


def _python_int_values(body: Jaxpr, counter: Var) -> set | None:
    """The body's values that are Python ints (or bools) when it reads the counter as the
    Python int `range` yields, or None where that would compute something else than the
    counter's NumPy integer does. It computes the same where every value derived from the
    bare int meets only operators and functions that type a Python scalar like the array
    beside it (NEP 50: `t < 0`, `t + 7`, `np.where(t < 0, t + 7, t)`, `acc + t * t`) or
    scalar conversions (`np.float64(t)`). An operator on Python ints alone gives a Python
    int, whose readers are checked in turn; a NumPy function on them gives NumPy's default
    integer, right for an int64 counter only. A method (`t.reshape(...)`) or a nested
    statement needs the NumPy integer. A carry that would become a Python int is converted
    where it is assigned (`last = np.int64(t)`)."""
    convert = ops.primitive(ops.convert)
    bare = {counter}
    for eqn in body.eqns:
        if not any(isinstance(v, Var) and v in bare for v in eqn.invars):
            continue
        if eqn.primitive in BARE_SCALAR_OK:
            if all(isinstance(v, Literal) or v in bare for v in eqn.invars):
                if not _spelled_as_call(eqn):
                    bare.update(eqn.outvars)
                elif counter.aval.dtype != np.dtype(int):   # NumPy types Python ints as its default int
                    return None
        elif eqn.primitive is not convert:
            return None
    return bare


# ---------------------------------------------------------------------------------------
# scan


def _inlined_reads(body: Jaxpr, var: Var) -> int:
    """How often `var` is read where its expression can be written in place; a statement
    (a nested loop, an `if`) names its operands first, so a read there counts as many."""
    return (sum(2 if e.primitive in STATEMENT_RULES else 1 for e in body.eqns for v in e.invars if v is var)
            + sum(v is var for v in body.outvars))


def _row(block, x: Expr, var: Var, index: str, body: Jaxpr, comment: str) -> Expr:
    """The row of scanned array `x` this step reads: named by the body's name for it (`x_t`),
    else written where it is read if that is once in an expression, else named after the
    value the buffer holds (`p` for a row of `p_per_step`, `xs` for one of `xs_rows`)."""
    row = Expr(f"{x.text}[{index}]")
    if var.hint:
        return block.named(row, var.hint, comment)
    if _inlined_reads(body, var) <= 1:
        return row
    return block.named(row, _held(x) or re.sub(r"_rows$", "", x.text), comment)


def _buffer_stem(block, outer: Var, var, expr: Expr, producers: dict) -> str:
    """What a stacked output is called: the user's name for the stacked values, else the
    name of the value it holds per step, `p_per_step`."""
    if outer.hint:
        return outer.hint
    if isinstance(var, Literal):
        return "ys"
    if not var.hint and re.fullmatch(r"[A-Za-z_]\w*", expr.text):
        return re.sub(r"_\d+$", "", expr.text) + PER_STEP
    return block.value_name(producers.get(var), var) + PER_STEP


def _summed_in_place(body: Jaxpr, carry_vars: list[Var], source_info) -> tuple[Jaxpr, dict[Var, int]]:
    """The carries the body only adds to, as {the sum's variable: carry position}, and the
    body with each such sum moved up to just after its term is computed, so the term dies
    at once (a sum without a source line of its own, made by transpose, gets its term's, else
    the loop's).
    A carry qualifies where it is an array, the body reads its old value only in
    `old + term` and that sum only as its new value: then no other value can see the
    array change under it."""
    add = ops.primitive(ops.add)
    uses = Counter(v for e in body.eqns for v in e.invars if isinstance(v, Var))
    uses.update(v for v in body.outvars if isinstance(v, Var))
    producers = {v: e for e in body.eqns for v in e.outvars}
    sums = {}
    for k, (old, new) in enumerate(zip(carry_vars, body.outvars)):
        eqn = producers.get(new) if isinstance(new, Var) else None
        if (eqn is not None and eqn.primitive is add and old in eqn.invars and old.aval.shape
                and uses[old] == 1 and uses[new] == 1):
            sums[new] = k
    if not sums:
        return body, sums
    terms = {}
    for new, k in sums.items():
        eqn = producers[new]
        term = next(v for v in eqn.invars if v is not carry_vars[k])
        located = next((info for info in (eqn.source_info, getattr(producers.get(term), "source_info", None))
                        if info is not None and info.line), source_info)
        terms[JaxprEqn(eqn.primitive, eqn.invars, eqn.outvars, eqn.params, located)] = term
    ready = [e for e, term in terms.items() if term not in producers]   # a term the body is given
    eqns = list(ready)
    summed = {producers[new] for new in sums}
    for e in body.eqns:
        if e not in summed:
            eqns.append(e)
            eqns += [s for s, term in terms.items() if term in e.outvars]
    return Jaxpr(body.constvars, body.invars, body.outvars, eqns), sums


def _owned(init: Expr) -> Expr:
    """An initial value the loop may sum into in place: a fresh allocation as it is (it is
    written where it is read, so nothing else holds it), else a copy."""
    call = re.match(r"np\.(full|zeros|ones|empty)\(", init.text)
    if call and _closing_paren(init.text, call.end() - 1) == len(init.text) - 1:
        return init
    return Expr(f"{init.wrap(ATOM)}.copy()")


def _closing_paren(text: str, opening: int) -> int:
    depth = 0
    for at in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        if depth == 0:
            return at
    return -1


def _emit_scan(block, eqn, operands, names):
    p = eqn.params
    if p["unroll"] > 1:
        return block.write_inline(unrolled_scan(eqn).jaxpr, list(operands))
    n_consts, n_carry, length = p["num_consts"], p["num_carry"], p["length"]
    body = p["jaxpr"].jaxpr
    comment = block.comment(eqn)
    carry_vars, x_vars = body.invars[n_consts:n_consts + n_carry], body.invars[n_consts + n_carry:]
    consts = [block.named(o, _held(o), comment) for o in operands[:n_consts]]
    # A loop over range(n) scans np.arange(n); fori_loop counts in a carry.
    counting = next((k for k, o in enumerate(operands[n_consts + n_carry:])
                     if re.fullmatch(rf"np\.arange\({length}(, dtype=np\.int(32|64))?\)", o.text)), None)
    counter_carry, start = (None, 0) if counting is not None else (_counting_carry(eqn) or (None, 0))
    counter = x_vars[counting] if counting is not None else None if counter_carry is None else carry_vars[counter_carry]
    carried = [k for k in range(n_carry) if k != counter_carry]
    xs = [o if k == counting else block.named(o, _held(o), comment)
          for k, o in enumerate(operands[n_consts + n_carry:])]
    carry = _carry_names(block, [carry_vars[k] for k in carried], [eqn.outvars[k] for k in carried],
                         [names[k] for k in carried])
    if counter_carry is not None:   # the body's `i + 1` is the loop's business now
        body = Jaxpr(body.constvars, body.invars, [v for k, v in enumerate(body.outvars) if k != counter_carry],
                     body.eqns)
    body, sums = _summed_in_place(body, [carry_vars[k] for k in carried], eqn.source_info)
    initial = [_typed(operands[n_consts + k], eqn.invars[n_consts + k]) for k in carried]
    for j in sums.values():
        initial[j] = _owned(initial[j])
    write_assignment(block, carry, initial, comment)
    bare = set() if counter is None else _python_int_values(body, counter)
    i = block.names.fresh(counter.hint if bare and counter.hint else "i")
    steps = f"range({length})" if start == 0 else f"range({start}, {start + length})"
    header_at = len(block.lines)
    block.line(f"for {i} in {f'reversed({steps})' if p['reverse'] else steps}:{comment}")
    inner = block.nested()
    index = i if start == 0 else f"{i} {'-' if start > 0 else '+'} {abs(start)}"   # this step's row of xs and ys
    step_value = Expr(i)
    if bare is None:   # the body computes with the counter's NumPy integer: `t = np.int64(i)`
        step_value = inner.named(typed_scalar(step_value, counter.aval.dtype), counter.hint or "counter", comment)
        bare = set()
    carry_exprs = iter(Expr(c) for c in carry)
    slices = [step_value if k == counting else _row(inner, x, v, index, body, comment)
              for k, (x, v) in enumerate(zip(xs, x_vars))]
    results = inner.write(body, consts + [step_value if k == counter_carry else next(carry_exprs)
                                          for k in range(n_carry)] + slices,
                          in_place={new: carry[j] for new, j in sums.items()})
    carry_results = [typed_scalar(r, v.aval.dtype) if isinstance(v, Var) and v in bare else r
                     for r, v in zip(results, body.outvars)][:len(carried)]
    y_results = results[len(carried):]
    producers = {v: e for e in body.eqns for v in e.outvars}
    ys = [name or block.names.fresh(_buffer_stem(inner, outer, var, y, producers))
          for name, outer, var, y in zip(names[n_carry:], eqn.outvars[n_carry:], body.outvars[len(carried):],
                                         y_results)]
    block.lines[header_at:header_at] = [
        f"{block.indent}{name} = np.empty({tuple(v.aval.shape)!r}, dtype={dtype_text(v.aval.dtype)}){comment}"
        for name, v in zip(ys, eqn.outvars[n_carry:])]
    block.buffers.update(ys)
    for name, y in zip(ys, y_results):   # before the carry changes: y may read it
        inner.line(f"{name}[{index}] = {y.text}{comment}")
    write_assignment(inner, carry, carry_results, comment)
    inner.pass_if_empty(header_at + len(ys) + 1)   # (the buffers are allocated above the header)
    final = iter(Expr(c) for c in carry)
    return ([typed_scalar(Expr(str(start + length)), counter.aval.dtype) if k == counter_carry else next(final)
             for k in range(n_carry)] + [Expr(y) for y in ys])


def _emit_while_reverse(block, eqn, operands, names):
    """The backward pass of a while loop with no bound, written with a tape (XLA runs the
    slots' schedule instead; see `checkpoints.while_reverse`): the loop again, each
    step's residuals appended to a list, then the steps last to first."""
    p = eqn.params
    comment = block.comment(eqn)
    n_cond, n_consts = p["num_cond_consts"], p["num_consts"]
    forward, condition = p["forward"].jaxpr, p["condition"].jaxpr
    carry_vars = forward.invars[n_consts:]
    n_primal = len(carry_vars)
    cond_consts = [block.named(o, _held(o), comment) for o in operands[:n_cond]]
    consts = [block.named(o, _held(o), comment) for o in operands[n_cond:n_cond + n_consts]]
    primal = [block.names.fresh(v.hint or "carry") for v in carry_vars]
    write_assignment(block, primal, [_typed(o, v) for o, v in zip(operands[n_cond + n_consts:n_cond + n_consts + n_primal],
                                                                  eqn.invars[n_cond + n_consts:])], comment)
    primal_exprs = [Expr(c) for c in primal]
    # Residuals that read no carry, once: the tape holds only those that change per step.
    once = p["invariant"].jaxpr
    invariant = [block.named(r, block.output_name(once, consts + primal_exprs, v, True), comment)
                 for r, v in zip(block.write(once, consts + primal_exprs), once.outvars)]
    tape = block.names.fresh("tape")
    block.line(f"{tape} = []  # every step's residuals, for the backward pass{comment}")
    header_at = len(block.lines)
    block.line(f"while True:{comment}")
    inner = block.nested()
    (pred,) = inner.write(condition, cond_consts + primal_exprs)
    if len(block.lines) == header_at + 1:    # the condition is one expression
        block.lines[header_at] = f"{block.indent}while {pred.text}:{comment}"
    else:
        inner.line(f"if not {pred.wrap(8)}:")
        inner.nested().line("break")
    outs = inner.write(forward, consts + primal_exprs)
    # The tape holds what changes from step to step; a constant the backward step reads
    # (an operand of the loop) is read where it is.
    fixed = set(forward.invars[:n_consts])
    residuals = [r if isinstance(v, Literal) or v in fixed else
                 inner.named(r, inner.output_name(forward, consts + primal_exprs, v, True) or "residual", comment)
                 for r, v in zip(outs[n_primal:], forward.outvars[n_primal:])]
    taped = [r for r, v in zip(residuals, forward.outvars[n_primal:]) if not (isinstance(v, Literal) or v in fixed)]
    inner.line(f"{tape}.append({_tuple_of(taped) if taped else '()'})")
    write_assignment(inner, primal, outs[:n_primal], comment)
    n_acc = len(eqn.outvars) - (len(operands) - n_cond - n_consts - n_primal)
    results = [name or block.names.fresh(v.hint, "ct") for name, v in zip(names, eqn.outvars)]
    acc, cts = results[:n_acc], results[n_acc:]
    write_assignment(block, acc + cts, [Expr(f"np.zeros({tuple(v.aval.shape)!r}, dtype={dtype_text(v.aval.dtype)})")
                                        for v in eqn.outvars[:n_acc]] + list(operands[len(operands) - len(cts):]),
                     comment)
    targets = ", ".join(r.text for r in taped) if taped else "_"
    block.line(f"for {targets} in reversed({tape}):{comment}")
    body_at = len(block.lines)
    inner = block.nested()
    outs = inner.write(p["transposed"].jaxpr, invariant + residuals + [Expr(c) for c in cts])
    for name, d in zip(acc, outs[:n_acc]):
        inner.line(f"{name} += {d.text}{comment}")
    write_assignment(inner, cts, outs[n_acc:], comment)
    inner.pass_if_empty(body_at)
    block.line(f"del {tape}")
    return [Expr(r) for r in results]


def _tuple_of(exprs: list[Expr]) -> str:
    """`x` for one expression, `(a, b)` for several."""
    return exprs[0].text if len(exprs) == 1 else f"({', '.join(e.text for e in exprs)})"


register_statement(while_loop, _emit_while)
register_statement(scan, _emit_scan)
register_statement(while_reverse, _emit_while_reverse)
