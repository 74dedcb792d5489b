"""The staging walk: runs a function's AST with staged arrays in place of its array inputs.

Python values that do not depend on the array arguments — ints, shapes, tuples, strings,
module constants — stay concrete and the walk computes with them directly, so loops over
`range(n_layers)`, `if x.ndim == 2` and list building happen now, at staging time. Every
array operation (operators, `np.*` calls, methods) is staged into the active builder, even
when its inputs are constants, so `np.ones((300, 1024, 1024))` becomes a small equation,
not a 1.2 GB literal. Calls to other user functions are staged by walking their source too
(`call_user`), so equations point at the line of whichever file they came from.

Whenever Python itself needs a concrete value from a staged one (`if x.sum() > 0`,
`int(x)`, `range(x)`), ConcretizationError points at that line. Syntax that cannot be
staged raises UnsupportedSyntaxError at its line.

This module is the walker's core: a function activation (`Scope`), statement dispatch,
assignment, nested functions, and `call_user`, the one way a user callable is staged (it
and the walker call each other). Its rooms are mixins: expressions (`expressions.py`),
in-place updates (`in_place.py`), branches and jumps (`control_flow.py`), loops
(`loops.py`) and generators, staged as their items are asked for (`generators.py`).
"""
from __future__ import annotations

import builtins
import functools
import inspect
import itertools
import sys
import sysconfig
import threading
import types
from typing import Any

import ast
import numpy as np

from s2s.errors import (ConcretizationError, S2SError, StagingError, StagingTypeError, UnsupportedFunctionError,
                        UnsupportedSyntaxError)
from s2s.frontend.autograd_calls import autograd_callee
from s2s.frontend.control_flow import FLAG_HINTS, Break, Continue, ControlFlow, Return
from s2s.frontend.expressions import Expressions, is_array_constant
from s2s.frontend.generators import Generators, is_generator_function
from s2s.frontend.guards import (record_builtin, record_cached_call, record_cell, record_defaults,
                                 record_derived, record_global, record_module_attribute, record_receiver)
from s2s.frontend.in_place import InPlaceUpdates
from s2s.frontend.loops import Loops
from s2s.frontend.python_types import numpy_isinstance
from s2s.frontend.source import (BUILTINS, FunctionSource, check_supported_scope,
                                 function_source, nested_function_source, walk_scope)
from s2s.frontend.staged_once import check_call, check_store, record_call_result
from s2s.numpy_api import NUMPY_IMPLS
from s2s.numpy_api.random import GENERATOR_CLASSES, random_call
from s2s.primitives.printing import print_at_run_time
from s2s.staging import Tracer

_STDLIB = sysconfig.get_paths()["stdlib"]
MAX_STAGING_DEPTH = 200

# NumPy functions that build arrays from static arguments alone: always staged (as iota,
# broadcasts ...), never run eagerly, so their results never become baked constants.
CREATION_FUNCTIONS = {np.zeros, np.ones, np.full, np.empty, np.eye, np.identity, np.arange,
                      np.linspace, np.tri, np.zeros_like, np.ones_like, np.full_like,
                      np.empty_like, np.array, np.asarray}

UNSUPPORTED_STATEMENTS = {
    ast.Try: ("try/except", "s2s stages the function once; errors cannot be caught at run time. "
               "Check conditions on static values before calling"),
    ast.AsyncWith: ("`async with`", "staged functions are synchronous"),
    ast.AsyncFor: ("`async for`", "staged functions are synchronous"),
    ast.AsyncFunctionDef: ("async functions", "staged functions are synchronous"),
    ast.ClassDef: ("class definitions inside a staged function",
                    "define the class at module level"),
    ast.Match: ("`match` statements", "use if/elif on static values"),
}



# What to write instead of assigning to an attribute of a staged array.
_ATTRIBUTE_STORE_HELP = {
    "real": "build the new array from its parts: `z = new_real + 1j * np.imag(z)`",
    "imag": "build the new array from its parts: `z = np.real(z) + 1j * new_imag`",
    "shape": "reshape it: `x = x.reshape(new_shape)`",
}

