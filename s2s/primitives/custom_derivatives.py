"""Call primitives that carry user-defined derivatives: custom_jvp_call, custom_vjp_call
and custom_vjp_lin.

`custom_jvp_call[call, rule]` and `custom_vjp_call[call, rule]` compute their `call` jaxpr;
their difference is how they differentiate. The jvp pass replaces a custom_jvp_call by the
user's jvp function, staged from its source; a custom_vjp_call becomes the user's forward
function plus `custom_vjp_lin`, a linear primitive over the tangents whose transpose is the
user's backward function. After differentiation no call is left for transpose to see.

Forward mode runs what a custom_vjp_lin computes: a rule with a jvp beside its vjp (an
`s2s.autograd.extend` primitive given both, as autograd takes them: `has_forward`,
`apply_lin`) gives it as the lin's `call`, the map from residuals and tangents to the
output's tangents, inlined when emitted and differentiated when differentiated again;
without one (`call` None, JAX's custom_vjp) forward mode is refused.

`rule` is the call site `s2s.custom_derivatives` binds (it lives in the layer above and is
never imported here): `apply_jvp`, `apply_fwd` and `apply_bwd` stage the user's rules,
with call_user, on the values the passes give them. They are staged only when a derivative
is taken, as in JAX.

Emitters inline call bodies (`passes/inline.py`), so generated Python shows the
function's own equations, not an opaque call. Batched, a call stays the same primitive
with its `call` batched and its rules wrapped (`BatchedCallSite`), so what vmap made is
still differentiated by the user's rules.
"""
from __future__ import annotations

from s2s.core import Literal, eval_jaxpr, literal_value
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import register as _register_python
from s2s.errors import StagingError
from s2s.passes import inline as _inline, jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.vmap import ANYWHERE, batch_jaxpr, batched_aval, to_dim
from s2s.primitives import ops
from s2s.staging import JaxprBuilder, Primitive, inline_jaxpr


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


def _for_user_code(values: list) -> list:
    """The values a rule hands the user's functions: a literal operand (a constant the
    passes folded into the equation) as the NumPy scalar it stands for, which user code
    computes with, as it does with any constant."""
    return [literal_value(v) if type(v) is Literal else v for v in values]


def _custom_jvp_rule(primals, tangents, *, call, rule):
    """Stages the user's jvp function on the primals and (instantiated) tangents."""
    tangents = [instantiate(t) for t in tangents]
    outs, out_tangents = rule.apply_jvp(_for_user_code(primals), tangents)
    return outs, out_tangents


_jvp.register(custom_jvp_call, _custom_jvp_rule)


def _custom_vjp_rule(primals, tangents, *, call, rule):
    """The user's forward function, then a linear custom_vjp_lin over the tangents."""
    outs, residuals = rule.apply_fwd(_for_user_code(primals))
    if all(is_zero(t) for t in tangents):
        return outs, [Zero(tangent_aval(o.aval)) for o in outs]
    tangents = [instantiate(t) for t in tangents]
    out_avals = tuple(call.out_avals)
    lin = custom_vjp_lin.bind(*residuals, *tangents, rule=rule, num_residuals=len(residuals),
                              out_avals=out_avals, call=_forward_map(rule, residuals, tangents))
    return outs, lin


_jvp.register(custom_vjp_call, _custom_vjp_rule)


def _forward_map(rule, residuals: list, tangents: list):
    """The jaxpr from residuals and tangents to the output's tangents that a rule with a
    jvp beside its vjp stages (`apply_lin`), or None for a rule without one."""
    if not getattr(rule, "has_forward", False):
        return None
    with JaxprBuilder() as builder:
        args = [builder.new_arg(_vmap.aval_of(x)) for x in (*residuals, *tangents)]
        return builder.build(rule.apply_lin(args[:len(residuals)], args[len(residuals):]))


def _lin_abstract(*avals, rule, num_residuals, out_avals, call):
    return list(out_avals)


def _lin_impl(*args, rule, num_residuals, out_avals, call):
    if call is not None:
        return eval_jaxpr(call, *args)
    _refuse_forward_mode(rule)


