"""Random draws: `random_draw`, one call of a NumPy generator's sampling method, with every
rule.

Staged code that calls `np.random.randn(...)`, or a method of an `np.random.RandomState` or
`np.random.Generator` it reads, binds `random_draw` (the NumPy surface,
`numpy_api/random.py`, writes the other distributions from these draws the way NumPy
computes them). Its parameters say which generator (`source`, a `core.HostObject`), which
method (`standard_normal`, `random_sample`/`random`, `randint`/`integers`, `permutation`),
its static arguments, and the result's shape and dtype. It takes no operand.

- **A draw is made when the code runs**, never at staging: the NumPy implementation and the
  emitted module call the very generator the code names, so they draw the same numbers, in
  the same order, as the function run without s2s. The primitive is `effectful`: passes
  never drop, merge or duplicate a draw (`core.has_effects`), and remat saves its result
  rather than drawing again (`primitives/remat.py`).
- **Derivatives**: a sample is a constant (zero tangent); `mean + std * eps` differentiates
  in `mean` and `std` through the arithmetic the surface stages around the draw.
- **Batching** draws one sample per example (the batch axis first): the primitive reads
  the mapped axis. A function that draws once gets the numbers a loop over the examples
  draws; with several draws, each draw's samples for every example come together, so the
  numbers differ from a loop's, each an independent sample all the same.
- **XLA** draws from a state the lowered module takes as an input per generator
  (`RNG_STATE_TYPE`), which the caller seeds from that generator on each call:
  `stablehlo.rng_bit_generator` (THREE_FRY) makes the bits, turned into uniform [0, 1)
  floats by their top mantissa bits, normal ones by Box-Muller, integers by remainder,
  permutations by sorting the indices by random keys. The numbers differ from NumPy's
  stream; their distributions do not. Loops and branches that draw pass the states
  through (`emit/stablehlo.py`'s `drawn_in`: a loop carries them, so every step draws
  anew), and a pmap's devices each draw their own numbers (`states_per_replica`).

A loop whose reverse mode runs its steps again (checkpoints, no bound on its steps)
carries its generators' states as values (`generator_state`, `generator_swap`; see
`loops/replay.py`), so that a step run again draws what it drew the first time.
"""
from __future__ import annotations

import math

import numpy as np
import s2s_runtime as rt

from s2s import dtypes
from s2s.core import ShapedArray
from s2s.emit import stablehlo as _hlo
from s2s.emit.pyexpr import Expr, host_expression, py_value, register
from s2s.errors import UnsupportedFunctionError
from s2s.passes import jvp as _jvp, vmap as _vmap
from s2s.staging import Primitive

# What each method returns, when the generator is not told a dtype.
FLOAT_METHODS = ("standard_normal", "random_sample", "random")
INTEGER_METHODS = ("randint", "integers")


def _abstract(*, source, method, args, shape, dtype, batch):
    return ShapedArray(tuple(batch) + tuple(shape), np.dtype(dtype))


def _takes_dtype(source, method) -> bool:
    """Whether the generator's method is told the dtype (else it draws float64)."""
    return method in INTEGER_METHODS or isinstance(source.value, np.random.Generator)


def _impl(*, source, method, args, shape, dtype, batch):
    generator = source.value
    if method == "permutation":
        return rt.permutations(generator, args[0], tuple(batch))
    kwargs = {"dtype": np.dtype(dtype)} if _takes_dtype(source, method) else {}
    return np.asarray(getattr(generator, method)(*args, size=tuple(batch) + tuple(shape), **kwargs), dtype)


random_draw = Primitive("random_draw", _abstract, _impl, effectful=True)


def draw(source, method: str, shape=(), dtype=np.float64, args=()):
    """Stages one draw of `source`'s (a `core.HostObject`) `method`."""
    return random_draw.bind(source=source, method=method, args=tuple(args), shape=tuple(shape),
                            dtype=np.dtype(dtype), batch=())


# ---------------------------------------------------------------------------------------
# Python emission: the generator's own call, so the emitted module draws what NumPy would.


def _emit(eqn):
    p = eqn.params
    generator = host_expression(p["source"])
    if p["method"] == "permutation":
        if p["batch"]:
            return Expr(f"rt.permutations({generator}, {p['args'][0]}, {py_value(tuple(p['batch']))})")
        return Expr(f"{generator}.permutation({p['args'][0]})")
    parts = [py_value(a) for a in p["args"]] + [f"size={py_value(tuple(p['batch']) + tuple(p['shape']))}"]
    if _takes_dtype(p["source"], p["method"]):
        parts.append(f"dtype={py_value(np.dtype(p['dtype']))}")
    text = f"{generator}.{p['method']}({', '.join(parts)})"
    if not _takes_dtype(p["source"], p["method"]) and np.dtype(p["dtype"]) != dtypes.float64:
        text += f".astype({py_value(np.dtype(p['dtype']))})"   # (staged as float32: x64 off)
    return Expr(text)