class Scope:
    """The variables of one function activation, with lexical parents for nested defs."""

    def __init__(self, source: FunctionSource, fn_globals: dict, closure: dict,
                 parent: Scope | None, cells: dict | None = None):
        self.source = source
        self.vars: dict[str, Any] = {}
        self.globals = fn_globals
        self.closure = closure
        self.cells = cells or {}   # name -> the function's closure cell, guarded when read
        self.parent = parent

    def lookup(self, name: str, node) -> Any:
        scope = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            if name in scope.source.local_names:
                raise StagingError(f"local variable {name!r} is used before it is assigned",
                                   f"assign {name} before this line")
            if name in scope.closure:
                value = scope.closure[name]
                record_cell(scope.cells[name], name, value)
                return value
            scope = scope.parent
        if name in self.globals:
            value = self.globals[name]
            record_global(self.globals, name, value)
            return value
        if name in BUILTINS:
            record_builtin(self.globals, name)
            return BUILTINS[name]
        raise StagingError(f"name {name!r} is not defined", "define it or import it")

    def bound_names_of(self, value) -> list[str]:
        """Names in this activation bound to exactly this object (for aliasing checks)."""
        return [n for n, v in self.vars.items() if v is value]


class StagedFunction:
    """A def or lambda created while staging: calling it stages its body in place.

    It is a function to the code around it: it has a name, a qualified name and a
    signature (`inspect.signature`, which the transforms bind calls with), and takes the
    attributes a decorator sets. What it runs is in slots, not in its `__dict__`, because a
    `functools.wraps` decorator copies the wrapped function's `__dict__` onto its wrapper:
    the wrapper gets the names and `__wrapped__`, never the wrapped function's body.
    """

    __slots__ = ("source", "parent", "__signature__", "__dict__", "__weakref__")

    def __init__(self, source: FunctionSource, parent: Scope, defaults: list, kw_defaults: dict):
        self.source = source
        self.parent = parent
        self.__signature__ = signature_from_ast(source.node.args, defaults, kw_defaults)
        self.__name__ = getattr(source.node, "name", "<lambda>")
        self.__qualname__ = source.name
        self.__module__ = parent.globals.get("__name__")
        self.__doc__ = None if isinstance(source.node, ast.Lambda) else ast.get_docstring(source.node)

    def __call__(self, *args, **kwargs):
        bound = _bind(self.__signature__, args, kwargs, self.source.name)
        scope = Scope(self.source, self.parent.globals, {}, self.parent)
        return FunctionWalker(scope).run(bound, self)

    def __repr__(self):
        return f"<staged function {self.source.name}>"


