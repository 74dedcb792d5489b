"""autograd's extension API (`autograd.extend`), as s2s custom rules.

    from s2s.autograd.extend import primitive, defvjp

    @primitive
    def logsumexp(x):
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    defvjp(logsumexp, lambda ans, x: lambda g: g * np.exp(x - ans))

`primitive`, `defvjp`, `defjvp`, `defvjp_argnum(s)` and `defjvp_argnum(s)` take what
autograd's take and mean what they mean there: a vjp maker `vjpmaker(ans, *args, **kwargs)`
returns `g -> cotangent` of its argument (None in place of a maker: that argument's is
zero), a jvp maker `jvpmaker(g, ans, *args, **kwargs)` the output's tangent for the
argument's tangent `g` (None: zero; "same": the primitive itself applied to `g`, for a
function linear in that argument). As in autograd the derivative is taken with respect to
the positional arguments; keyword arguments are passed to the makers as they are and get
none.

Called on NumPy values, a primitive just runs. Called on staged values, it binds one of
s2s's custom-derivative calls (`s2s/primitives/custom_derivatives.py`) whose body is the
function and whose rule is a `_RuleSite` applying the makers, staged from their source
only when a derivative is taken (as JAX's custom rules are). With vjps it is a
`custom_vjp_call`: reverse mode (grad, vjp, jacrev) runs the vjps, and forward mode runs
the jvps given beside them (the custom_vjp_lin's forward map), or is refused without
any, as autograd refuses it. With jvps alone it is a `custom_jvp_call`: forward mode runs
them, and reverse mode transposes them (autograd would refuse). A vjp reads the output
as the primitive's own (the forward pass calls the primitive again), so its derivative is
the rule's too, to any order. vmap batches what the rules stage, and jit and the emitted
module run it. A rule's output of the wrong structure or shape is an error at the
primitive's call.

The same translation honours the rules a program registered with autograd itself, for its
own `autograd.extend.primitive`s: the front end meets one in staged code and asks
`translate_autograd_primitive` (installed below) what it stages; autograd's tables
(`autograd.core.primitive_vjps`, `primitive_jvps`) are read where the program put them,
never imported. Rules made with `defvjp`, `defjvp` and their `_argnum` forms are read
from the closures autograd keeps them in; a rule s2s cannot read or stage (one that runs
autograd's own tracing) is refused at the call with what to write instead. autograd's own
primitives are written with its tracing too: those s2s has its own versions of
(`autograd.scipy.signal.convolve`, `autograd.misc.fixed_points.fixed_point`) stage as
those, the rest are refused.
"""
from __future__ import annotations

import itertools
import operator
import os
import sys
import traceback
import weakref

import numpy as np

from s2s.autograd.misc.fixed_points import fixed_point
from s2s.autograd.scipy.signal import convolve
from s2s.errors import S2SError, ShapeError, StagingError, UnsupportedFunctionError, api_boundary
from s2s.frontend.args import aval_of_arg
from s2s.frontend.autograd_calls import translate_autograd_primitives
from s2s.frontend.guards import record_cached_call
from s2s.frontend.walker import call_user
from s2s.passes.tangents import Zero, tangent_aval
from s2s.primitives.custom_derivatives import custom_jvp_call, custom_vjp_call
from s2s.source_info import UNKNOWN
from s2s.staging import JaxprBuilder, Tracer, current_builder
from s2s.transformed import TransformedFunction
from s2s.tree import tree_flatten, tree_leaves, tree_map

__all__ = ["defjvp", "defjvp_argnum", "defjvp_argnums", "defvjp", "defvjp_argnum", "defvjp_argnums",
           "primitive"]


class primitive(TransformedFunction):
    """A function differentiated by the rules given to it (autograd's `@primitive`).

    `vjp_rule` and `jvp_rule` follow autograd's own protocol (what its `defvjp_argnums`
    and `defjvp_argnums` store): `vjp_rule(argnums, ans, args, kwargs)` returns
    `g -> cotangents` of the arguments `argnums`, `jvp_rule(argnums, tangents, ans, args,
    kwargs)` the output's tangent; the `def*` functions below build them from makers."""

    keeps_name = True
    vjp_rule = None
    jvp_rule = None
    from_autograd = False   # whether the rules are the ones a program gave autograd

    def __init__(self, fun):
        super().__init__(fun, "primitive")

    @property
    def fun(self):
        """The function itself (autograd's name for it)."""
        return self.fn

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", "f")

    @property
    def cache_params(self) -> tuple:
        return (self.transform, self.vjp_rule, self.jvp_rule)

    def __call__(self, *args, **kwargs):
        if current_builder() is None and not any(isinstance(l, Tracer) for l in tree_leaves((args, kwargs))):
            return self.fun(*args, **kwargs)   # plain NumPy values: just run it
        # A derivative taken from this staging runs these rules: new ones stage it again.
        record_cached_call(_rules_of, (self,), {}, _rules_of(self))
        return _RuleSite(self, args, kwargs).bind()