register(random_draw, _emit, temp_name="noise")

# ---------------------------------------------------------------------------------------
# Derivatives and batching

_jvp.defzero(random_draw)


def _batch(axis, ins, dims, **params):
    return random_draw.bind(**{**params, "batch": (axis.size, *params["batch"])}), 0


_vmap.register(random_draw, _batch, reads_axis=True)

# ---------------------------------------------------------------------------------------
# A generator's state as a value: `generator_state[source]()` reads it, as 64-bit words
# (`s2s_runtime.generator_state`: the NumPy state's own fields, 629 words for a RandomState,
# 8 for a PCG64 Generator); `generator_swap[source](words)` gives the generator the state
# `words` and returns the one it had. Both are effectful: they are ordered among the draws.
# XLA's state (two words, `RNG_STATE_TYPE`) is the first two of as many words, the rest
# zeros, so one program reads the same on every backend.


def state_words(source) -> int:
    """How many 64-bit words hold `source`'s (a `core.HostObject`) state."""
    return len(rt.generator_state(source.value))


def _state_abstract(*operands, source, words):
    return ShapedArray((words,), _hlo.RNG_STATE_DTYPE)


generator_state = Primitive("generator_state", _state_abstract,
                            lambda *, source, words: rt.generator_state(source.value), effectful=True)
generator_swap = Primitive("generator_swap", _state_abstract,
                           lambda state, *, source, words: rt.swap_generator_state(source.value, state),
                           effectful=True)

register(generator_state, lambda eqn: Expr(f"rt.generator_state({host_expression(eqn.params['source'])})"),
         temp_name="state")
register(generator_swap, lambda eqn, state: Expr(
    f"rt.swap_generator_state({host_expression(eqn.params['source'])}, {state.text})"), temp_name="state")
_jvp.defzero(generator_state)
_jvp.defzero(generator_swap)


def _state_batch(axis, ins, dims, **params):
    """The generator is one for every example: the state read has no batch axis."""
    return generator_state.bind(**params), None


def _swap_batch(axis, ins, dims, **params):
    """A state given per example would need a generator per example, and there is one."""
    if dims[0] is not None:
        raise UnsupportedFunctionError("a generator's state taken per example",
                                       "draw from the generator itself; vmap gives each example its own numbers")
    return generator_swap.bind(*ins, **params), None


_vmap.register(generator_state, _state_batch)
_vmap.register(generator_swap, _swap_batch)

# ---------------------------------------------------------------------------------------
# StableHLO lowering


def _uniform(ctx, source, shape: tuple, dtype) -> str:
    """Uniform floats in [0, 1): the top mantissa bits of random words under the exponent
    of 1.0 make a float in [1, 2), less 1."""
    wide = np.dtype(dtype) == dtypes.float64
    uint, mantissa = (np.dtype(np.uint64), 52) if wide else (np.dtype(np.uint32), 23)
    one = 0x3FF0000000000000 if wide else 0x3F800000
    word = _hlo.tensor_type(ShapedArray(shape, uint))
    real = _hlo.tensor_type(ShapedArray(shape, dtype))
    bits = _hlo.random_bits(ctx, source, shape, uint)
    shift = ctx.constant(uint.itemsize * 8 - mantissa, uint, shape)
    top = ctx.op(f"stablehlo.shift_right_logical {bits}, {shift} : {word}")
    with_exponent = ctx.op(f"stablehlo.or {top}, {ctx.constant(one, uint, shape)} : {word}")
    one_to_two = ctx.op(f"stablehlo.bitcast_convert {with_exponent} : ({word}) -> {real}")
    return ctx.op(f"stablehlo.subtract {one_to_two}, {ctx.constant(1.0, dtype, shape)} : {real}")


def _normal(ctx, source, shape: tuple, dtype) -> str:
    """Standard normal floats by Box-Muller: sqrt(-2 log(1 - u1)) cos(2 pi u2)."""
    real = _hlo.tensor_type(ShapedArray(shape, dtype))
    u1, u2 = _uniform(ctx, source, shape, dtype), _uniform(ctx, source, shape, dtype)
    positive = ctx.op(f"stablehlo.subtract {ctx.constant(1.0, dtype, shape)}, {u1} : {real}")
    log = ctx.op(f"stablehlo.log {positive} : {real}")
    radius = ctx.op(f"stablehlo.sqrt {ctx.op(f'stablehlo.multiply {log}, {ctx.constant(-2.0, dtype, shape)} : {real}')}"
                    f" : {real}")
    angle = ctx.op(f"stablehlo.multiply {u2}, {ctx.constant(2 * math.pi, dtype, shape)} : {real}")
    return ctx.op(f"stablehlo.multiply {radius}, {ctx.op(f'stablehlo.cosine {angle} : {real}')} : {real}")