def _refuse_forward_mode(rule):
    raise StagingError(
        f"forward-mode differentiation (jvp, linearize, jacfwd) of the custom_vjp function "
        f"{rule.name} is not supported: it is differentiated by its backward rule",
        "use reverse mode (grad, vjp, jacrev), or define the derivative with custom_jvp (an "
        "s2s.autograd.extend primitive: give it a jvp too, with defjvp)")


custom_vjp_lin = Primitive("custom_vjp_lin", _lin_abstract, _lin_impl, multiple_results=True)


def _lin_jvp(primals, tangents, *, rule, call, **params):
    """Forward mode over a custom_vjp_lin left by forward mode: the jvp of its forward map."""
    if call is None:
        _refuse_forward_mode(rule)
    return _jvp.jvp_eqns(call, list(primals), list(tangents))


def _lin_transpose(cts, *args, rule, num_residuals, out_avals, call):
    residuals = args[:num_residuals]
    cts = [instantiate(c) for c in cts]
    in_cts = rule.apply_bwd(_for_user_code(residuals), cts)
    return [None] * num_residuals + list(in_cts)


_jvp.register(custom_vjp_lin, _lin_jvp)
_transpose.register(custom_vjp_lin, _lin_transpose)


def _emit_lin(eqn, *operands):
    """Only forward mode would ever need to emit (or lower) custom_vjp_lin: one with a
    forward map is inlined as a call is, one without is refused."""
    _refuse_forward_mode(eqn.params["rule"])


# Call primitives are inlined before emission; custom_vjp_lin only runs in reverse mode, or
# in forward mode where it has a forward map (`call`), inlined too.
_inline.register_call(custom_vjp_lin)
_register_python(custom_vjp_lin, _emit_lin)
_hlo.register(custom_vjp_lin, lambda ctx, eqn, *operands: _emit_lin(eqn))


# ---------------------------------------------------------------------------------------
# Batching. The batched call keeps its primitive, so it still differentiates by the user's
# rules: its `rule` becomes a `BatchedCallSite`, which stages those rules on one example's
# values (they are written for one) and batches what they stage.


def _batched_apply(fn, avals, args: list, dims: list, axis, out_dims=()) -> tuple[list, list]:
    """`fn` (a function of one example's values returning a list) staged on `avals`,
    batched, and applied to `args` batched at `dims`: its outputs and their dims. The
    first outputs are batched at `out_dims`, the rest wherever their equations put them."""
    with JaxprBuilder() as builder:
        outs = fn(*[builder.new_arg(a) for a in avals])
        per_example = builder.build(outs)
    wanted = list(out_dims) + [ANYWHERE] * (len(outs) - len(out_dims))
    batched, got_dims = batch_jaxpr(per_example, dims, axis, wanted)
    return inline_jaxpr(batched, args), got_dims