def _rules_of(prim: primitive) -> tuple:
    return prim.vjp_rule, prim.jvp_rule


class _RuleSite:
    """One staged call of a primitive, and its rules applied to the values the passes give
    (the `rule` a custom-derivative call carries: `apply_fwd`, `apply_bwd`, `apply_jvp`).

    The staged leaves of the call's arguments are the call's operands; the other leaves
    (Python ints, functions, constant arrays) are kept and given to the rules as they are.
    Hashable by identity, as a parameter must be."""

    def __init__(self, prim: primitive, args: tuple, kwargs: dict):
        self.prim, self.name = prim, prim.name
        self.leaves, self.tree = tree_flatten((args, kwargs))
        self.staged = [isinstance(leaf, Tracer) for leaf in self.leaves]
        where = current_builder().source_info   # the call's line, where a rule's mistake is shown
        self.where = None if where is UNKNOWN else where
        self.out_tree = None
        # The positional arguments holding staged inexact leaves: those differentiated
        # (autograd's argnums), each with the indices of its leaves.
        self.argnums, self.arg_leaves, start = [], [], 0
        for i, arg in enumerate(args):
            count = len(tree_leaves(arg))
            self.arg_leaves.append(range(start, start + count))
            if any(self.staged[j] and np.issubdtype(self.leaves[j].aval.dtype, np.inexact)
                   for j in self.arg_leaves[i]):
                self.argnums.append(i)
            start += count

    def __repr__(self):
        return f"primitive({self.name})"

    def arguments(self, operands) -> tuple[tuple, dict]:
        """The call's (args, kwargs) with its staged leaves replaced by `operands`."""
        it = iter(operands)
        args, kwargs = self.tree.unflatten([next(it) if s else leaf for leaf, s in zip(self.leaves, self.staged)])
        return tuple(args), kwargs

    def bind(self):
        operands = [leaf for leaf, s in zip(self.leaves, self.staged) if s]
        with JaxprBuilder() as builder:
            inner = [builder.new_arg(aval_of_arg(x), x.variable.hint) for x in operands]
            args, kwargs = self.arguments(inner)
            out_leaves, self.out_tree = tree_flatten(call_user(self.prim.fun, args, kwargs))
            body = builder.build(out_leaves)
        by_jvps = self.prim.jvp_rule is not None and self.prim.vjp_rule is None
        call = custom_jvp_call if by_jvps else custom_vjp_call
        return self.out_tree.unflatten(call.bind(*operands, call=body, rule=self))

    # --- the rules, as s2s/primitives/custom_derivatives.py applies them ----------------

    def apply_fwd(self, primals: list):
        """The output (a call of the primitive again, so a derivative of it is the rule's
        too), with the operands and the output as residuals."""
        args, kwargs = self.arguments(primals)
        outs = tree_leaves(self.prim(*args, **kwargs))
        return outs, list(primals) + outs

    def apply_bwd(self, residuals: list, cts: list) -> list:
        n = sum(self.staged)
        args, kwargs = self.arguments(residuals[:n])
        ans, g = self.out_tree.unflatten(residuals[n:]), self.out_tree.unflatten(cts)
        rule = self.prim.vjp_rule
        if rule is None:
            raise StagingError(f"{self.name} has no vjp, so it cannot be differentiated in reverse mode",
                               f"give it one with defvjp({self.name}, vjpmaker) before taking the gradient",
                               self.where)
        with _RuleStaging(self, "vjp"):
            vjp = call_user(rule, (tuple(self.argnums), ans, args, kwargs), {})
            arg_cts = list(call_user(vjp, (g,), {}))
            if len(arg_cts) != len(self.argnums):
                raise StagingError(f"the vjp of {self.name} returns {len(arg_cts)} cotangents for the "
                                   f"{len(self.argnums)} arguments {tuple(self.argnums)} it is asked for",
                                   "return one cotangent per argument in argnums")
            per_leaf = [None] * len(self.leaves)
            for argnum, ct in zip(self.argnums, arg_cts):
                if ct is not None:
                    matched = self._matched(ct, args[argnum], "vjp", f"argument {argnum}")
                    for j, leaf_ct in zip(self.arg_leaves[argnum], matched):
                        per_leaf[j] = leaf_ct
        return [ct for ct, s in zip(per_leaf, self.staged) if s]

    @property
    def has_forward(self) -> bool:
        """Whether forward mode has a rule: the jvps, given beside the vjps (`apply_lin`)."""
        return self.prim.jvp_rule is not None

    def apply_jvp(self, primals: list, tangents: list):
        args, kwargs = self.arguments(primals)
        ans = self.prim(*args, **kwargs)
        return tree_leaves(ans), self._output_tangents(args, kwargs, ans, tangents)

    def apply_lin(self, residuals: list, tangents: list) -> list:
        """The output's tangents from the residuals `apply_fwd` made (forward mode of a
        primitive with vjps and jvps)."""
        n = sum(self.staged)
        args, kwargs = self.arguments(residuals[:n])
        return self._output_tangents(args, kwargs, self.out_tree.unflatten(residuals[n:]), tangents)

    def _output_tangents(self, args: tuple, kwargs: dict, ans, tangents: list) -> list:
        """The jvps applied to the tangents of the staged leaves (zero for the other
        numbers of an argument differentiated)."""
        it = iter(tangents)
        per_leaf = [next(it) if s else None for s in self.staged]
        arg_trees = self.tree.children[0].children
        gs = [arg_trees[i].unflatten([per_leaf[j] if self.staged[j] else _static_tangent(self.leaves[j])
                                      for j in self.arg_leaves[i]]) for i in self.argnums]
        with _RuleStaging(self, "jvp"):
            out_tangent = call_user(self.prim.jvp_rule, (tuple(self.argnums), gs, ans, args, kwargs), {})
            if out_tangent is None:   # no argument's jvp contributes: the tangent is zero
                out_tangent = tree_map(lambda leaf: call_user(np.zeros_like, (leaf,), {}), ans)
            return self._matched(out_tangent, ans, "jvp", "the output")

    def _matched(self, derivative, value, kind: str, what: str) -> list:
        """The leaves of the `kind` rule's cotangent or tangent of `value` (the argument or
        output `what`), checked against its structure and shapes, in its tangent's dtypes."""
        leaves, tree = tree_flatten(derivative)
        value_leaves, value_tree = tree_flatten(value)
        if tree != value_tree:
            raise StagingError(f"the {kind} of {self.name} returns {tree} for {what}, which is {value_tree}",
                               f"return a value with the structure of {what}")
        matched = []
        for leaf, of in zip(leaves, value_leaves):
            want = tangent_aval(of.aval) if isinstance(of, Tracer) else None
            if want is None or not np.issubdtype(want.dtype, np.inexact):   # a constant, an integer
                matched.append(Zero(want) if kind == "jvp" else None)   # (an output is always staged)
                continue
            got = aval_of_arg(leaf) if isinstance(leaf, (Tracer, np.ndarray, np.generic, float, int, complex)) else None
            if got is None or got.shape != want.shape:
                raise ShapeError(
                    f"the {kind} of {self.name} returns {'shape ' + str(got.shape) if got else type(leaf).__name__} "
                    f"for {what}, which has shape {want.shape}",
                    "return an array of its shape (sum a broadcast cotangent over the axes broadcast)")
            matched.append(leaf if got.dtype == want.dtype else call_user(np.asarray, (leaf,), {"dtype": want.dtype}))
        return matched


