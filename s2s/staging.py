"""Building jaxprs: the builder that collects equations and the staged values it hands out.

The front end's AST walk and every pass that writes a new jaxpr use the same builder:
`Primitive.bind` appends an equation to the innermost active builder and returns
`Tracer`s for its outputs. Outside any builder, `bind` just runs the NumPy impl, so the
NumPy surface also works eagerly (handy in tests and at the REPL).

Values reach a builder in four ways: arguments (`new_arg`), Python scalars (weak-typed
literals), NumPy scalars (strong literals) and NumPy arrays or tracers of an enclosing
builder (constants: constvars whose values travel in the ClosedJaxpr).
"""
from __future__ import annotations

import contextlib
import gc
import itertools
import operator
import threading
from typing import Any, Callable

import numpy as np

from s2s import dtypes
from s2s.core import (ClosedJaxpr, Jaxpr, JaxprEqn, Literal, ShapedArray, Var, aval_of_value,
                      literal_value)
from s2s.errors import CONCRETE_HELP, ConcretizationError
from s2s.source_info import SourceInfo, UNKNOWN

_aval_of = operator.attrgetter("aval")   # (an atom's aval, read in C)


class Primitive:
    """An operation of the IR.

    Declared once with its shape/dtype rule (`abstract_eval(*avals, **params)`) and its
    NumPy implementation (`impl(*arrays, **params)`). Each pass keeps its own table of
    rules keyed by primitive; family modules in `s2s/primitives/` fill every table for
    the primitives they declare.
    """

    def __init__(self, name: str, abstract_eval: Callable, impl: Callable,
                 multiple_results: bool = False, effectful: bool = False):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} declared twice")
        self.name = name
        self.abstract_eval = abstract_eval
        self.impl = impl
        self.multiple_results = multiple_results
        # Running it changes something besides its results (a draw advances a generator):
        # see `core.has_effects`.
        self.effectful = effectful
        PRIMITIVES[name] = self

    def bind(self, *args, **params):
        """Stages the primitive into the active builder, or runs it on NumPy values."""
        builders = _state.builders   # (the innermost builder at once: every staged operation comes here)
        if builders:
            return builders[-1].add_eqn(self, args, params)
        return bind(self, args, params)

    def __repr__(self):
        return self.name


PRIMITIVES: dict[str, Primitive] = {}


class _StagingState(threading.local):
    """Each thread's staging state: its builders, innermost last, and its named axes (see
    `axis_env`). A thread sees these initial values the first time it reads one."""

    def __init__(self):
        self.builders: list[JaxprBuilder] = []
        self.axis_env: tuple = ()


_state = _StagingState()


def current_builder() -> "JaxprBuilder | None":
    builders = _state.builders
    return builders[-1] if builders else None


class Tracer:
    """A staged array: a variable of the jaxpr being built, with NumPy's array interface.

    Operators and ndarray methods are installed by `s2s.numpy_api`. Anything that needs
    a concrete value (`bool`, `int`, `float`, `range`) raises ConcretizationError.
    """

    __slots__ = ("builder", "variable")
    # Make NumPy's own operators defer to ours: `ndarray + Tracer` calls Tracer.__radd__.
    __array_priority__ = 1000
    __array_ufunc__ = None

    def __init__(self, builder: "JaxprBuilder", variable: Var):
        self.builder = builder
        self.variable = variable   # not `var`: that is ndarray.var, the variance

    @property
    def aval(self) -> ShapedArray:
        return self.variable.aval

    @property
    def shape(self) -> tuple[int, ...]:
        return self.variable.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.variable.aval.dtype

    @property
    def ndim(self) -> int:
        return self.variable.aval.ndim

    @property
    def size(self) -> int:
        return self.variable.aval.size

    @property
    def weak_type(self) -> bool:
        return self.variable.aval.weak_type

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def _concrete(self, what: str):
        raise ConcretizationError(
            f"{what} needs a concrete value, but this is a staged array "
            f"({self.aval.str_short()}) whose value is only known when the function runs",
            CONCRETE_HELP)

    def __bool__(self):
        self._concrete("using an array as a Python bool (in `if`, `while`, `and`, `or`, `not`)")

    def __int__(self):
        self._concrete("int()")

    def __float__(self):
        self._concrete("float()")

    def __complex__(self):
        self._concrete("complex()")

    def __index__(self):
        self._concrete("using an array as a Python integer (range(), an index, a shape)")

    def tolist(self):
        self._concrete(".tolist()")

    def item(self):
        self._concrete(".item()")

    def __array__(self, dtype=None, copy=None):
        self._concrete("converting to a NumPy array")

    __hash__ = object.__hash__

    def __repr__(self):
        hint = f" {self.variable.hint}" if self.variable.hint else ""
        return f"Tracer<{self.aval.str_short()}{hint}>"


