"""Rematerialization (gradient checkpointing): `checkpoint` (alias `remat`), the policies
that say what reverse mode saves (`checkpoint_policies`), `checkpoint_name`, and
`print_saved_residuals`, with JAX's interface.

    @s2s.checkpoint(policy=s2s.checkpoint_policies.dots_saveable)
    def block(h, W1, W2):
        return np.tanh(np.tanh(h @ W1) @ W2)

Called on NumPy values, a checkpointed function just runs. Called on staged values (in a
function that is differentiated, jitted or emitted, in a scan body, a cond branch, another
checkpoint), its body is staged once into a `remat` equation
(`s2s/primitives/remat.py`), whose rules make reverse mode save only what the policy
saves and recompute the rest in the backward pass. The default policy saves nothing but
the function's inputs.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable, Iterable, Sequence

from s2s import dtypes
from s2s.autodiff import vjp_parts
from s2s.transformed import TransformedFunction, staged_or_error
from s2s.errors import StagingError, StagingTypeError, api_boundary
from s2s.frontend.args import normalize_argnums
from s2s.frontend.structured import Direct, StagedBody, param_names
from s2s.frontend.walker import call_user
from s2s.primitives.linalg import dot_general
from s2s.primitives.remat import Policy, bind_remat, name_p, nothing_saveable
from s2s.staging import Tracer, current_builder
from s2s.tree import tree_leaves, tree_map

__all__ = ["checkpoint", "checkpoint_name", "checkpoint_policies", "print_saved_residuals", "remat"]


# ---------------------------------------------------------------------------------------
# Policies: `policy(primitive, *input_avals, **params) -> bool`, True to save what the
# equation computes (see s2s/primitives/remat.py).


everything_saveable = Policy(lambda primitive, *avals, **params: True, "everything_saveable")
dots_saveable = Policy(lambda primitive, *avals, **params: primitive is dot_general, "dots_saveable")


def _dot_without_batch_dims(primitive, *avals, **params) -> bool:
    if primitive is not dot_general:
        return False
    (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
    return not lhs_batch and not rhs_batch


dots_with_no_batch_dims_saveable = Policy(_dot_without_batch_dims, "dots_with_no_batch_dims_saveable")


def _names_text(names) -> str:
    return ", ".join(map(repr, names))


def save_only_these_names(*names) -> Policy:
    """Saves only the values tagged with one of `names` by `checkpoint_name`."""
    wanted = frozenset(names)
    return Policy(lambda primitive, *avals, **params: primitive is name_p and params["name"] in wanted,
                   f"save_only_these_names({_names_text(names)})")


def save_anything_except_these_names(*names) -> Policy:
    """Saves everything but the values tagged with one of `names`."""
    refused = frozenset(names)
    return Policy(lambda primitive, *avals, **params: primitive is not name_p or params["name"] not in refused,
                   f"save_anything_except_these_names({_names_text(names)})")


def save_any_names_but_these(*names) -> Policy:
    """Saves only the values tagged by `checkpoint_name`, but not those tagged with one of
    `names` (JAX's meaning: unlike save_anything_except_these_names, nothing untagged)."""
    refused = frozenset(names)
    return Policy(lambda primitive, *avals, **params: primitive is name_p and params["name"] not in refused,
                   f"save_any_names_but_these({_names_text(names)})")


def save_from_both_policies(first, second) -> Policy:
    """Saves what either policy saves."""
    for policy in (first, second):
        _check_policy(policy)
    return Policy(lambda *args, **params: first(*args, **params) or second(*args, **params),
                   f"save_from_both_policies({first!r}, {second!r})")


# JAX's names, its older aliases included (`checkpoint_dots`,
# `checkpoint_dots_with_no_batch_dims`), so code written for jax.checkpoint_policies runs as
# written. (JAX's offloading policies have no counterpart: s2s has no host memory space.)
checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable, nothing_saveable=nothing_saveable, dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable, dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable, save_only_these_names=save_only_these_names,
    save_anything_except_these_names=save_anything_except_these_names,
    save_any_names_but_these=save_any_names_but_these, save_from_both_policies=save_from_both_policies)


def _check_policy(policy) -> None:
    if not callable(policy):
        raise StagingTypeError(f"a checkpoint policy must be callable, got {type(policy).__name__} {policy!r}",
                               "pass one of s2s.checkpoint_policies (e.g. dots_saveable), or a function "
                               "policy(primitive, *avals, **params) -> bool that says what to save")


# ---------------------------------------------------------------------------------------
# checkpoint


class Checkpointed(TransformedFunction):
    """`checkpoint(fn, ...)`: called like `fn`. Staged, it binds one `remat` around `fn`'s
    body; on NumPy values it runs `fn`."""

    def __init__(self, fn, policy, prevent_cse: bool, static_argnums: tuple[int, ...]):
        super().__init__(fn, "checkpoint", (policy, prevent_cse, static_argnums))
        self.policy, self.prevent_cse, self.static_argnums = policy, prevent_cse, static_argnums

    def __call__(self, *args, **kwargs):
        if current_builder() is None and not any(isinstance(l, Tracer) for l in tree_leaves((args, kwargs))):
            return self.fn(*args, **kwargs)
        # Python ints and bools are static, as grad, jit and vmap take them (`range(degree + 1)`).
        static = self._static_positions(len(args)) | {i for i, a in enumerate(args) if type(a) in (int, bool)}
        dynamic = [i for i in range(len(args)) if i not in static]

        def body(*dynamic_args):
            full = list(args)
            for i, value in zip(dynamic, dynamic_args):
                full[i] = value
            return call_user(self.fn, tuple(full), kwargs)
        names = param_names(self.fn)
        hints = [names[i] if i < len(names) else f"arg{i}" for i in dynamic]
        staged = StagedBody(Direct(body, hints), tuple(args[i] for i in dynamic), f"checkpoint of {self.describe()}")
        operands = [*staged.consts, *tree_leaves(tuple(args[i] for i in dynamic))]
        outs = bind_remat(staged.jaxpr, operands, policy=self.policy, prevent_cse=self.prevent_cse,
                          differentiated=False)
        return staged.out_tree.unflatten(outs)

    def _static_positions(self, count: int) -> frozenset[int]:
        """The static positions among the `count` given positionally; a static argument
        passed by keyword is read from the call's keywords, as every keyword is."""
        parameters = max(count, len(param_names(self.fn)))
        return frozenset(i for i in normalize_argnums(self.static_argnums, parameters, "static_argnums")
                         if i < count)