class _RuleStaging:
    """Around the staging of a rule and the checks of what it returns. An error in the
    user's code keeps its own line, one with no line (a check's) is shown at the
    primitive's call; an error in autograd's own code, which a rule autograd was given may
    run (its tracing, as `autograd.misc.fixed_points` does, or its vspaces), is a refusal
    at the call with what to write instead."""

    def __init__(self, site: _RuleSite, kind: str):
        self.site, self.kind = site, kind

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if isinstance(error, S2SError) and self.site.where is not None:
            error.at(self.site.where)
        if not (self.site.prim.from_autograd and isinstance(error, Exception) and _raised_in_autograd(error)):
            return False
        name = self.site.name
        what = error.what if isinstance(error, S2SError) else f"{type(error).__name__}: {error}"
        what = what if len(what) <= 160 else what[:157] + "..."
        raise UnsupportedFunctionError(
            f"s2s cannot stage the {self.kind} autograd has for the primitive {name}: it runs autograd's "
            f"own code, which failed on s2s's staged values ({what})",
            f"define {name} with s2s.autograd.extend.primitive and give its rule with "
            f"s2s.autograd.extend.def{self.kind} (autograd's signatures), written with NumPy "
            "and s2s's transforms", self.site.where) from error


def _raised_in_autograd(error: Exception) -> bool:
    """Whether `error` comes from autograd's own code: staged from a file of autograd's,
    or raised by it run as Python (s2s runs an installed library's code as it is; the
    walker keeps such an exception as the `original` of its error)."""
    package = sys.modules.get("autograd")
    if package is None or not getattr(package, "__file__", None):
        return False
    folder = os.path.dirname(package.__file__) + os.sep
    where = getattr(error, "where", None)
    if where is not None and where.file.startswith(folder):
        return True
    raised = getattr(error, "original", None) if isinstance(error, S2SError) else error
    frames = traceback.extract_tb(raised.__traceback__) if isinstance(raised, BaseException) else []
    return any(frame.filename.startswith(folder) for frame in frames)