def signature_from_ast(args: ast.arguments, defaults: list, kw_defaults: dict) -> inspect.Signature:
    """The signature of a def or lambda met while staging, read from its AST (there is no
    function object to inspect), with the default values the walker computed."""
    P = inspect.Parameter
    params = []
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(defaults)
    for i, a in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        default = defaults[i - first_default] if i >= first_default else P.empty
        params.append(P(a.arg, kind, default=default))
    if args.vararg:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for a in args.kwonlyargs:
        params.append(P(a.arg, P.KEYWORD_ONLY, default=kw_defaults.get(a.arg, P.empty)))
    if args.kwarg:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def _bind(signature: inspect.Signature, args, kwargs, name: str) -> dict:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise StagingTypeError(f"{name}() called with the wrong arguments: {e}",
                               f"call it as {name}{signature}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _coroutine_error(source: FunctionSource) -> UnsupportedSyntaxError:
    """An `async def`, refused at its first `await`: calling it runs none of its body, and
    staged code has no event loop to run it on."""
    first = next((node for node in walk_scope(source.node.body) if isinstance(node, ast.Await)), None)
    if first is None:   # `async def` without an `await`
        return UnsupportedSyntaxError(f"{source.name} is a coroutine (`async def`), which cannot be "
                                      "staged", "staged functions are synchronous: use `def`",
                                      source.info(source.node))
    return UnsupportedSyntaxError(f"`await` makes {source.name} a coroutine, which cannot be staged",
                                  "staged functions are synchronous: use `def`", source.info(first))


def stage_python_function(fn, args, kwargs, self_arg=None):
    """Stages a call of a plain Python function (module-level, nested, lambda, method)."""
    source = function_source(fn)
    check_supported_scope(source)
    if fn.__code__.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise _coroutine_error(source)
    closure, cells = {}, {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
                cells[name] = cell
            except ValueError:  # an empty cell: the name is not bound yet
                pass
    record_defaults(fn)
    if self_arg is not None:
        record_receiver(self_arg, f"self of {fn.__qualname__}")
        args = (self_arg,) + tuple(args)
    signature = inspect.signature(fn, follow_wrapped=False)
    bound = _bind(signature, args, kwargs, source.name)
    scope = Scope(source, fn.__globals__, closure, None, cells)
    return FunctionWalker(scope).run(bound, fn)


_staging_state = threading.local()


def _call_stack() -> list:
    """(function node, function, static arguments) of the calls being staged, innermost last."""
    if not hasattr(_staging_state, "stack"):
        _staging_state.stack = []
    return _staging_state.stack


def _is_staged(value) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, (list, tuple)):
        return any(_is_staged(v) for v in value)
    if isinstance(value, dict):
        return any(_is_staged(v) for v in value.values())
    return False


def _is_static_scalar_tree(value) -> bool:
    """Python/NumPy scalars, strings, None, dtypes and containers of them: never staged."""
    if isinstance(value, (list, tuple)):
        return all(_is_static_scalar_tree(v) for v in value)
    if isinstance(value, dict):
        return all(_is_static_scalar_tree(v) for v in value.values())
    return not (isinstance(value, Tracer) or is_array_constant(value))


class FunctionWalker(Expressions, InPlaceUpdates, ControlFlow, Loops, Generators):
    """Walks one function body. Statements are executed; expressions return values.

    This class is the core (state, statement dispatch, assignment, calls) over the rooms
    it lists, lowest first. A room calls through `self` its own methods and those of the
    rooms below it; above it, only what its `<room>Needs` protocol lists of the core, never
    another room (tests/frontend/test_walker_contract.py)."""

    def __init__(self, scope: Scope):
        self.scope = scope
        self.source = scope.source
        self.arguments: set[int] = set()   # ids of the staged arguments, for in-place warnings
        self.in_staged_loop = False        # whether `break`/`continue` set flags (see FLAG_HINTS)

    # --- entry -------------------------------------------------------------------------

    def run(self, bound_args: dict, function):
        """Stages a call of `function` (whose source this walker walks) on `bound_args`.

        A call is recursion when the same function is called again with the same static
        arguments inside it: the same function object, not just the same source, since
        closures made by one def or lambda (a factory's `lambda x: f(g(x))` composed with
        itself) differ in what they close over and may call one another.

        A generator function's call returns the Python generator that stages its body as
        its items are asked for (`generators.py`), outside this recursion check: a
        generator delegating to itself (`yield from walk(n)`) nests only as deep as the
        items taken."""
        node = self.source.node
        for name, value in bound_args.items():
            self.assign_name(name, value)
        self.arguments = {id(v) for v in bound_args.values() if isinstance(v, Tracer)}
        if is_generator_function(node):   # its body is staged as its items are asked for
            return self.generate(node.body)
        key = (id(node), id(function), tuple((k, _static_key(v)) for k, v in bound_args.items()))
        stack = _call_stack()
        if key in stack:
            raise UnsupportedSyntaxError(
                f"{self.source.name} calls itself with the same static arguments: "
                "recursion on staged values cannot be unrolled",
                "recursion must end on static values (e.g. a Python int depth); "
                "otherwise write a loop")
        if len(stack) >= MAX_STAGING_DEPTH:
            raise self._too_deep(stack, f"it stages at most {MAX_STAGING_DEPTH} calls inside each other")
        stack.append(key)
        try:
            if isinstance(node, ast.Lambda):
                return self.expr(node.body)
            try:
                self._tail_block(node.body)
            except Return as r:
                return r.value
            return None
        except (RecursionError, StagingError) as error:   # Python's stack ran out: say why
            if isinstance(getattr(error, "original", error), RecursionError) and \
                    sum(k[0] == id(node) for k in stack) > 1:
                raise self._too_deep(stack[:-1], "Python's stack ran out") from None
            raise
        finally:
            stack.pop()

    def _too_deep(self, stack: list, why: str) -> UnsupportedSyntaxError:
        """The error for a recursion on static arguments deeper than staging goes (each
        call is staged inside the one before). Raised without a location, it is given the
        one of the call that went too deep by its caller's walker."""
        calls = sum(k[0] == id(self.source.node) for k in stack)
        return UnsupportedSyntaxError(
            f"{self.source.name} recurses too deep to stage ({calls + 1} calls deep): s2s unrolls a "
            f"recursion on static arguments, each call staged inside the one before, and {why}",
            "write the recursion as a loop: a Python `for` over range(n) unrolls the same steps "
            "without nesting calls, and lax.fori_loop or lax.scan stages the step once")

    # --- statements --------------------------------------------------------------------

    def block(self, statements):
        for stmt in statements:
            self.stmt(stmt)

    def stmt(self, node):
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                what, help = UNSUPPORTED_STATEMENTS.get(
                    type(node), (f"`{type(node).__name__}` statements", "rewrite without it"))
                raise UnsupportedSyntaxError(f"{what} are not supported in staged functions",
                                             help)
            method(node)
        except (Return, Break, Continue):
            raise
        except S2SError as e:
            raise e.at(self.source.info(node))

    def stmt_Expr(self, node):
        self.expr(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node):
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def stmt_Assert(self, node):
        if not self.truth(self.expr(node.test), node.test, "an `assert`"):
            message = "" if node.msg is None else f": {self.expr(node.msg)}"
            raise StagingError(f"assertion failed while staging{message}",
                               "the assert checks static values (shapes, Python numbers) of "
                               "these arguments; call the function with arguments it accepts")

    def stmt_Raise(self, node):
        exc = None if node.exc is None else self.expr(node.exc)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        description = f"{type(exc).__name__}: {exc}" if exc is not None else "an exception"
        error = StagingError(f"the function raised {description} while being staged",
                             "this `raise` ran for the arguments given (their static values "
                             "and shapes); call the function with arguments it accepts")
        error.original = exc
        raise error

    def stmt_FunctionDef(self, node):
        """A def, with its decorators: as Python does, their expressions are evaluated
        first, then the defaults; the innermost decorator is applied first. Each is called
        as any call in the function is (`call_user`: a decorator written in Python is
        staged from its source, so a `functools.wraps` wrapper it defines is a
        StagedFunction too), and must give back a function s2s can stage when it is
        called, which is checked here, at the decorator's line, not at a later call."""
        decorators = [self.expr(decorator) for decorator in node.decorator_list]
        function = self._make_function(node)
        for decorator, decorator_node in reversed(list(zip(decorators, node.decorator_list))):
            where = self.source.info(decorator_node)
            try:
                function = self.call(decorator, [function], {})
            except S2SError as e:
                raise e.at(where)
            if not stages_when_called(function):
                raise UnsupportedSyntaxError(
                    f"the decorator `{ast.unparse(decorator_node)}` turns {node.name} into "
                    f"{'None' if function is None else 'a ' + type(function).__name__}, which s2s cannot stage",
                    "s2s stages a def or lambda, an s2s transform of one (s2s.jit, s2s.checkpoint, "
                    "s2s.custom_jvp ...), a functools.partial of one, or what a decorator written in "
                    "Python returns of these; apply this decorator outside the staged function", where)
        self.assign_name(node.name, function)

    def stmt_Import(self, node):
        for alias in node.names:
            module = __import__(alias.name)
            if alias.asname:
                for part in alias.name.split(".")[1:]:
                    module = getattr(module, part)
            self.assign_name(alias.asname or alias.name.split(".")[0], module)

    def stmt_ImportFrom(self, node):
        module = __import__(node.module, fromlist=[a.name for a in node.names], level=node.level
                            ) if node.level == 0 else None
        if module is None:
            raise UnsupportedSyntaxError("relative imports inside staged functions are not supported",
                                         "import at module level")
        for alias in node.names:
            value = getattr(module, alias.name)
            record_module_attribute(module, alias.name, value)
            self.assign_name(alias.asname or alias.name, value)

    def stmt_Delete(self, node):
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.scope.vars.pop(target.id, None)
            else:
                obj = self.expr(target.value)
                self._reject_array_store(obj, target)
                check_store(obj, f"`del {ast.unparse(target)}`")
                del obj[self.expr(target.slice)]

    # --- assignment --------------------------------------------------------------------

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self._unpack(target, value)
        elif isinstance(target, ast.Subscript):
            obj = self.expr(target.value)
            if isinstance(obj, Tracer):
                self._store(target, obj, self.expr(target.slice), value)
                return
            self._reject_array_store(obj, target)
            check_store(obj, f"`{ast.unparse(target)} = ...`")
            obj[self.expr(target.slice)] = value
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value)
            if isinstance(obj, Tracer):
                raise UnsupportedSyntaxError(
                    f"cannot assign to `.{target.attr}` of an array s2s stages: NumPy changes the array in "
                    "place there, and a staged array is a value",
                    _ATTRIBUTE_STORE_HELP.get(target.attr, "compute a new array and assign it to the name"))
            check_store(obj, f"`{ast.unparse(target)} = ...`")
            setattr(obj, target.attr, value)
        elif isinstance(target, ast.Starred):
            raise UnsupportedSyntaxError("a starred target must be inside a tuple or list")
        else:
            raise UnsupportedSyntaxError(f"cannot assign to {type(target).__name__}")

    def _unpack(self, target, value):
        if isinstance(value, Tracer):
            value = list(value)
        try:
            items = list(value)
        except TypeError:
            raise StagingError(f"cannot unpack a {type(value).__name__}",
                               "unpack a tuple, list or array") from None
        starred = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
        n = len(target.elts)
        if not starred:
            if len(items) != n:
                raise StagingError(f"cannot unpack {len(items)} values into {n} names",
                                   f"use {len(items)} names, or a starred name (`a, *rest = ...`)")
            for elt, item in zip(target.elts, items):
                self.assign(elt, item)
            return
        s = starred[0]
        after = n - s - 1
        if len(items) < n - 1:
            raise StagingError(f"not enough values to unpack (expected at least {n - 1}, got {len(items)})",
                               "use fewer names on the left")
        for elt, item in zip(target.elts[:s], items[:s]):
            self.assign(elt, item)
        self.assign(target.elts[s].value, items[s:len(items) - after])
        for elt, item in zip(target.elts[s + 1:], items[len(items) - after:]):
            self.assign(elt, item)

    def assign_name(self, name: str, value):
        if isinstance(value, Tracer) and value.variable.hint is None:
            value.variable.hint = FLAG_HINTS.get(name, name)
        self.scope.vars[name] = value

    def call(self, fn, args, kwargs):
        """A call in the function's source (for the mixins, which cannot import call_user)."""
        return call_user(fn, args, kwargs)

    def _make_function(self, node) -> StagedFunction:
        source = nested_function_source(self.source, node)
        check_supported_scope(source)
        defaults = [self.expr(d) for d in node.args.defaults]
        kw_defaults = {a.arg: self.expr(d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)
                       if d is not None}
        return StagedFunction(source, self.scope, defaults, kw_defaults)