class CopiedTracer(Tracer):
    """A staged value the user copied (`y = x.copy()`, `np.copy(x)`, `np.array(x)`).

    Staged values are immutable, so a copy stages nothing: it is the same variable. It is
    a separate object, though, so that the front end's in-place rules see what NumPy
    would: `y[0] = 1.0` after `y = x.copy()` changes no other name's array, even when `x`
    was a view (a slice) of another array."""

    __slots__ = ()


class JaxprBuilder:
    """Collects equations into a jaxpr. Use as a context manager to make it current."""

    def __init__(self):
        self.invars: list[Var] = []
        self.eqns: list[JaxprEqn] = []
        self.constvars: list[Var] = []
        self.consts: list[Any] = []
        self._const_index: dict[int, Var] = {}   # id(const value) -> its constvar
        self._const_names: dict[int, str] = {}    # id(const value) -> the user's name for it
        self._const_keepalive: list[Any] = []     # keeps the ids above unique while building
        self.source_info: SourceInfo = UNKNOWN
        # outvar -> the equation computing it, for `eqns[:_indexed]`: made when first asked
        # (`producer`), so that appending an equation writes nothing else.
        self._producers: dict[Var, JaxprEqn] = {}
        self._indexed = 0
        # Whether a jaxpr inlined here may lend it its equations (`_copied_into`): set where
        # no code runs in this builder that names its values, so that none of the lender's
        # variables is ever renamed (the staging of an s2s transform called directly, whose
        # equations are what it inlines: a derivative cached for the function it derives).
        self.shares_inlined = False

    def __enter__(self):
        _state.builders.append(self)
        return self

    def __exit__(self, *exc):
        popped = _state.builders.pop()
        assert popped is self, "builders must be exited in the order they were entered"

    def at(self, source_info: SourceInfo) -> "_At":
        """Equations added inside get `source_info` (a context manager; passes enter one
        per equation, so it is a small class rather than a generator)."""
        return _At(self, source_info)

    def new_arg(self, aval: ShapedArray, hint: str | None = None) -> Tracer:
        var = Var(aval, hint)
        self.invars.append(var)
        return Tracer(self, var)

    def adopt(self, closed: ClosedJaxpr) -> list:
        """Makes a new builder's jaxpr start as `closed`, with its very inputs, equations and
        constants: what a `new_arg` per input and `inline_jaxpr(closed, args)` would stage,
        without copying an equation (the forward part of a 16k-equation grad, say). Returns
        `closed`'s outputs as this builder's values. `closed` shares its variables with
        what is built, so the caller builds from it only once."""
        assert not (self.invars or self.eqns or self.constvars), "adopt starts a new builder"
        jaxpr = closed.jaxpr
        self.invars.extend(jaxpr.invars)
        _shared_into(self, jaxpr.eqns, {})
        for var, value in zip(jaxpr.constvars, closed.consts):
            self._const_index[id(value)] = var
            self._const_keepalive.append(value)
            self.constvars.append(var)
            self.consts.append(value)
        return [literal_value(v) if isinstance(v, Literal) else Tracer(self, v) for v in jaxpr.outvars]

    def atom(self, value) -> Var | Literal:
        """The jaxpr atom that stands for `value` in this builder."""
        if isinstance(value, Literal):
            return value
        if isinstance(value, Tracer):
            if value.builder is self:
                return value.variable
            return self._constvar(value, value.aval)
        if isinstance(value, (bool, int, float, complex, np.generic)):
            aval = aval_of_value(value)
            if isinstance(value, np.generic):
                value = value.astype(aval.dtype)
            return Literal(value, aval)
        if isinstance(value, np.ndarray):
            if value.ndim == 0:
                return self.atom(value[()])
            value = value.astype(dtypes.canonicalize_dtype(value.dtype), copy=False)
            return self._constvar(value, aval_of_value(value))
        raise TypeError(f"s2s cannot stage a value of type {type(value).__name__}: {value!r}")

    def _atoms(self, args) -> list:
        """The atoms of `args` (this builder's own tracers, most operands, at once)."""
        atoms = []   # (a loop, not a comprehension: every staged operation comes here)
        for a in args:
            atoms.append(a.variable if type(a) is Tracer and a.builder is self else self.atom(a))
        return atoms

    def name_constant(self, value, name: str) -> None:
        """Remembers the user's name for a constant (a global array), for readable output."""
        self._const_names.setdefault(id(value), name)
        self._const_keepalive.append(value)

    def _constvar(self, value, aval: ShapedArray) -> Var:
        var = self._const_index.get(id(value))
        if var is None:
            var = Var(aval, self._const_names.get(id(value)))
            self._const_index[id(value)] = var
            self._const_keepalive.append(value)
            self.constvars.append(var)
            self.consts.append(value)
        return var

    def add_eqn(self, primitive: Primitive, args, params: dict):
        invars = self._atoms(args)
        out_avals = primitive.abstract_eval(*map(_aval_of, invars), **params)
        if not primitive.multiple_results:   # (written out: every staged operation comes here)
            out = Var(out_avals)
            self.eqns.append(JaxprEqn(primitive, invars, [out], params, self.source_info))
            return Tracer(self, out)
        outvars = [Var(aval) for aval in out_avals]
        self.eqns.append(JaxprEqn(primitive, invars, outvars, params, self.source_info))
        return [Tracer(self, v) for v in outvars]

    def restage(self, eqn: JaxprEqn, args) -> list | None:
        """`eqn` staged again here on `args` (inlining a jaxpr), when every operand has the
        abstract value `eqn`'s has: a primitive's output avals depend on its operands'
        avals and its parameters only, so they are `eqn`'s, and the shape rule need not
        run again. Its outputs keep `eqn`'s names and its line. None when an operand's
        aval differs (the caller binds the primitive as usual)."""
        invars = self._atoms(args)
        for new, old in zip(invars, eqn.invars):
            if new.aval is not old.aval and new.aval != old.aval:
                return None
        outvars = [Var(v.aval, v.hint) for v in eqn.outvars]
        self.eqns.append(JaxprEqn(eqn.primitive, invars, outvars, eqn.params, eqn.source_info))
        return [Tracer(self, v) for v in outvars]

    def producer(self, var: Var) -> JaxprEqn | None:
        """The equation that computed `var` (None for inputs and constants)."""
        return self._indexed_producers().get(var)

    def _indexed_producers(self) -> dict:
        """outvar -> its equation, for every equation staged so far (indexing those added
        since the last call: staging a 16k-equation function asks a handful of times)."""
        producers, eqns = self._producers, self.eqns
        for eqn in itertools.islice(eqns, self._indexed, None):
            for v in eqn.outvars:
                producers[v] = eqn
        self._indexed = len(eqns)
        return producers

    def drop_equations_from(self, mark: int) -> None:
        """Forgets the equations staged since there were `mark` (an attempt given up)."""
        del self.eqns[mark:]
        self._producers, self._indexed = {}, 0

    def build(self, outs) -> ClosedJaxpr:
        outvars = [self.atom(o) for o in outs]
        return ClosedJaxpr(Jaxpr(self.constvars, self.invars, outvars, self.eqns), self.consts)