def _static_tangent(leaf):
    """The tangent of a leaf that is not staged, in an argument differentiated: a number's
    is zero; anything else (a function, None) is given as it is."""
    if isinstance(leaf, (np.ndarray, np.generic, float, int, complex)):
        return np.zeros(np.shape(leaf), np.result_type(leaf, 0.0))
    return leaf


# ---------------------------------------------------------------------------------------
# Rules from makers: autograd's protocol (`vjp_rule`, `jvp_rule` above) built from what
# defvjp, defvjp_argnum, defjvp and defjvp_argnum are given. Each calls the makers with
# call_user, which stages their source.


class _VjpsByArgument:
    """defvjp's rule: `makers[argnum](ans, *args, **kwargs)` is `g -> cotangent` (None for
    a zero one)."""

    def __init__(self, name: str, makers: dict):
        self.name, self.makers = name, makers

    def __call__(self, argnums, ans, args, kwargs):
        vjps = [_maker(self, i) for i in argnums]
        vjps = [None if m is None else call_user(m, (ans, *args), kwargs) for m in vjps]
        return lambda g: [None if vjp is None else call_user(vjp, (g,), {}) for vjp in vjps]


class _VjpsByArgnum:
    """defvjp_argnum's rule: `maker(argnum, ans, args, kwargs)` is `g -> cotangent`."""

    def __init__(self, maker):
        self.maker = maker

    def __call__(self, argnums, ans, args, kwargs):
        vjps = [call_user(self.maker, (i, ans, args, kwargs), {}) for i in argnums]
        return lambda g: [call_user(vjp, (g,), {}) for vjp in vjps]


class _JvpsByArgument:
    """defjvp's rule: the sum over the arguments of `makers[argnum](g, ans, *args,
    **kwargs)` (None: zero; "same": the primitive applied to `g` in that argument's place)."""

    def __init__(self, prim: primitive, makers: dict):
        self.prim, self.name, self.makers = prim, prim.name, makers

    def __call__(self, argnums, gs, ans, args, kwargs):
        terms = []
        for i, g in zip(argnums, gs):
            maker = _maker(self, i)
            if maker == "same":
                terms.append(self.prim(*args[:i], g, *args[i + 1:], **kwargs))
            elif maker is not None:
                terms.append(call_user(maker, (g, ans, *args), kwargs))
        return _tree_sum(terms)


class _JvpsByArgnum:
    """defjvp_argnum's rule: the sum over the arguments of `maker(argnum, g, ans, args, kwargs)`."""

    def __init__(self, maker):
        self.maker = maker

    def __call__(self, argnums, gs, ans, args, kwargs):
        return _tree_sum([call_user(self.maker, (i, g, ans, args, kwargs), {}) for i, g in zip(argnums, gs)])


def _maker(rule, argnum: int):
    if argnum not in rule.makers:
        raise StagingError(f"{rule.name} has no rule for its argument {argnum}, which is differentiated",
                           f"give one maker per positional argument (None for one without a derivative), "
                           f"or pass argnums=")
    return rule.makers[argnum]