def _library_name(fn, module: str) -> str:
    """How a user wrote a SciPy function or a ufunc: `scipy.special.jn` (SciPy's ufuncs
    have no module of their own), `scipy.stats.poisson.logpmf` (a distribution's method)."""
    name = getattr(fn, "__name__", repr(fn))
    special = sys.modules.get("scipy.special")
    if isinstance(fn, np.ufunc):
        return f"scipy.special.{name}" if special is not None and getattr(special, name, None) is fn \
            else f"the ufunc {name}"
    owner = getattr(fn, "__self__", None)
    if owner is not None and isinstance(getattr(owner, "name", None), str):
        return f"scipy.stats.{owner.name}.{name}"
    return f"{module}.{name}"


def call_user(fn, args, kwargs):
    """Calls `fn` on staged values: every user callable s2s stages goes through here (a call
    in a staged function's source, the functions given to `s2s.lax`, custom_jvp/custom_vjp
    functions and rules, implicit solvers).

    NumPy functions run their staged implementation (or run eagerly on static scalars);
    Python functions, methods (of callable objects too: `__call__`) and the function of a
    `functools.partial` are staged from their source, with the partial's arguments;
    functions defined in a staged function stage their body in place; s2s's own functions
    and transforms, builtins and other callables are called as they are. autograd's
    wrappers stage as what they stand for (`autograd_calls.py`): `anp.sin` as `np.sin`, a
    program's own autograd primitive by its rules, never through the wrapper's source."""
    numpy_impl = NUMPY_IMPLS.get(fn) if _hashable(fn) else None
    if numpy_impl is not None:
        # (A staged positional argument, the common case, makes the call staged at once.)
        if (fn not in CREATION_FUNCTIONS and not any(type(a) is Tracer for a in args)
                and _is_static_scalar_tree((args, kwargs))):
            result = fn(*args, **kwargs)   # e.g. np.sqrt(d_k), np.prod(x.shape)
            if not is_array_constant(result):
                return result
        return numpy_impl(*args, **kwargs)
    if getattr(fn, "__s2s_transform__", False):   # of a NumPy function too, whose __module__ it has
        return fn(*args, **kwargs)
    callee = autograd_callee(fn)   # autograd.numpy's functions, a program's own autograd primitives
    if callee is not None:
        return call_user(callee, args, kwargs)
    module = getattr(fn, "__module__", None) or ""
    if isinstance(getattr(fn, "__self__", None), GENERATOR_CLASSES):   # np.random.randn, rng.normal
        return random_call(fn.__self__, fn.__name__, args, kwargs)
    if (module == "jax" or module.startswith(("jax.", "jaxlib."))) and _is_staged((args, kwargs)):
        name = getattr(fn, "__name__", "?")
        raise UnsupportedFunctionError(
            f"{module}.{name} is JAX's function, and s2s stages NumPy code",
            f"write np.{name} (import numpy as np): s2s's transforms take NumPy as JAX's take jax.numpy"
            if hasattr(np, name) else "write it with NumPy's functions (see the README's table)")
    if module == "numpy.random" or module.startswith("numpy.random."):
        raise UnsupportedFunctionError(
            f"np.random.{getattr(fn, '__name__', '?')} inside a staged function would make or seed a "
            "generator once, when the function is staged, not on every call",
            "make the generator outside the function (rng = np.random.default_rng(0)) and draw from "
            "it inside (rng.normal(size=3))")
    if (module == "numpy" or module.startswith("numpy.")) and not isinstance(fn, type):
        if _is_static_scalar_tree((args, kwargs)):
            return fn(*args, **kwargs)
        name = getattr(fn, "__name__", repr(fn))
        raise UnsupportedFunctionError(
            f"np.{name} is not supported on arrays by s2s",
            "see the README's table of supported NumPy functions; "
            "write it with supported functions")
    if (isinstance(fn, np.ufunc) or (module == "scipy" or module.startswith("scipy."))
            and isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType))) \
            and _is_staged((args, kwargs)):   # calling a distribution, norm(mu, s), freezes it: SciPy does
        raise UnsupportedFunctionError(
            f"{_library_name(fn, module)} is not supported on arrays by s2s",
            "see the README's table of supported NumPy and SciPy functions; write it with "
            "supported functions")
    if fn is builtins.print and _is_staged((args, kwargs)):
        return _print_when_run(args, kwargs)
    if fn is builtins.isinstance and len(args) == 2 and isinstance(args[0], Tracer):
        return numpy_isinstance(*args)
    if (fn is builtins.getattr or fn is builtins.type or fn is builtins.vars or fn is builtins.hasattr) \
            and not kwargs:
        return _read_through_builtin(fn, args)
    if isinstance(fn, _LRU_CACHE_WRAPPER) and not _is_staged((args, kwargs)):
        result = fn(*args, **kwargs)
        record_cached_call(fn, args, kwargs, result)
        return result
    if fn in (builtins.min, builtins.max) and _is_staged(args):
        name = fn.__name__
        raise ConcretizationError(
            f"the builtin {name}() compares staged arrays as Python bools",
            f"use np.{'minimum' if name == 'min' else 'maximum'}(a, b) or np.{name}(x)")
    if isinstance(fn, functools.partial):
        return call_user(fn.func, list(fn.args) + list(args), {**fn.keywords, **kwargs})
    if isinstance(fn, StagedFunction):
        return fn(*args, **kwargs)
    if isinstance(fn, types.MethodType) and _is_user_function(fn.__func__):
        return stage_python_function(fn.__func__, args, kwargs, self_arg=fn.__self__)
    if _is_user_function(fn):
        return stage_python_function(fn, args, kwargs)
    if (not isinstance(fn, (type, types.BuiltinFunctionType, types.FunctionType,
                            types.MethodType)) and callable(fn)):
        call_method = getattr(type(fn), "__call__", None)
        if _is_user_function(call_method):
            return stage_python_function(call_method, args, kwargs, self_arg=fn)
    if getattr(fn, "__module__", "") == "math" and _is_staged((args, kwargs)):
        raise ConcretizationError(
            f"math.{fn.__name__} needs a Python number, but got a staged array",
            f"use np.{fn.__name__} for arrays")
    check_call(fn, args, kwargs)   # run as Python: in a body staged once, it must change nothing made before
    if _hashable(fn) and fn in CALLING_LIBRARY_FUNCTIONS:
        args = [_staged_when_called(a) for a in args]
        kwargs = {k: _staged_when_called(v) for k, v in kwargs.items()}
    return record_call_result(fn, args, fn(*args, **kwargs))