class _At:
    """`JaxprBuilder.at`: the builder's source_info set while inside."""

    __slots__ = ("builder", "source_info", "saved")

    def __init__(self, builder: JaxprBuilder, source_info: SourceInfo):
        self.builder = builder
        self.source_info = source_info

    def __enter__(self):
        self.saved, self.builder.source_info = self.builder.source_info, self.source_info

    def __exit__(self, *exc):
        self.builder.source_info = self.saved


@contextlib.contextmanager
def named_axis(name, size: int):
    """Binds the axis `name` (of `size` examples) while a mapped function is staged
    (`vmap(f, axis_name=name)` stages `f` under it), so collectives in `f` (`psum(x, name)`)
    know it exists and how big it is. Innermost last."""
    env = _state.axis_env
    _state.axis_env = env + ((name, size),)
    try:
        yield
    finally:
        _state.axis_env = env


def axis_env() -> tuple:
    """The named axes bound where staging is now, as ((name, size), ...), outermost first:
    part of every staging cache key, since collectives stage differently under it."""
    return _state.axis_env


@contextlib.contextmanager
def paused_gc():
    """Pauses Python's cyclic garbage collector while a big IR is built.

    Staging and emission allocate many small objects that form no cycles; the collector's
    generational passes over the growing graph made staging cost grow faster than the
    number of equations (measured: 25 us/eqn at 1k equations, 46 at 4k; flat with this).
    On the way out, what the pause left behind goes to the oldest generation at once
    (`_promote_young_objects`).
    """
    was_enabled = gc.isenabled()
    if was_enabled:   # the young generations then hold only what is made while paused
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _promote_young_objects()
            gc.enable()