def _tree_sum(terms: list):
    """The sum of tangents of one output (None for none)."""
    total = None
    for term in terms:
        total = term if total is None else tree_map(operator.add, total, term)
    return total


def _checked(prim, what: str) -> primitive:
    if not isinstance(prim, primitive):
        kind = "an autograd primitive" if getattr(prim, "_is_autograd_primitive", False) else \
            f"a {type(prim).__name__}"
        raise StagingError(f"{what} needs a function made with s2s.autograd.extend.primitive, not {kind}",
                           "decorate the function with @primitive from s2s.autograd.extend (or register "
                           "the rule with autograd's own, for a primitive of autograd's)")
    return prim


def _makers(prim: primitive, makers: tuple, argnums, what: str) -> dict:
    found = dict(zip(itertools.count() if argnums is None else argnums, makers))
    for i, maker in found.items():
        if not (maker is None or callable(maker) or (what == "defjvp" and isinstance(maker, str) and maker == "same")):
            raise StagingError(f"{what}({prim.name}, ...) got {maker!r} for argument {i}, which is not a function",
                               "give a function (None for an argument without a derivative)")
    return found


@api_boundary
def defvjp(prim, *vjpmakers, argnums=None) -> None:
    """Gives `prim` one vjp maker per positional argument (or for those in `argnums`):
    `vjpmaker(ans, *args, **kwargs) -> (g -> cotangent)`, None for none."""
    prim = _checked(prim, "defvjp")
    prim.vjp_rule = _VjpsByArgument(prim.name, _makers(prim, vjpmakers, argnums, "defvjp"))


@api_boundary
def defvjp_argnum(prim, vjpmaker) -> None:
    """Gives `prim` one vjp maker for every argument: `vjpmaker(argnum, ans, args, kwargs)
    -> (g -> cotangent)`."""
    _checked(prim, "defvjp_argnum").vjp_rule = _VjpsByArgnum(vjpmaker)


@api_boundary
def defvjp_argnums(prim, vjpmaker) -> None:
    """Gives `prim` its vjp as autograd stores it: `vjpmaker(argnums, ans, args, kwargs)
    -> (g -> the cotangents of argnums)`."""
    _checked(prim, "defvjp_argnums").vjp_rule = vjpmaker


@api_boundary
def defjvp(prim, *jvpmakers, argnums=None) -> None:
    """Gives `prim` one jvp maker per positional argument (or for those in `argnums`):
    `jvpmaker(g, ans, *args, **kwargs) -> output tangent`, None for none, "same" where
    the primitive is linear in the argument."""
    prim = _checked(prim, "defjvp")
    prim.jvp_rule = _JvpsByArgument(prim, _makers(prim, jvpmakers, argnums, "defjvp"))


@api_boundary
def defjvp_argnum(prim, jvpmaker) -> None:
    """Gives `prim` one jvp maker for every argument: `jvpmaker(argnum, g, ans, args,
    kwargs) -> output tangent` (the terms of the arguments differentiated are summed)."""
    _checked(prim, "defjvp_argnum").jvp_rule = _JvpsByArgnum(jvpmaker)


@api_boundary
def defjvp_argnums(prim, jvpmaker) -> None:
    """Gives `prim` its jvp as autograd stores it: `jvpmaker(argnums, tangents, ans, args,
    kwargs) -> output tangent`."""
    _checked(prim, "defjvp_argnums").jvp_rule = jvpmaker


# ---------------------------------------------------------------------------------------
# A program's own autograd primitives, met in staged code (`s2s/frontend/autograd_calls.py`).

# autograd's primitive -> (its vjp and jvp as autograd held them, the s2s primitive made)
_translated: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# autograd's own primitives (by the module and name of the function they wrap) -> s2s's
# versions of them, written with NumPy and s2s's transforms.
_S2S_VERSIONS = {
    ("autograd.scipy.signal", "convolve"): convolve,
    ("autograd.misc.fixed_points", "fixed_point"): fixed_point,
}