# Library functions that call a function they are given, on the items they walk
# (`sum(map(partial(f, a), data))`, `reduce(np.add, xs)`, `sorted(xs, key=...)`): that
# function is staged as a call written in the source is, rather than run as plain Python
# on staged values (where NumPy's ufuncs refuse them).
CALLING_LIBRARY_FUNCTIONS = frozenset({
    builtins.map, builtins.filter, builtins.sorted, builtins.min, builtins.max, functools.reduce,
    itertools.starmap, itertools.accumulate, itertools.filterfalse, itertools.takewhile,
    itertools.dropwhile, itertools.groupby})


def _staged_when_called(value):
    """`value`, or where it is callable, a function that stages each call of it."""
    if not callable(value):
        return value

    def staged(*args, **kwargs):
        return call_user(value, args, kwargs)
    return staged


_LRU_CACHE_WRAPPER = type(functools.lru_cache(maxsize=1)(lambda: None))


def stages_when_called(fn) -> bool:
    """Whether `call_user` stages a call of `fn` (rather than running it as Python): a def
    or lambda met while staging, an s2s transform, a NumPy function s2s implements, a user's
    function, method or callable object, or a `functools.partial` of one of these."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    return (isinstance(fn, StagedFunction) or getattr(fn, "__s2s_transform__", False)
            or (_hashable(fn) and fn in NUMPY_IMPLS) or _is_user_function(fn)
            or (not isinstance(fn, type) and _is_user_function(getattr(type(fn), "__call__", None))))


def _print_when_run(args, kwargs) -> None:
    """print() of staged arrays (`print(i)` in a loop that stays a loop): staged to print
    their values each time the code runs, on every backend (primitives/printing.py); the
    other arguments are printed as print shows them now."""
    options = {"sep": None, "end": None, "flush": False, **kwargs}
    file = options.pop("file", None)
    if (file is not None and file is not sys.stdout) or set(options) != {"sep", "end", "flush"} \
            or _is_staged(list(options.values())):
        raise UnsupportedSyntaxError(
            "print() of staged arrays takes only sep=, end= and flush=, as static values, and prints "
            "to sys.stdout", "print to the standard output, or return the values and print them outside")
    for value in args:
        if not isinstance(value, Tracer) and _is_staged(value):
            raise UnsupportedSyntaxError(
                "print() of a list, tuple or dict holding staged arrays: only arrays are printed "
                "when the function runs", "print each array as an argument of its own: print(a, b)")
    parts = tuple(... if isinstance(value, Tracer) else str(value) for value in args)
    print_at_run_time(parts, [value for value in args if isinstance(value, Tracer)], options["sep"], options["end"],
                      bool(options["flush"]))


def _read_through_builtin(fn, args):
    """`getattr(obj, name[, default])`, `hasattr(obj, name)`, `type(obj)` or `vars(obj)`:
    guarded as `obj.name` is (`record_derived`), where `obj` is."""
    value = fn(*args)
    if fn is builtins.type or fn is builtins.vars:
        if len(args) == 1:
            record_derived(args[0], ".__class__" if fn is builtins.type else ".__dict__", fn, value)
    elif len(args) >= 2 and isinstance(args[1], str):
        rest = args[1:]
        record_derived(args[0], f".{args[1]}" if fn is builtins.getattr else f".{args[1]} (hasattr)",
                       lambda obj: fn(obj, *rest), value)
    return value


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def _is_user_function(fn) -> bool:
    """Pure-Python functions outside NumPy, s2s and the standard library are staged."""
    if not isinstance(fn, types.FunctionType):
        return False
    module = fn.__module__ or ""
    if module.split(".")[0] in ("numpy", "s2s", "s2s_runtime"):
        return False
    return not fn.__code__.co_filename.startswith(_STDLIB)


def _static_key(value):
    """A hashable stand-in for an argument, for detecting unbounded recursion (a tuple's
    staged items by their types too: comparing the arrays themselves would stage `==`)."""
    if isinstance(value, Tracer):
        return ("staged", value.aval)
    if type(value) is tuple:
        return tuple(_static_key(v) for v in value)
    try:
        hash(value)
        return value
    except TypeError:
        return ("unhashable", id(value))