def _integers(ctx, source, shape: tuple, dtype, low: int, high: int) -> str:
    """Integers in [low, high): random 64-bit words modulo the range (a bias below
    range / 2**64), plus `low`."""
    uint = np.dtype(np.uint64)
    word = _hlo.tensor_type(ShapedArray(shape, uint))
    bits = _hlo.random_bits(ctx, source, shape, uint)
    offset = ctx.op(f"stablehlo.remainder {bits}, {ctx.constant(high - low, uint, shape)} : {word}")
    out = _hlo.tensor_type(ShapedArray(shape, dtype))
    converted = ctx.op(f"stablehlo.convert {offset} : ({word}) -> {out}")
    return ctx.op(f"stablehlo.add {converted}, {ctx.constant(low, dtype, shape)} : {out}")


def _permutations(ctx, source, shape: tuple, dtype) -> str:
    """Permutations of range(n) along the last axis of `shape` (batch + (n,)): the
    indices sorted by random 64-bit keys (an argsort; two keys alike, the one way a
    permutation could be less than uniform, have a chance below n**2 / 2**65)."""
    uint = np.dtype(np.uint64)
    keys_type = _hlo.tensor_type(ShapedArray(shape, uint))
    out = _hlo.tensor_type(ShapedArray(shape, dtype))
    keys = _hlo.random_bits(ctx, source, shape, uint)
    dimension = len(shape) - 1
    indices = ctx.op(f"stablehlo.iota dim = {dimension} : {out}")
    key, other, index, other_index = (ctx.fresh(h) for h in ("key", "other", "index", "other_index"))
    element, less = _hlo.tensor_type(ShapedArray((), dtype)), ctx.fresh("less")
    name = ctx.fresh("permutation")
    ctx.lines += [
        f'{name}:2 = "stablehlo.sort"({keys}, {indices}) <{{dimension = {dimension} : i64, is_stable = true}}> ({{',
        f"^bb0({key}: tensor<ui64>, {other}: tensor<ui64>, {index}: {element}, {other_index}: {element}):",
        f"  {less} = stablehlo.compare LT, {key}, {other}, UNSIGNED : (tensor<ui64>, tensor<ui64>) -> tensor<i1>",
        f"  stablehlo.return {less} : tensor<i1>",
        f"}}) : ({keys_type}, {out}) -> ({keys_type}, {out}){ctx.location}"]
    return f"{name}#1"


def _check_passed_in(ctx, source) -> None:
    if source not in ctx.host_states:   # (each op whose regions draw gives them the states: `_hlo.drawn_in`)
        raise UnsupportedFunctionError(
            f"a draw from {source!r} sits in a region its generator's state is not passed into",
            "jit it with backend='python', which draws from NumPy's generator")


def _lower(ctx, eqn):
    p = eqn.params
    _check_passed_in(ctx, p["source"])
    aval = eqn.outvars[0].aval
    if p["method"] in ("random_sample", "random"):
        return [_uniform(ctx, p["source"], aval.shape, aval.dtype)]
    if p["method"] == "standard_normal":
        return [_normal(ctx, p["source"], aval.shape, aval.dtype)]
    if p["method"] in INTEGER_METHODS:
        low, high = p["args"]
        return [_integers(ctx, p["source"], aval.shape, aval.dtype, low, high)]
    return [_permutations(ctx, p["source"], aval.shape, aval.dtype)]


_hlo.register(random_draw, _lower)

_XLA_WORDS = _hlo.RNG_STATE_AVAL.shape[0]


def _lower_generator_state(ctx, eqn):
    """XLA's state of the generator, padded with zeros to the words NumPy's takes."""
    source, words = eqn.params["source"], eqn.params["words"]
    _check_passed_in(ctx, source)
    padding = ShapedArray((words - _XLA_WORDS,), _hlo.RNG_STATE_DTYPE)
    out = _hlo.tensor_type(eqn.outvars[0].aval)
    return [ctx.op(f"stablehlo.concatenate {ctx.host_states[source]}, {ctx.constant(0, padding.dtype, padding.shape)},"
                   f" dim = 0 : ({_hlo.RNG_STATE_TYPE}, {_hlo.tensor_type(padding)}) -> {out}", f"{source.name}_state")]


def _lower_generator_swap(ctx, eqn, state):
    previous = _lower_generator_state(ctx, eqn)
    source = eqn.params["source"]
    ctx.host_states[source] = ctx.op(f"stablehlo.slice {state} [0:{_XLA_WORDS}] : ({_hlo.tensor_type(eqn.outvars[0].aval)})"
                                     f" -> {_hlo.RNG_STATE_TYPE}", f"{source.name}_state")
    return previous


_hlo.register(generator_state, _lower_generator_state)
_hlo.register(generator_swap, _lower_generator_swap)
