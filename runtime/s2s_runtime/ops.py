"""Array helpers that emitted modules call where plain NumPy has no one-liner."""
from __future__ import annotations

import numpy as np

# The tangent dtype of integer and boolean values (jax's float0): carries no data. Emitted
# modules name it `rt.float0` where a jaxpr holds float0 zeros.
float0 = np.dtype([("float0", np.void, 0)])


def trunc_divide(x, y):
    """Integer division rounding toward zero (C and XLA semantics; NumPy's // floors)."""
    # Not via abs and negation: abs(int8 -128) is -128, and negating unsigned values warns.
    q, r = np.divmod(x, y)
    q = q + ((r != 0) & ((x < 0) != (y < 0)))   # floor is one below trunc there; q < 0
    return np.asarray(q).astype(np.result_type(x, y))[()]


def iota(dtype, shape, dimension):
    """An array of `shape` counting 0, 1, ... along `dimension`."""
    shape = tuple(shape)
    line = np.arange(shape[dimension], dtype=dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(view), shape).copy()


def complex_from_parts(real, imag):
    """real + i*imag, exactly (`real + 1j * imag` has a NaN real part where imag is infinite).
    float32 parts make complex64, as in NumPy's promotion."""
    real, imag = np.asarray(real), np.asarray(imag)
    out = np.empty(np.broadcast_shapes(real.shape, imag.shape), np.result_type(real, imag, np.complex64))
    out.real, out.imag = real, imag
    return out[()]


def permutations(generator, n: int, batch: tuple = ()):
    """`generator.permutation(n)` drawn once per index of `batch`, one after the other, as
    a loop over a batch of examples would draw them (vmap of a draw of a permutation)."""
    if not batch:
        return generator.permutation(n)
    count = int(np.prod(batch))
    return np.stack([generator.permutation(n) for _ in range(count)]).reshape(*batch, n)


def generator_seed(generator) -> np.ndarray:
    """A fresh state for a compiled program's draws (two 64-bit words), taken from the NumPy
    generator (RandomState or Generator) its code draws from: each call advances it, so
    successive calls draw differently and a seeded program is reproducible."""
    draw = generator.integers if isinstance(generator, np.random.Generator) else generator.randint
    return draw(0, 2**64, size=2, dtype=np.uint64)


# A generator's state as 64-bit words: what a loop whose steps are run again (reverse mode
# recomputing them from checkpoints) carries, so that a step run again draws the numbers
# it drew the first time. The words are the leaves of NumPy's own state dictionary in its
# order (`RandomState.get_state(legacy=False)`, `Generator.bit_generator.state`): arrays
# element by element, integers as two words (PCG64's are 128-bit), floats by their bits;
# the names (strings) are not words, they stay as the generator has them.
_WORD = np.dtype(np.uint64)


def _state_dict(generator) -> dict:
    if isinstance(generator, np.random.RandomState):
        return generator.get_state(legacy=False)
    return generator.bit_generator.state


def _state_words(value, words: list) -> None:
    """Appends the words of `value` (a state dictionary or one of its leaves) to `words`:
    Python ints, and arrays for the array leaves."""
    if isinstance(value, dict):
        for item in value.values():
            _state_words(item, words)
    elif isinstance(value, np.ndarray):
        words.append(value.ravel())
    elif isinstance(value, float):
        words.append(int(np.float64(value).view(_WORD)))
    elif isinstance(value, int):
        if not 0 <= value < 2**128:
            raise ValueError(f"a generator state holds the integer {value}, outside what two 64-bit words keep")
        words += (value & (2**64 - 1), value >> 64)
    elif not isinstance(value, str):
        raise TypeError(f"a generator state holds a {type(value).__name__}, which has no words")


def _as_array(words: list) -> np.ndarray:
    """The words of `_state_words` as one array (runs of Python ints become one part)."""
    parts, run = [], []
    for word in words:
        if isinstance(word, int):
            run.append(word)
        else:
            if run:
                parts.append(np.array(run, _WORD))
                run = []
            parts.append(word.astype(_WORD))
    if run:
        parts.append(np.array(run, _WORD))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _state_from_words(template, words: np.ndarray, at: int):
    """`template` (the generator's state dictionary) with its leaves read from `words`
    from index `at`; returns (the state, the index past what it read)."""
    if isinstance(template, dict):
        state = {}
        for key, item in template.items():
            state[key], at = _state_from_words(item, words, at)
        return state, at
    if isinstance(template, np.ndarray):
        return words[at:at + template.size].astype(template.dtype).reshape(template.shape), at + template.size
    if isinstance(template, float):
        return float(words[at:at + 1].view(np.float64)[0]), at + 1
    if isinstance(template, int):
        return int(words[at]) | (int(words[at + 1]) << 64), at + 2
    return template, at


def generator_state(generator) -> np.ndarray:
    """The state of a NumPy generator (RandomState or Generator) as 64-bit words."""
    words: list = []
    _state_words(_state_dict(generator), words)
    return _as_array(words)


def swap_generator_state(generator, words) -> np.ndarray:
    """Gives `generator` the state `words` (of `generator_state`); returns the state it had."""
    template = _state_dict(generator)
    previous: list = []
    _state_words(template, previous)
    state, _ = _state_from_words(template, np.asarray(words, _WORD), 0)
    if isinstance(generator, np.random.RandomState):
        generator.set_state(state)
    else:
        generator.bit_generator.state = state
    return _as_array(previous)