def translate_autograd_primitive(wrapped):
    """What a call of autograd's primitive `wrapped` stages as: s2s's version of one of
    autograd's own, or an s2s primitive of the function it wraps, with the rules autograd
    holds for it (read again when autograd is given new ones)."""
    own = _S2S_VERSIONS.get((getattr(wrapped.fun, "__module__", None), getattr(wrapped.fun, "__qualname__", None)))
    if own is not None:
        return own
    core = sys.modules.get("autograd.core")
    vjp = core.primitive_vjps.get(wrapped) if core is not None else None
    jvp = core.primitive_jvps.get(wrapped) if core is not None else None
    known = _translated.get(wrapped)
    if known is not None and known[0] is vjp and known[1] is jvp:
        return _guarded(wrapped, known[2])
    module = getattr(wrapped.fun, "__module__", None) or ""
    if module.startswith("autograd."):
        raise UnsupportedFunctionError(
            f"{module}.{wrapped.__name__} is a primitive of autograd's own, written with autograd's "
            "tracing (its body or its rules), which s2s does not stage",
            f"write {wrapped.__name__} with s2s.autograd.extend.primitive and defvjp (autograd's "
            "signatures), in NumPy and s2s's transforms (s2s.vjp in place of make_vjp)")
    prim = primitive(wrapped.fun)
    prim.from_autograd = True
    prim.vjp_rule = None if vjp is None else _autograd_vjp(prim, vjp)
    prim.jvp_rule = None if jvp is None else _autograd_jvp(prim, jvp)
    _translated[wrapped] = (vjp, jvp, prim)
    return _guarded(wrapped, prim)


def _guarded(wrapped, prim: primitive) -> primitive:
    """`prim`, with the staging in progress guarded on it: rules given to autograd for
    `wrapped` afterwards make another, and the staging is done again."""
    record_cached_call(translate_autograd_primitive, (wrapped,), {}, prim)
    return prim


def _autograd_vjp(prim: primitive, rule):
    """autograd's vjp rule for `prim` as one s2s stages: the makers `defvjp` and
    `defvjp_argnum` keep in their closure, or a `defvjp_argnums` rule of the program's own.
    Any other (autograd's own) is refused: staging it would run autograd's internals."""
    made_by = _autograd_closure(rule)
    if made_by == "defvjp":
        return _VjpsByArgument(prim.name, {i: None if _is_autograd_zero(m, "translate_vjp") else m
                                           for i, m in _closure_value(rule, "vjps_dict").items()})
    if made_by == "defvjp_argnum":
        return _VjpsByArgnum(_closure_value(rule, "vjpmaker"))
    return _own_rule(prim, rule, "vjp")


def _autograd_jvp(prim: primitive, rule):
    """autograd's jvp rule for `prim` as one s2s stages (see `_autograd_vjp`); autograd's
    zero jvp (a maker given as None) is None, its "same" jvp "same"."""
    made_by = _autograd_closure(rule)
    if made_by == "defjvp":
        return _JvpsByArgument(prim, {i: _autograd_jvp_maker(m) for i, m in _closure_value(rule, "jvps_dict").items()})
    if made_by == "defjvp_argnum":
        return _JvpsByArgnum(_closure_value(rule, "jvpmaker"))
    return _own_rule(prim, rule, "jvp")


def _autograd_jvp_maker(maker):
    if getattr(maker, "__qualname__", None) == "translate_jvp.<locals>.<lambda>" and \
            getattr(maker, "__module__", None) == "autograd.core":
        return None if _is_autograd_zero(maker, "translate_jvp") else "same"
    return maker


def _own_rule(prim: primitive, rule, kind: str):
    if (getattr(rule, "__module__", None) or "").startswith("autograd."):
        raise UnsupportedFunctionError(
            f"the {kind} autograd has for the primitive {prim.name} is kept in a form s2s cannot read",
            f"define {prim.name} with s2s.autograd.extend.primitive and give its rule with "
            f"s2s.autograd.extend.def{kind} (autograd's signatures)")
    return rule


def _autograd_closure(rule) -> str | None:
    """Which of autograd's functions made `rule` ("defvjp", "defjvp_argnum" ...), or None."""
    if getattr(rule, "__module__", None) != "autograd.core" or rule.__closure__ is None:
        return None
    made_by, _, local = rule.__qualname__.partition(".<locals>.")
    return made_by if local in ("vjp_argnums", "jvp_argnums") else None


def _closure_value(fn, name: str):
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def _is_autograd_zero(maker, translator: str) -> bool:
    """Whether `maker` is the zero rule autograd's `translator` makes of a maker given as
    None (it builds zeros with autograd's vspace)."""
    if getattr(maker, "__qualname__", None) != f"{translator}.<locals>.<lambda>":
        return False
    codes, names = [maker.__code__], set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return "vspace" in names


translate_autograd_primitives(translate_autograd_primitive)
