"""autograd's functions met in staged code, resolved to what s2s stages for them.

A program written for autograd calls autograd's wrappers: the functions of
`autograd.numpy` (`import autograd.numpy as np`) and the `@primitive`s it defines itself,
with the vjps and jvps it registered with autograd. A primitive is a Python function
(`f_wrapped` in autograd/tracer.py) that calls the function it wraps, so staging its source
would differentiate that function's body and silently drop the rules autograd
differentiates it by. `call_user` asks `autograd_callee` what a call of one stages:

- a function of autograd's NumPy and SciPy modules (`autograd.numpy` and its `linalg`,
  `fft` and `random`, `autograd.scipy.*`) is the function it stands for: a primitive there
  is its `.fun` (`anp.sin.fun is np.sin`), a Python function there (`anp.mean`,
  `anp.concatenate`, `anp.where`) NumPy's function of the same name. autograd's rules for
  them are NumPy's derivatives, which are s2s's own rules for those functions;
- any other primitive (a user's, or a user's `primitive(np.sin)` with rules of its own) is
  handed to the translator `s2s.autograd.extend` installs (`translate_autograd_primitives`):
  it lives a layer above, where custom rules are made, and binds the call with autograd's
  rules;
- the rest of autograd's Python code (`autograd.builtins`, helpers) is staged from its
  source as any user code is.

s2s never imports autograd: it reads the function objects, and autograd's modules from
`sys.modules`, where the user's program put them.
"""
from __future__ import annotations

import sys
import types
import weakref
from typing import Callable

import numpy as np

from s2s.errors import UnsupportedFunctionError

__all__ = ["autograd_callee", "translate_autograd_primitives"]

# The modules of autograd that stand for NumPy's and SciPy's: each is the module (or object,
# `autograd.scipy.stats.norm`) named as it without the `autograd.` prefix.
_LIBRARY_PREFIXES = ("autograd.numpy", "autograd.scipy")

_translator: Callable | None = None


def translate_autograd_primitives(translator: Callable) -> None:
    """Installs `translator(primitive) -> function`: what a user's autograd primitive stages
    as (`s2s.autograd.extend`, which makes custom rules of autograd's vjps and jvps)."""
    global _translator
    _translator = translator


def autograd_callee(fn):
    """What a call of `fn` stages when `fn` is one of autograd's wrappers (see the module's
    docstring), or None when it is not (and for autograd's plain Python code)."""
    is_primitive = getattr(fn, "_is_autograd_primitive", False) is True
    if not is_primitive and not (isinstance(fn, types.FunctionType)
                                 and (fn.__module__ or "").startswith("autograd.")):
        return None
    counterpart = _library_counterpart(fn, is_primitive)
    if counterpart is not None:
        return counterpart
    if not is_primitive:
        return None
    if _translator is None:
        raise UnsupportedFunctionError(
            f"{fn.__name__} is an autograd primitive, and s2s.autograd.extend, which stages "
            "autograd's rules, is not imported", "import s2s (it imports s2s.autograd.extend)")
    return _translator(fn)


# autograd's function -> the NumPy or SciPy function it stands for, once found (autograd's
# modules do not change; one imported later can only add functions).
_counterparts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _library_counterpart(fn, is_primitive: bool):
    """The NumPy or SciPy function `fn` stands for, if it is one of autograd's NumPy and
    SciPy modules; else None. A primitive there that wraps a function of autograd's own
    (`anp.make_diagonal`) has none: its rules are autograd's."""
    found = _counterparts.get(fn)
    if found is None:
        found = _find_counterpart(fn, is_primitive)
        if found is not None:
            _counterparts[fn] = found
    return found


def _find_counterpart(fn, is_primitive: bool):
    """`_library_counterpart`, looked for in autograd's NumPy and SciPy modules loaded now."""
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith(_LIBRARY_PREFIXES) or not isinstance(module, types.ModuleType):
            continue
        name = _name_in(module, fn)
        if name is None:
            continue
        if is_primitive:
            return fn.fun if _is_library_function(fn.fun) else None
        counterpart = _counterpart_of(module_name)   # (a module's own names only: no deprecated aliases)
        found = vars(counterpart).get(name) if isinstance(counterpart, types.ModuleType) else \
            getattr(counterpart, name, None)
        if found is not None:
            return found
    return None


# module name -> (the module object indexed, {id(value): (name, value)} of its namespace)
_namespaces: dict[str, tuple[types.ModuleType, dict]] = {}


def _name_in(module: types.ModuleType, fn) -> str | None:
    """The name `fn` is bound to in `module`, or None (its namespace indexed once)."""
    indexed = _namespaces.get(module.__name__)
    if indexed is None or indexed[0] is not module:
        indexed = _namespaces[module.__name__] = (module, {})
        for name, value in vars(module).items():
            if callable(value):
                indexed[1].setdefault(id(value), (name, value))
    name, value = indexed[1].get(id(fn), (None, None))
    return name if value is fn else None


def _counterpart_of(module_name: str):
    """The NumPy or SciPy module or object an autograd module stands for (`numpy.linalg`
    for `autograd.numpy.linalg`, `scipy.stats.norm` for `autograd.scipy.stats.norm`), or
    None for one of autograd's own (`autograd.numpy.numpy_vjps`)."""
    parts = module_name.split(".")[1:]
    for cut in range(len(parts), 0, -1):
        found = sys.modules.get(".".join(parts[:cut]))
        if found is None:
            continue
        for part in parts[cut:]:
            found = getattr(found, part, None)
        return found
    return None


def _is_library_function(fn) -> bool:
    """Whether `fn` is NumPy's or SciPy's (a ufunc, a function, a method of a generator or
    of a SciPy distribution)."""
    if isinstance(fn, np.ufunc):
        return True
    owner = getattr(fn, "__self__", None)
    module = getattr(fn, "__module__", None) or (type(owner).__module__ if owner is not None else "")
    return module.partition(".")[0] in ("numpy", "scipy")