_REMOVED = object()   # `concrete=`'s default: told apart from any value a caller passes


@api_boundary
def checkpoint(fn: Callable[..., Any] | None = None, *, policy: Callable[..., bool] | None = None,
               prevent_cse: bool = True, static_argnums: int | Sequence[int] = (),
               static_argnames: str | Iterable[str] = (), concrete: Any = _REMOVED) -> Callable[..., Any]:
    """`fn`, made to save for reverse mode only what `policy` saves (and its inputs),
    recomputing the rest in the backward pass (jax.checkpoint). Usable as a decorator,
    bare or with arguments. `policy` is one of `checkpoint_policies` or any
    `policy(primitive, *avals, **params) -> bool`; None saves nothing. `prevent_cse` keeps
    XLA from merging the recomputation into the forward pass. `static_argnums` and
    `static_argnames` name arguments that are not arrays (Python values fixed at staging;
    Python ints and bools are static anyway). `concrete=`, which JAX removed in 0.10, is
    refused with JAX's replacement, as JAX refuses it."""
    if concrete is not _REMOVED:
        raise StagingTypeError("checkpoint's `concrete` option was removed from JAX in 0.10 and s2s never had it",
                               "branch on Python values passed as static arguments instead: "
                               "checkpoint(f, static_argnums=...) (ints and bools are static anyway)")
    policy = nothing_saveable if policy is None else policy
    _check_policy(policy)
    static_argnums = normalize_argnums(static_argnums, what="static_argnums")
    static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if fn is None:
        return functools.partial(checkpoint, policy=policy, prevent_cse=prevent_cse, static_argnums=static_argnums,
                                 static_argnames=static_argnames)
    names = param_names(fn)
    by_name = tuple(names.index(name) for name in static_argnames if name in names)
    return Checkpointed(fn, policy, bool(prevent_cse), tuple(sorted({*static_argnums, *by_name})))


remat = checkpoint


@api_boundary
def checkpoint_name(x: Any, name: str) -> Any:
    """`x` (every array of a pytree), tagged `name` for `save_only_these_names` and
    `save_anything_except_these_names` (jax.ad_checkpoint.checkpoint_name)."""
    if not isinstance(name, str):
        raise StagingError(f"checkpoint_name needs a string name, got {type(name).__name__} {name!r}",
                           "name the value with a string, e.g. checkpoint_name(h, 'hidden')")
    return tree_map(lambda leaf: name_p.bind(leaf, name=name) if isinstance(leaf, Tracer) else leaf, x)


# ---------------------------------------------------------------------------------------
# What reverse mode saves


@dataclasses.dataclass(frozen=True)
class SavedResidual:
    """One value the forward pass of `vjp` keeps for the backward pass."""
    type: str       # f32[2048,1024]
    nbytes: int
    source: str     # "argument h", or "tanh at model.py:12"


def _source_of(var, producers: dict) -> str:
    eqn = producers.get(var)
    if eqn is None:
        return f"argument {var.hint or '?'}"
    where = eqn.source_info.short() if eqn.source_info.line else "no source line"
    return f"{eqn.primitive.name} at {where}"


def saved_residuals(fn, *args) -> list[SavedResidual]:
    """What reverse mode of `fn` at `args` saves (every float argument differentiated, as
    `vjp` does): one entry per residual of the forward pass."""
    staged = staged_or_error(fn, args, {})
    closed = staged.closed
    diff = [dtypes.is_differentiable(a.dtype) for a in closed.in_avals]
    diff_out = [dtypes.is_differentiable(a.dtype) for a in closed.out_avals]
    forward = vjp_parts(closed, diff, diff_out).forward.jaxpr
    producers = {v: eqn for eqn in forward.eqns for v in eqn.outvars}
    residuals = forward.outvars[len(closed.jaxpr.outvars):]
    return [SavedResidual(v.aval.str_short(), v.aval.size * v.aval.dtype.itemsize, _source_of(v, producers))
            for v in residuals]


@api_boundary
def print_saved_residuals(fn: Callable[..., Any], *args: Any) -> list[SavedResidual]:
    """Prints what reverse mode of `fn` at `args` saves: each residual's type, size and
    the line that computed it (or the argument it is), then the total; returns the list
    (jax.ad_checkpoint.print_saved_residuals)."""
    residuals = saved_residuals(fn, *args)
    for r in residuals:
        print(f"{r.type:<20} {r.nbytes:>14,} bytes  {r.source}")
    total = sum(r.nbytes for r in residuals)
    print(f"total: {len(residuals)} residuals, {total:,} bytes ({total / 2**20:.1f} MiB)")
    return residuals
