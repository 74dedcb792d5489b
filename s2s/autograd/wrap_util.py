"""autograd's n-ary convention on s2s: an operator written for a function of one value
applies to a function of many arguments, `argnum` choosing which (an int, or a tuple or
list of them, whose values the operator then sees as one tuple).

The functions these operators build run twice over: as Python on NumPy values, and, where
they are called inside a function s2s stages (a `grad` of a `make_vjp`, a `jit`), on staged
arrays. s2s stages only the user's code from its source; code of s2s's own, as this
package's, runs as Python, so it reaches the user's function, NumPy's and a user's own
operator through `call_user_code`, which stages them when something is being staged.
"""
from __future__ import annotations

import inspect

from s2s.errors import api_boundary
from s2s.frontend import is_numpy_function
from s2s.frontend.args import normalize_argnums
from s2s.frontend.walker import call_user
from s2s.staging import current_builder


def call_user_code(fn, args: tuple, kwargs: dict):
    """`fn(*args, **kwargs)`, where `fn` is the user's NumPy code (or a NumPy function):
    while a function is being staged it is staged with it (s2s's `call_user`, which reads
    the user's source and runs NumPy functions on staged arrays), otherwise it runs as the
    plain Python it is."""
    if current_builder() is None:
        return fn(*args, **kwargs)
    return call_user(fn, args, kwargs)


def takes_arguments_of(fun, *appended: str):
    """Decorates a function an operator derives from `fun`, written to take `*args,
    **kwargs`, with `fun`'s signature and the positional parameters `appended`: s2s binds
    and names its arguments as the user's function does (the emitted module reads `x`,
    not `args_0`). NumPy's functions, and signatures that cannot be read or extended (a
    *args, keyword-only parameters or defaults before `appended`), are left as they are."""
    def decorate(derived):
        if is_numpy_function(fun):
            return derived
        try:
            signature = inspect.signature(fun)
            added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in appended]
            derived.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *added])
        except (TypeError, ValueError):
            pass
        return derived
    return decorate


def unary_to_nary(unary_operator):
    """`unary_operator(fun, x, *op_args, **op_kwargs)`, written for a function `fun` of one
    value `x`, as autograd's n-ary operator `op(fun, argnum=0, *op_args, **op_kwargs)`:
    that returns a function of the same arguments as `fun`, which applies the operator to
    `fun` as a function of argument(s) `argnum` alone, the others held at their values.

    `argnum` is checked when the operator is applied, and against the arguments at each
    call: s2s's ArgnumsTypeError (a TypeError) and ArgnumsRangeError (a ValueError)."""
    def nary_operator(fun, argnum=0, *op_args, **op_kwargs):
        normalize_argnums(argnum)
        several = isinstance(argnum, (tuple, list))   # then the values form one tuple

        @api_boundary
        def nary_fun(*args, **kwargs):
            positions = normalize_argnums(argnum, len(args))

            def unary_fun(x):
                substituted = list(args)
                for position, value in zip(positions, x if several else (x,)):
                    substituted[position] = value
                return call_user_code(fun, tuple(substituted), kwargs)
            x = tuple(args[p] for p in positions) if several else args[positions[0]]
            return call_user_code(unary_operator, (unary_fun, x, *op_args), op_kwargs)
        nary_fun.__name__ = f"{unary_operator.__name__}_of_{getattr(fun, '__name__', 'f')}"
        return nary_fun
    # Named as the operator, but not `functools.wraps`: its module would become the user's,
    # and s2s would stage this function's source as user code where it is called.
    nary_operator.__name__, nary_operator.__doc__ = unary_operator.__name__, unary_operator.__doc__
    return nary_operator
