"""The emitted function's signature and docstring, built from a staged function's record.

`s2s emit`, `s2s check`, `@s2s.export`, `emit_python` and `jit(backend="python")` all write
a module whose function takes the user's parameters (`params`, `x`), not the jaxpr's flat
inputs, and returns the user's output tree. This module says how: which parameters there
are, the expression that reaches each staged leaf (`params['W1']`), and how the return
expression is built. It works from the fields of a `Staged` record (param_names, in_tree,
staged_mask, out_tree, closed, location, description) and plain data passed in, so it
sits in the emit layer, below the front end that makes the record.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import re

import numpy as np

from s2s.emit.python import Signature, escaped
from s2s.errors import StagingError
from s2s.source_info import SourceInfo
from s2s.tree import PyTreeDef, leaf_paths, tree_leaves


def leaf_expression(param: str, path: tuple) -> str | None:
    """`params['W1']`, `layers[0]`, `state.h`; None when a step cannot be written plainly."""
    text = param
    for node_type, key in path:
        if node_type in (dict, list, tuple):
            text += f"[{key!r}]"
        elif hasattr(node_type, "_fields") or dataclasses.is_dataclass(node_type):
            text += f".{key}"
        else:
            return None
    return text


def output_builder(out_tree: PyTreeDef):
    """Writes the return expression for tuple/list/dict/None trees; None for other trees
    (the emitted function then returns the flat leaves, and its caller rebuilds the tree)."""
    def expressible(node) -> bool:
        return node.is_leaf or (node.node_type in (tuple, list, dict, type(None))
                                and all(expressible(c) for c in node.children))
    if not expressible(out_tree):
        return None

    def build(node, names):
        if node.is_leaf:
            return next(names)
        parts = [build(c, names) for c in node.children]
        if node.node_type is tuple:
            return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        if node.node_type is list:
            return f"[{', '.join(parts)}]"
        if node.node_type is dict:
            return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(node.aux, parts)) + "}"
        return "None"

    def render(names: list[str]) -> str:
        text = build(out_tree, iter(names))
        return text[1:-1] if out_tree.node_type is tuple and len(out_tree.children) > 1 else text
    return render


class _TangentParameter:
    """The annotation of a parameter that holds the tangent of another (`n_steps_dot`)."""

    def __repr__(self):
        return "TANGENT_PARAMETER"


# A parameter so annotated in a derived function's signature (`jvp_f(x, n, x_dot, n_dot)`)
# that holds only static leaves is the tangent of a static value: the emitted function
# leaves it out, as the primal it belongs to is a parameter (checked) already.
TANGENT_PARAMETER = _TangentParameter()


def emitted_signature(staged) -> Signature:
    """The emitted function's parameters: every named parameter of the user's function.

    A parameter whose leaves cannot be reached with plain indexing or attributes (a custom
    pytree node) is passed as the flat list of its staged leaves, `<name>_leaves` (its
    static leaves, which the caller does not pass, are not checked).

    A parameter that holds no staged leaf (a static int such as `n_steps`, a default the
    caller left alone such as `scale=0.5`) stays a parameter: the module was specialized
    for its value, so the value is its default where Python allows one (a default cannot
    precede a parameter without one) and the function checks it on every call, raising a
    `ValueError` that says to regenerate rather than computing with a value it was not
    built for. Static leaves of a parameter that also holds arrays (`cfg['n']`) are
    checked the same way. A parameter left to a default no literal can write (NumPy's
    `np.sum(a, keepdims=<no value>)`, a sentinel object) is left out: a call that passes
    it is refused by Python itself, and one that does not is what the module was built
    for. Parameters keep their kinds (`kinds`): keyword-only ones stay keyword-only,
    `*args` and `**kwargs` stay variadic (`args[0]`, `kwargs['a']` reach their leaves)
    and are left out when the specialization passed nothing through them.
    """
    paths = leaf_paths(staged.in_tree)
    leaves_of: dict[int, list[int]] = {i: [] for i in range(len(staged.param_names))}
    for leaf_index, path in enumerate(paths):
        leaves_of[path[0][1]].append(leaf_index)
    leaf_values = tree_leaves(staged.example_args)   # static leaves as their values
    declared = staged.signature.parameters
    params, input_exprs, hints, checks, declared_params = [], [], [], [], []
    host_expressions: dict[int, str] = {}   # id of a generator passed in -> how the function reads it
    for param_index, name in enumerate(staged.param_names):
        leaf_indices = leaves_of[param_index]
        staged_indices = [i for i in leaf_indices if staged.staged_mask[i]]
        kind = declared[name].kind if name in declared else inspect.Parameter.POSITIONAL_OR_KEYWORD
        if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) and not leaf_indices:
            continue
        if not staged_indices and name in declared and declared[name].annotation is TANGENT_PARAMETER:
            continue
        if not staged_indices:   # static: the parameter is checked against its value
            value = staged.example_args[param_index]
            if name in declared and value is declared[name].default and _literal(value) is None:
                continue   # a default no source can write (NumPy's `keepdims=<no value>`): left out
            params.append(name)
            if _is_generator(value):   # drawn from where the code draws: the parameter itself
                host_expressions[id(value)] = name
                declared_params.append((name, _STAGED, kind))
                continue
            checks.append(_static_check(staged, name, value))
            declared_params.append((name, value, kind))
            continue
        exprs = [leaf_expression(name, paths[i][1:]) for i in staged_indices]
        static_indices = [i for i in leaf_indices if not staged.staged_mask[i]]
        static_exprs = [leaf_expression(name, paths[i][1:]) for i in static_indices]
        if any(e is None for e in exprs + static_exprs):
            name = f"{name}_leaves"
            exprs = [f"{name}[{k}]" for k in range(len(staged_indices))]
        else:
            for e, i in zip(static_exprs, static_indices):
                if _is_generator(leaf_values[i]):
                    host_expressions[id(leaf_values[i])] = e
                else:
                    checks.append(_static_check(staged, e, leaf_values[i]))
        params.append(name)
        declared_params.append((name, _STAGED, kind))
        input_exprs.extend(exprs)
        hints.extend(v.hint for v in staged.closed.jaxpr.invars[len(hints):len(hints) + len(exprs)])
    return Signature(params, input_exprs, hints, output_builder(staged.out_tree),
                     declaration=_declaration(declared_params), prologue=[line for c in checks for line in c],
                     kinds={name: kind for name, _, kind in declared_params}, host_expressions=host_expressions)


def _is_generator(value) -> bool:
    """A NumPy generator passed as an argument: the emitted function draws from the one its
    caller passes, as the source does, so it is neither checked nor written as a value."""
    return isinstance(value, (np.random.RandomState, np.random.Generator))


_STAGED = object()   # marks a parameter that holds staged leaves (it has no default)


def _declaration(params: list[tuple[str, object, inspect._ParameterKind]]) -> str:
    """`W, xs, n_steps=20, *, scale=0.5`: static parameters keep their values as defaults,
    keyword-only ones always, positional ones in the trailing run (a positional parameter
    with a default cannot come before one without); `*args` and `**kwargs` as declared."""
    P = inspect.Parameter
    texts, defaults_allowed = [], True
    for name, value, kind in reversed(params):
        if kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            defaults_allowed = defaults_allowed and value is not _STAGED
            texts.append(f"{name}={_literal(value)}" if defaults_allowed else name)
        elif kind is P.KEYWORD_ONLY:
            texts.append(name if value is _STAGED else f"{name}={_literal(value)}")
        else:
            texts.append(("*" if kind is P.VAR_POSITIONAL else "**") + name)
    texts.reverse()
    kinds = [kind for _, _, kind in params]
    if P.KEYWORD_ONLY in kinds and P.VAR_POSITIONAL not in kinds:
        texts.insert(kinds.index(P.KEYWORD_ONLY), "*")
    return ", ".join(texts)


def _literal(value) -> str | None:
    """Python source that evaluates to `value` (and compares equal to it), or None."""
    if value is None or type(value) in (bool, int, str):
        return repr(value)
    if type(value) is float:
        if value != value:    # NaN: no value equals it, so no check could pass
            return None
        return repr(value) if abs(value) != float("inf") else f"float({repr(value)!r})"
    if type(value) is complex:
        parts = [_literal(value.real), _literal(value.imag)]
        return None if None in parts else f"complex({parts[0]}, {parts[1]})"
    if type(value) in (tuple, list):
        items = [_literal(v) for v in value]
        if None in items:
            return None
        text = ", ".join(items)
        return f"({text}{',' if len(items) == 1 else ''})" if type(value) is tuple else f"[{text}]"
    return None


def _static_check(staged, expr: str, value) -> list[str]:
    """The statements that refuse a call whose `expr` differs from the static `value` the
    module was specialized for."""
    literal = _literal(value)
    if literal is None:
        raise StagingError(
            f"{staged.description} takes {expr} = {escaped(repr(value))[:80]} as a static value, "
            "which cannot be written into the emitted module to check calls against",
            "pass it as an int, float, bool, str or None (or a tuple of them), or read it as a "
            "global or closure variable of the function instead of an argument",
            _def_location(staged))
    shown_expr, shown_value = expr.replace("%", "%%"), literal.replace("%", "%%")
    message = (f"{shown_expr}=%r, but this function was specialized for {shown_expr}={shown_value}: "
               "regenerate it with `s2s emit` (or call the transform again) for other values")
    return [f"if {_type_test(expr, value)}{expr} != {literal}:", f"    raise ValueError({message!r} % ({expr},))"]


def _type_test(expr: str, value) -> str:
    """The start of a check's condition that refuses a value of another kind than the
    static one (`3.0` or `True` for the int 3, an array for a float), which staging would
    have treated differently: `type(n) is not int or `."""
    if type(value) in (bool, int):
        return f"type({expr}) is not {type(value).__name__} or "
    if type(value) is float:
        return f"not isinstance({expr}, (int, float)) or isinstance({expr}, bool) or "
    return ""


def _def_location(staged) -> SourceInfo:
    filename, line = staged.location
    return SourceInfo(filename, line, 1, staged.name)


GENERATED_MARKER = ": generated by s2s from "   # after the name, on an emitted file's first line


def is_generated_source(first_line: str) -> bool:
    """Whether a file whose first line is `first_line` is one `s2s emit` wrote (its header
    opens the docstring: `\"\"\"grad_loss: generated by s2s from ...`), and so may be
    overwritten by a new one; anything else is the user's and is never touched."""
    return re.match(r'"""[^\W\d]\w*' + re.escape(GENERATED_MARKER), first_line) is not None