class BatchedCallSite:
    """The rules of a batched custom_jvp_call or custom_vjp_call (or of the custom_vjp_lin
    one of them made), applied to batched values.

    `site` is the per-example call site (a `_CallSite` of `s2s.custom_derivatives`, or
    another `BatchedCallSite` under nested vmaps), `in_avals` and `out_avals` one example's
    input and output types, `in_dims` and `out_dims` where the batched call's batches lie.
    Hashable by identity, as a parameter must be.
    """

    def __init__(self, site, axis, in_avals, in_dims, out_avals, out_dims):
        self.site, self.axis, self.name = site, axis, site.name
        self.has_forward = getattr(site, "has_forward", False)
        self.in_avals, self.in_dims = list(in_avals), list(in_dims)
        self.out_avals, self.out_dims = list(out_avals), list(out_dims)
        self.residual_avals = self.residual_dims = None    # known once apply_fwd has run

    def __repr__(self):
        return f"vmap({self.site!r})"

    def apply_jvp(self, primals: list, tangents: list):
        n_in, n_out = len(primals), len(self.out_avals)

        def jvp(*args):
            outs, out_tangents = self.site.apply_jvp(list(args[:n_in]), list(args[n_in:]))
            return list(outs) + list(out_tangents)
        outs, _ = _batched_apply(jvp, self.in_avals + [tangent_aval(a) for a in self.in_avals],
                                 list(primals) + list(tangents), self.in_dims * 2, self.axis, self.out_dims * 2)
        return outs[:n_out], outs[n_out:]

    def apply_fwd(self, primals: list):
        n_out = len(self.out_avals)

        def fwd(*args):
            outs, residuals = self.site.apply_fwd(list(args))
            self.residual_avals = [_vmap.aval_of(r) for r in residuals]
            return list(outs) + list(residuals)
        outs, dims = _batched_apply(fwd, self.in_avals, list(primals), self.in_dims, self.axis, self.out_dims)
        self.residual_dims = dims[n_out:]
        return outs[:n_out], outs[n_out:]

    def apply_lin(self, residuals: list, tangents: list) -> list:
        """The output's tangents (the site's forward map), batched where the outputs are."""
        def lin(*args):
            return list(self.site.apply_lin(list(args[:len(residuals)]), list(args[len(residuals):])))
        outs, _ = _batched_apply(lin, self.residual_avals + [tangent_aval(a) for a in self.in_avals],
                                 list(residuals) + list(tangents), self.residual_dims + self.in_dims,
                                 self.axis, self.out_dims)
        return outs

    def apply_bwd(self, residuals: list, cts: list) -> list:
        """Each input's cotangent (None for none) batched where the input is; summed over
        the batch for an input shared by every example (a weight), which every example's
        cotangent adds to."""
        given = []

        def bwd(*args):
            in_cts = self.site.apply_bwd(list(args[:len(residuals)]), list(args[len(residuals):]))
            given.extend(c is not None for c in in_cts)
            return [c for c in in_cts if c is not None]
        out_tangent_avals = [tangent_aval(a) for a in self.out_avals]
        in_cts, dims = _batched_apply(bwd, self.residual_avals + out_tangent_avals, list(residuals) + list(cts),
                                      self.residual_dims + self.out_dims, self.axis)
        in_cts, dims = iter(in_cts), iter(dims)
        return [_to_input_dim(next(in_cts), next(dims), want, self.axis) if has else None
                for has, want in zip(given, self.in_dims)]


def _to_input_dim(ct, dim, want, axis):
    """A cotangent batched at `dim` moved where its input's batch is (`want`), or summed
    over the batch when the input is shared by every example."""
    if want is None:
        return ct if dim is None else ops.reduce_sum(ct, (dim,))
    return to_dim(ct, dim, want, axis.size)


def _call_batch(primitive: Primitive):
    """The batching rule of a custom-derivative call: its `call` batched with every output
    batched (where it falls, else at 0: the user's rules need not keep an output that
    happens not to vary unbatched), its rules wrapped to match."""
    def rule(axis, args, dims, *, call, rule):
        _, out_dims = batch_jaxpr(call, dims, axis)
        out_dims = [0 if d is None else d for d in out_dims]
        batched_call, _ = batch_jaxpr(call, dims, axis, out_dims)
        site = BatchedCallSite(rule, axis, call.in_avals, dims, call.out_avals, out_dims)
        return primitive.bind(*args, call=batched_call, rule=site), out_dims
    _vmap.register(primitive, rule)


def _lin_batch(axis, args, dims, *, rule, num_residuals, out_avals, call):
    """A custom_vjp_lin with every output batched at 0; its transpose runs the user's
    backward rule per example through a `BatchedCallSite`, its forward map is batched."""
    example_avals = [_vmap.example_aval(_vmap.aval_of(x), d) for x, d in zip(args, dims)]
    out_dims = [0] * len(out_avals)
    site = BatchedCallSite(rule, axis, example_avals[num_residuals:], dims[num_residuals:], out_avals, out_dims)
    site.residual_avals, site.residual_dims = example_avals[:num_residuals], list(dims[:num_residuals])
    batched_out = tuple(batched_aval(a, 0, axis.size) for a in out_avals)
    batched_call = None if call is None else batch_jaxpr(call, dims, axis, out_dims)[0]
    return custom_vjp_lin.bind(*args, rule=site, num_residuals=num_residuals, out_avals=batched_out,
                               call=batched_call), out_dims


_call_batch(custom_jvp_call)
_call_batch(custom_vjp_call)
_vmap.register(custom_vjp_lin, _lin_batch)
