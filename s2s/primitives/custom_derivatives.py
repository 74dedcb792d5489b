"""Call primitives that carry user-defined derivatives: custom_jvp_call, custom_vjp_call
and custom_vjp_lin.

`custom_jvp_call[call, rule]` and `custom_vjp_call[call, rule]` compute their `call` jaxpr;
their difference is how they differentiate. The jvp pass replaces a custom_jvp_call by the
user's jvp function, staged from its source; a custom_vjp_call becomes the user's forward
function plus `custom_vjp_lin`, a linear primitive over the tangents whose transpose is the
user's backward function. After differentiation no call is left for transpose to see.

`rule` is the call site `s2s.custom_derivatives` binds (it lives in the layer above and is
never imported here): `apply_jvp`, `apply_fwd` and `apply_bwd` stage the user's rules,
with call_user, on the values the passes give them. They are staged only when a derivative
is taken, as in JAX.

Emitters inline call bodies (`passes/inline.py`), so generated Python shows the
function's own equations, not an opaque call.
"""
from __future__ import annotations

from s2s.core import eval_jaxpr
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import register as _register_python
from s2s.errors import StagingError
from s2s.passes import inline as _inline, jvp as _jvp, transpose as _transpose
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.staging import Primitive


def call_abstract(*avals, call, **params):
    """The abstract eval of a call primitive: its `call` jaxpr's output types."""
    return list(call.out_avals)


def call_impl(*args, call, **params):
    """The NumPy impl of a call primitive: its `call` jaxpr, run."""
    return eval_jaxpr(call, *args)


custom_jvp_call = Primitive("custom_jvp_call", call_abstract, call_impl, multiple_results=True)
custom_vjp_call = Primitive("custom_vjp_call", call_abstract, call_impl, multiple_results=True)
_inline.register_call(custom_jvp_call)
_inline.register_call(custom_vjp_call)


def _custom_jvp_rule(primals, tangents, *, call, rule):
    """Stages the user's jvp function on the primals and (instantiated) tangents."""
    tangents = [instantiate(t) for t in tangents]
    outs, out_tangents = rule.apply_jvp(primals, tangents)
    return outs, out_tangents


_jvp.register(custom_jvp_call, _custom_jvp_rule)


def _custom_vjp_rule(primals, tangents, *, call, rule):
    """The user's forward function, then a linear custom_vjp_lin over the tangents."""
    outs, residuals = rule.apply_fwd(primals)
    if all(is_zero(t) for t in tangents):
        return outs, [Zero(tangent_aval(o.aval)) for o in outs]
    tangents = [instantiate(t) for t in tangents]
    out_avals = tuple(call.out_avals)
    lin = custom_vjp_lin.bind(*residuals, *tangents, rule=rule, num_residuals=len(residuals),
                              out_avals=out_avals)
    return outs, lin


_jvp.register(custom_vjp_call, _custom_vjp_rule)


def _lin_abstract(*avals, rule, num_residuals, out_avals):
    return list(out_avals)


def _lin_impl(*args, rule, num_residuals, out_avals):
    raise StagingError(
        f"forward-mode differentiation (jvp, linearize, jacfwd) of the custom_vjp function "
        f"{rule.name} is not supported: it only defines a backward rule",
        "use reverse mode (grad, vjp, jacrev), or define the derivative with custom_jvp")


custom_vjp_lin = Primitive("custom_vjp_lin", _lin_abstract, _lin_impl, multiple_results=True)


def _lin_jvp(primals, tangents, **params):
    """Differentiating the backward rule itself (a second derivative through it)."""
    _lin_impl(**params)


def _lin_transpose(cts, *args, rule, num_residuals, out_avals):
    residuals = args[:num_residuals]
    cts = [instantiate(c) for c in cts]
    in_cts = rule.apply_bwd(residuals, cts)
    return [None] * num_residuals + list(in_cts)


_jvp.register(custom_vjp_lin, _lin_jvp)
_transpose.register(custom_vjp_lin, _lin_transpose)


def _emit_lin(eqn, *operands):
    """Only forward mode would ever need to emit (or lower) custom_vjp_lin."""
    _lin_impl(**eqn.params)


# Call primitives are inlined before emission; custom_vjp_lin only runs in reverse mode.
_register_python(custom_vjp_lin, _emit_lin)
_hlo.register(custom_vjp_lin, lambda ctx, eqn, *operands: _emit_lin(eqn))
