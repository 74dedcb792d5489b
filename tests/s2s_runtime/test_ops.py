"""s2s_runtime.ops: the generator-state words a loop run again carries."""
import numpy as np
import pytest

import s2s_runtime as rt

GENERATORS = {
    "RandomState": lambda seed: np.random.RandomState(seed),
    "PCG64": lambda seed: np.random.Generator(np.random.PCG64(seed)),
    "PCG64DXSM": lambda seed: np.random.Generator(np.random.PCG64DXSM(seed)),
    "Philox": lambda seed: np.random.Generator(np.random.Philox(seed)),
    "SFC64": lambda seed: np.random.Generator(np.random.SFC64(seed)),
    "MT19937": lambda seed: np.random.Generator(np.random.MT19937(seed)),
}


def _draws(generator):
    """Draws that use every part of a state: a normal (RandomState keeps the second of a
    pair), a 32-bit integer (a Generator keeps half a word) and 64-bit floats."""
    integers = generator.integers if isinstance(generator, np.random.Generator) else generator.randint
    return np.concatenate([generator.standard_normal(3), integers(0, 2**31, size=3).astype(float),
                           generator.random(5)])


@pytest.mark.parametrize("kind", sorted(GENERATORS))
@pytest.mark.parametrize("warm_up", [0, 1, 3])
def test_a_state_swapped_back_in_draws_the_same_numbers_again(kind, warm_up):
    generator = GENERATORS[kind](7)
    for _ in range(warm_up):   # (odd counts leave half-used words and cached normals)
        _draws(generator)
        generator.standard_normal(1)
    words = rt.generator_state(generator)
    assert words.dtype == np.uint64 and words.ndim == 1
    first = _draws(generator)
    after = rt.swap_generator_state(generator, words)
    np.testing.assert_array_equal(_draws(generator), first)
    np.testing.assert_array_equal(rt.generator_state(generator), after)
    assert len(after) == len(words)


def test_the_swap_returns_the_state_the_generator_had():
    generator, other = np.random.RandomState(1), np.random.RandomState(2)
    theirs, ours = rt.generator_state(other), rt.generator_state(generator)
    np.testing.assert_array_equal(rt.swap_generator_state(generator, theirs), ours)
    np.testing.assert_array_equal(generator.rand(4), other.rand(4))