# Objects moved to the oldest generation untraversed since the last full collection (by
# s2s, Python or the program: `_full_collections` is gc's count of them when s2s last
# looked), and how many s2s moves before it runs the next one itself.
_promoted = 0
_full_collections = 0
PROMOTION_BUDGET = 2_000_000


def _promote_young_objects() -> None:
    """Moves the objects made while the collector was paused (by any thread; what staging
    keeps: jaxprs, cached artifacts) to the oldest generation without traversing them:
    the collector's next young-generation pass would otherwise walk every one of them at
    once, and again at the middle generation (a tenth of a 16k-equation grad's first
    staging). `freeze` then `unfreeze` is that move (each splices lists), as documented
    for `gc.unfreeze`. It moves the young generations whole, so `paused_gc` collects them
    before it pauses: the caller's garbage is never among what is moved. Cycles among the
    moved objects wait for a full collection; s2s runs one itself once it has moved
    `PROMOTION_BUDGET` objects this way since the last one, whoever ran it (a full
    collection traverses every object, and a program's `gc.collect()` has seen all that
    s2s moved before it: collecting again would find nothing new, at a cost that grows
    with everything the program holds). A program that freezes objects itself (before a
    fork, say) keeps its generations as they are."""
    global _promoted, _full_collections
    if gc.get_freeze_count():
        return
    full_collections = gc.get_stats()[2]["collections"]
    if full_collections != _full_collections:
        _full_collections, _promoted = full_collections, 0
    _promoted += gc.get_count()[0]
    if _promoted > PROMOTION_BUDGET:
        _promoted = 0
        gc.collect()
        return
    gc.freeze()
    gc.unfreeze()


def bind(primitive: Primitive, args, params: dict):
    builder = current_builder()
    if builder is None:
        for a in args:
            if isinstance(a, Tracer):
                builder = a.builder
                break
    if builder is not None:
        return builder.add_eqn(primitive, args, params)
    # Eagerly: check the shape rule so errors match staged behaviour, then run NumPy.
    values = [literal_value(a) if isinstance(a, Literal) else np.asarray(a) for a in args]
    primitive.abstract_eval(*[aval_of_value(v) for v in values], **params)
    return primitive.impl(*values, **params)