def generated_from(first_line: str) -> tuple[str, str] | None:
    """(function name, source file) that a generated file's first line names: the header
    `\"\"\"grad_loss: generated by s2s from `grad(loss)` in mlp.py.` gives
    ('grad_loss', 'mlp.py'), the file name as `source_label` writes it. None for any other
    line. `s2s check` and `s2s emit` find a module's orphans with it."""
    match = re.fullmatch(r'"""([^\W\d]\w*)' + re.escape(GENERATED_MARKER) + r"`.*` in (.+)\.\n?",
                         first_line)
    return (match[1], match[2]) if match else None


def source_label(filename: str) -> str:
    """How a header names the source file: its base name (never the checkout's absolute
    path), escaped as the docstring escapes it."""
    return escaped(os.path.basename(filename), also='\\"')


def emitted_docstring(staged, name: str, arg_descriptions: list[str]) -> str:
    """The emitted module's docstring: where it came from, and the arguments it was
    specialized for (`arg_descriptions`, one per parameter, as the front end shows them;
    None for a parameter the emitted function leaves out)."""
    # The file, not its line: moving the function in its file leaves this header as it is.
    filename, _ = staged.location
    args = ", ".join(f"{n}: {d}" for n, d in zip(staged.param_names, arg_descriptions) if d is not None)
    lines = [f"{name}{GENERATED_MARKER}`{staged.description}` in {os.path.basename(filename)}.",
             "",
             f"Specialized for ({args}).",
             ]
    if output_builder(staged.out_tree) is None:
        lines.append(f"Returns the flat leaves of {staged.out_tree}.")
    lines.append("Do not edit: regenerate with `s2s emit`.")
    return "\n".join(lines)
