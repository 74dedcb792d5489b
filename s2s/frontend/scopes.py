"""A function's scope, read from its AST by Python's rule: the names it binds and its own
`global` and `nonlocal` statements, in one pass over the function (the def-use chains that
control flow needs come from beniget, in s2s.frontend.source)."""
from __future__ import annotations

import ast

SCOPES = (   # nodes that open a scope of their own
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_TARGET_CONTEXTS = (ast.Store, ast.Del)   # an expression with one of these is a target


def arguments_of(arguments: ast.arguments) -> list[ast.arg]:
    """Every parameter of a def or lambda."""
    return arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [
        a for a in (arguments.vararg, arguments.kwarg) if a is not None]


def scope_of(function, has_walrus: bool = True) -> tuple[frozenset[str], tuple]:
    """(the names a def or lambda binds in its own scope, its own `global` and `nonlocal`
    statements), by Python's rule: the arguments and every name the body stores to or
    deletes, imports, defines (def, class) or matches, a walrus inside a comprehension
    included, but not a comprehension's own targets nor anything inside nested functions
    and classes (their decorators, defaults and bases are this scope's); less the names
    declared `global` or `nonlocal`. One pass over the function, no def-use analysis.

    Without a walrus (`has_walrus=False`: its text has no `:=`), an expression binds a name
    only as an assignment's target, so the pass steps over every expression that is not
    one (most of a function's nodes: calls, operators, constants, names read)."""
    names = {a.arg for a in arguments_of(function.args)}
    declarations = []
    stack = [function.body] if isinstance(function, ast.Lambda) else list(function.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if not has_walrus and isinstance(node, ast.expr) and type(getattr(node, "ctx", None)) not in _TARGET_CONTEXTS:
            continue
        if kind is ast.Assign and not has_walrus:   # (most statements: their value binds nothing)
            stack.extend(node.targets)
        elif kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                names.add(node.id)
        elif isinstance(node, SCOPES):
            if kind is not ast.Lambda:
                names.add(node.name)
                stack.extend(node.decorator_list)
            if kind is ast.ClassDef:
                stack.extend(node.bases + node.keywords)
            else:
                stack.extend(node.args.defaults + [d for d in node.args.kw_defaults if d is not None])
                if kind is not ast.Lambda:   # annotations too are evaluated here
                    stack.extend(a.annotation for a in arguments_of(node.args) if a.annotation is not None)
                    stack.extend([node.returns] if node.returns is not None else [])
        elif isinstance(node, _COMPREHENSIONS):   # its targets are its own; a walrus binds here
            for generator in node.generators:
                stack.extend([generator.iter, *generator.ifs])
            stack.extend([node.key, node.value] if kind is ast.DictComp else [node.elt])
        else:
            if kind is ast.alias:
                names.add(node.asname or node.name.split(".")[0])
            elif kind is ast.Global or kind is ast.Nonlocal:
                declarations.append(node)
            elif (kind is ast.MatchAs or kind is ast.MatchStar) and node.name is not None:
                names.add(node.name)
            elif kind is ast.MatchMapping and node.rest is not None:
                names.add(node.rest)
            elif kind is ast.ExceptHandler and node.name is not None:
                names.add(node.name)
            stack.extend(ast.iter_child_nodes(node))
    declared = {name for node in declarations for name in node.names}
    return frozenset(names - declared), tuple(sorted(declarations, key=lambda n: (n.lineno, n.col_offset)))
