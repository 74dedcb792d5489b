"""User-defined derivatives: `custom_jvp` and `custom_vjp`, with JAX's interface.

    @s2s.custom_jvp
    def log1pexp(x):
        return np.log1p(np.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return log1pexp(x), t * (1 - 1 / (1 + np.exp(x)))

Called on NumPy values, the function just runs. Called on staged values, it stages as a
call primitive (`s2s/primitives/custom_derivatives.py`) whose body is the function and
whose derivative is the user's rule, itself staged from source when differentiated.
`nondiff_argnums` are static arguments, passed first to the rules as JAX does.
"""
from __future__ import annotations


from s2s.errors import StagingError, StagingTypeError
from s2s.frontend import Staged
from s2s.frontend.args import aval_of_arg, normalize_argnums
from s2s.frontend.walker import call_user
from s2s.primitives.custom_derivatives import custom_jvp_call, custom_vjp_call
from s2s.staging import Tracer, current_builder
from s2s.transformed import TransformedFunction, staged_or_error
from s2s.tree import tree_flatten, tree_leaves

__all__ = ["custom_jvp", "custom_vjp"]


class _CallSite:
    """One staged call of a custom-derivative function: how to rebuild its arguments.

    Hashable by identity, so it can be a primitive parameter.
    """

    def __init__(self, owner, staged: Staged, args: tuple):
        self.owner = owner
        self.name = owner.name
        self.staged = staged
        self.args = args
        self.residual_tree = None

    def __repr__(self):
        return f"{type(self.owner).__name__}({self.name})"

    def nondiff(self) -> list:
        return [self.args[i] for i in self.owner.nondiff_argnums]

    def primal_args(self, flat: list) -> tuple:
        """The differentiable arguments rebuilt around the staged leaves `flat`."""
        leaves, treedef = tree_flatten(self.args)
        it = iter(flat)
        rebuilt = treedef.unflatten([next(it) if staged else leaf
                                     for leaf, staged in zip(leaves, self.staged.staged_mask)])
        return tuple(a for i, a in enumerate(rebuilt) if i not in self.owner.nondiff_argnums)

    def flat_outputs(self, tree, what: str) -> list:
        leaves, treedef = tree_flatten(tree)
        if treedef != self.staged.out_tree:
            raise StagingTypeError(f"{what} of {self.name} returns structure {treedef}, but the "
                                   f"function returns {self.staged.out_tree}",
                                   "return values with the same structure as the function's output")
        return leaves

    # --- used by the rules in s2s/primitives/custom_derivatives.py -------------------

    def apply_jvp(self, primals: list, tangents: list):
        primal_args, tangent_args = self.primal_args(primals), self.primal_args(tangents)
        owner = self.owner
        if owner.jvp is not None:
            out, out_tangent = call_user(owner.jvp, (*self.nondiff(), primal_args, tangent_args), {})
            return self.flat_outputs(out, "the jvp rule"), self._shaped_like_outputs(
                self.flat_outputs(out_tangent, "the jvp rule"))
        # defjvps: one rule per differentiable argument, jvp_i(t_i, ans, *primals), summed.
        out = self.owner(*self._full_args(primal_args))
        total = None
        for rule, t in zip(owner.jvps, tangent_args):
            if rule is None:
                continue
            term = call_user(rule, (t, out, *primal_args), {})
            total = term if total is None else total + term
        return self.flat_outputs(out, "the function"), self._shaped_like_outputs(
            self.flat_outputs(total, "a defjvps rule"))

    def _shaped_like_outputs(self, tangents: list) -> list:
        """The rule's tangents, each of its output's shape (else JAX's TypeError): one of
        another shape would be broadcast into a wrong derivative."""
        for tangent, aval in zip(tangents, self.staged.closed.out_avals):
            if aval_of_arg(tangent).shape != aval.shape:
                raise StagingTypeError(f"the jvp rule of {self.name} gives a tangent of shape "
                                       f"{aval_of_arg(tangent).shape} for an output of shape {aval.shape}",
                                       "give each output's tangent that output's shape")
        return tangents

    def _full_args(self, primal_args: tuple) -> tuple:
        it = iter(primal_args)
        return tuple(self.args[i] if i in self.owner.nondiff_argnums else next(it)
                     for i in range(len(self.args)))

    def apply_fwd(self, primals: list):
        # fwd takes f's own arguments in f's order (nondiff ones where they are), as in JAX.
        result = call_user(self.owner.fwd, self._full_args(self.primal_args(primals)), {})
        if not (isinstance(result, tuple) and len(result) == 2):
            raise StagingTypeError(f"the fwd rule of {self.name} must return (output, residuals)",
                                   "return a pair: the function's output and what bwd needs")
        out, residuals = result
        res_leaves, self.residual_tree = tree_flatten(residuals)
        return self.flat_outputs(out, "the fwd rule"), res_leaves

    def apply_bwd(self, residual_leaves: list, cts: list) -> list:
        residuals = self.residual_tree.unflatten(residual_leaves)
        ct = self.staged.out_tree.unflatten(cts)
        in_cts = call_user(self.owner.bwd, (*self.nondiff(), residuals, ct), {})
        if not isinstance(in_cts, tuple):
            raise StagingTypeError(f"the bwd rule of {self.name} must return a tuple with one "
                                   "cotangent per differentiable argument", "return `(x_bar,)`")
        nondiff = self.owner.nondiff_argnums
        n_diff = len(self.args) - len(nondiff)
        if len(in_cts) != n_diff:
            raise StagingTypeError(f"the bwd rule of {self.name} returned {len(in_cts)} cotangents "
                                   f"for {n_diff} differentiable arguments",
                                   "return one cotangent per argument (None for none)")
        per_leaf, it = [], iter(in_cts)
        for i, arg in enumerate(self.args):
            n_leaves = len(tree_leaves(arg))
            ct_i = None if i in nondiff else next(it)
            per_leaf += [None] * n_leaves if ct_i is None else tree_leaves(ct_i)
        return [c for c, staged in zip(per_leaf, self.staged.staged_mask) if staged]