def inline_jaxpr(closed: ClosedJaxpr, args, expand_calls=frozenset(), map_params=None,
                 lent: bool = False) -> list:
    """Stages every equation of `closed` into the current builder, applied to `args`.

    Variable names (hints) and source locations carry over, so a jaxpr built by a pass and
    inlined into a user's function still reads with the user's names and lines. Equations
    of the call primitives in `expand_calls` are replaced by their `call` jaxpr's equations
    (where it is not None),
    and `map_params` (if given) rewrites every other equation's parameters.

    `lent`: the caller vouches that `closed` is its own, made in another builder for this
    call and read by nothing after it (a gradient's backward part): its equations then join
    this builder as they are, as in one that `shares_inlined`, and none of its variables is
    looked for among this builder's.
    """
    builder = current_builder()
    if map_params is None and not expand_calls:
        copied = _copied_into(builder, closed, args, lent)
        if copied is not None:
            return copied
    jaxpr = closed.jaxpr
    env: dict[Var, Any] = {}

    env.update(zip(jaxpr.constvars, closed.consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [v if type(v) is Literal else env[v] for v in eqn.invars]
        expand = eqn.primitive in expand_calls and eqn.params["call"] is not None
        if map_params is None and not expand:
            outs = builder.restage(eqn, ins)
            if outs is not None:
                env.update(zip(eqn.outvars, outs))
                continue
        with builder.at(eqn.source_info):
            if expand:
                outs = inline_jaxpr(eqn.params["call"], ins, expand_calls, map_params)
            else:
                params = eqn.params if map_params is None else map_params(eqn.params)
                outs = eqn.primitive.bind(*ins, **params)
                outs = outs if eqn.primitive.multiple_results else [outs]
        for v, out in zip(eqn.outvars, outs):
            if isinstance(out, Tracer) and out.variable.hint is None:
                out.variable.hint = v.hint
            env[v] = out
    # A literal output is returned as its value (a NumPy scalar), never as an IR atom.
    return [literal_value(v) if isinstance(v, Literal) else env[v] for v in jaxpr.outvars]


def copy_equations(builder: JaxprBuilder, eqns, env: dict, source_info: SourceInfo | None = None) -> None:
    """Appends to `builder` a copy of each of `eqns` on new variables named as its own,
    reading `env[v]` for each variable operand and adding each copied output to `env`,
    at `source_info` (None: each equation's own line). No shape rule runs: the caller
    vouches that every operand has the aval of the variable it stands for."""
    append = builder.eqns.append
    for eqn in eqns:
        invars = []   # (a loop, not a comprehension: one frame fewer for each of 48k equations)
        for v in eqn.invars:
            invars.append(env[v] if type(v) is Var else v)
        info = eqn.source_info if source_info is None else source_info
        if len(eqn.outvars) == 1:   # (most equations: written out)
            (old,) = eqn.outvars
            new = env[old] = Var(old.aval, old.hint)
            append(JaxprEqn(eqn.primitive, invars, [new], eqn.params, info))
        else:
            outvars = [Var(v.aval, v.hint) for v in eqn.outvars]
            append(JaxprEqn(eqn.primitive, invars, outvars, eqn.params, info))
            env.update(zip(eqn.outvars, outvars))


def _copied_into(builder: JaxprBuilder, closed: ClosedJaxpr, args, lent: bool = False) -> list | None:
    """`inline_jaxpr` without parameter maps or calls to expand, in its common case: no
    constants, and every argument is one of `builder`'s values (or a literal) with the
    aval of the input it binds. Then every equation keeps its avals (a primitive's output
    avals depend on its operands' avals and its parameters only), so each is copied as
    it is onto new variables named as its own, with no shape rule and no check per
    operand (`JaxprBuilder.restage` checks each). None otherwise (`inline_jaxpr` re-stages
    the equations one by one)."""
    jaxpr = closed.jaxpr
    if closed.consts:
        return None
    env: dict = {}
    for v, arg in zip(jaxpr.invars, args):
        if type(arg) is Tracer and arg.builder is builder:
            atom = arg.variable
        elif type(arg) is Literal:
            atom = arg
        else:
            return None
        if atom.aval is not v.aval and atom.aval != v.aval:
            return None
        env[v] = atom
    if not (lent and _shared_into(builder, jaxpr.eqns, env, made_elsewhere=True)
            or builder.shares_inlined and _shared_into(builder, jaxpr.eqns, env)):
        copy_equations(builder, jaxpr.eqns, env)
    given = dict(zip(jaxpr.invars, args))
    # (a shared equation's outputs are the jaxpr's own variables: not in `env`)
    return [literal_value(v) if isinstance(v, Literal) else given[v] if v in given else Tracer(builder, env.get(v, v))
            for v in jaxpr.outvars]


def _shared_into(builder: JaxprBuilder, eqns: list, inputs: dict, made_elsewhere: bool = False) -> bool:
    """Appends `eqns` to `builder` as they are, but for those that read one of `inputs`
    (variable -> this builder's atom), copied onto that atom with the same outputs: the
    16k-equation chain's gradient is not copied again (37k equations) when it is all a
    function stages (and `JaxprBuilder.adopt` appends a jaxpr's equations, with no inputs
    to replace). False, appending nothing, where one of their variables is defined in the
    builder already (the same jaxpr inlined twice): every variable is defined once. The
    builder's equations are not searched where the caller knows they were `made_elsewhere`
    (in another builder, for this call alone: `inline_jaxpr`'s `lent`)."""
    if builder.eqns and not made_elsewhere:
        producers = builder._indexed_producers()
        if any(v in producers for eqn in eqns for v in eqn.outvars):
            return False
    if not inputs:
        builder.eqns.extend(eqns)
        return True
    append = builder.eqns.append
    replaced = inputs.keys()
    for eqn in eqns:
        if not replaced.isdisjoint(eqn.invars):
            eqn = JaxprEqn(eqn.primitive, [inputs.get(v, v) for v in eqn.invars], eqn.outvars, eqn.params,
                           eqn.source_info)
        append(eqn)
    return True