class _CustomBase(TransformedFunction):
    """A function with custom derivative rules: called on NumPy values it runs, called on
    staged values it binds one call primitive whose rule (`_CallSite`) applies the user's
    rules. It keeps the function's name, as JAX's does; its rules, given after it is made
    (`defjvp`, `defvjp`), are part of its cache parameters."""

    primitive = None
    keeps_name = True
    rule_names: tuple[str, ...] = ()   # the attributes holding the user's rules

    def __init__(self, fun, nondiff_argnums=()):
        self.nondiff_argnums = normalize_argnums(nondiff_argnums, what="nondiff_argnums")
        super().__init__(fun, type(self).__name__)

    @property
    def fun(self):
        """The function itself (JAX's name for it)."""
        return self.fn

    @property
    def cache_params(self) -> tuple:
        return (self.transform, self.nondiff_argnums, *(getattr(self, name) for name in self.rule_names))

    @property
    def name(self) -> str:
        return getattr(self.fun, "__qualname__", "f")

    def __call__(self, *args):
        if current_builder() is None and not any(isinstance(l, Tracer) for l in tree_leaves(args)):
            return self.fun(*args)   # plain NumPy values: just run it
        self._check_rule()
        staged = staged_or_error(self.fun, args, {}, static_argnums=self.nondiff_argnums)
        self._check_closes_over_nothing_staged(staged)
        site = _CallSite(self, staged, args)
        flat = [l for l, m in zip(tree_leaves(args), staged.staged_mask) if m]
        outs = self.primitive.bind(*flat, call=staged.closed, rule=site)
        return staged.out_tree.unflatten(outs)

    def _check_closes_over_nothing_staged(self, staged: Staged):
        """Refuses a function that reads a staged value of the function around it (a def
        inside a staged function, using that function's `x`): staged into its `call` as a
        constant, the value would be differentiated as if constant, and the user's rules,
        staged when a derivative is taken, would read it after its staging has ended.
        JAX refuses to differentiate such a value too."""
        closed_over = [c for c in staged.closed.consts if isinstance(c, Tracer)]
        if closed_over:
            hint = closed_over[0].variable.hint
            what = f"`{hint}`" if hint else "a value"
            raise StagingError(
                f"{type(self).__name__} function {self.name} reads {what} computed by the function "
                "being staged around it: its rules define no derivative for such a value",
                "pass the value to the function as an argument (listed in nondiff_argnums if "
                "it is not to be differentiated), and to its rules with it")


class custom_jvp(_CustomBase):
    """A function with a user-defined forward-mode derivative (JAX's custom_jvp)."""

    primitive = custom_jvp_call
    rule_names = ("jvp", "jvps")
    jvp = None      # the rule, until defjvp or defjvps gives one
    jvps = None

    def defjvp(self, jvp):
        """`jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)`."""
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        """One rule per differentiable argument: `jvp_i(tangent_i, ans, *primals)`; None for none."""
        self.jvps = jvps

    def _check_rule(self):
        if self.jvp is None and self.jvps is None:
            raise StagingError(f"custom_jvp function {self.name} has no jvp rule",
                               "define one with @f.defjvp or f.defjvps(...)")


class custom_vjp(_CustomBase):
    """A function with a user-defined reverse-mode derivative (JAX's custom_vjp)."""

    primitive = custom_vjp_call
    rule_names = ("fwd", "bwd")
    fwd = None      # the rules, until defvjp gives them
    bwd = None

    def defvjp(self, fwd, bwd):
        """`fwd(*args) -> (out, residuals)`, with f's arguments in f's order;
        `bwd(*nondiff_args, residuals, ct) -> tuple` (one cotangent per other argument)."""
        self.fwd, self.bwd = fwd, bwd

    def _check_rule(self):
        if self.fwd is None:
            raise StagingError(f"custom_vjp function {self.name} has no vjp rule",
                               "define one with f.defvjp(fwd, bwd)")
