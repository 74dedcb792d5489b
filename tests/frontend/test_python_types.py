"""Python's types on staged values: isinstance answers as NumPy's value would
(python_types.py), so code that chooses a path by type stages the path NumPy runs (an
answer that depends on what staging cannot see is refused), and arithmetic on Python
numbers gives Python numbers (weak), which take an array's dtype as in NumPy."""
import numbers

import numpy as np
import pytest

import s2s
from tests.helpers import check_function

TYPES = [np.ndarray, float, complex, int, np.generic, numbers.Number, numbers.Real,
         (np.ndarray, np.generic), (tuple, list), list, np.floating]


def type_answers(value):
    return [isinstance(value, t) for t in TYPES]


def scale_by_type_answers(x, y, z):
    """Folds the answers for array and Python-number arguments into the result,
    so the staged function equals NumPy's only if every answer is NumPy's."""
    answers = type_answers(x) + type_answers(y) + type_answers(z)
    weight = sum(2.0 ** k for k, answer in enumerate(answers) if answer)
    return x * weight + y + z


@pytest.mark.parametrize("x, y, z", [(np.arange(3.0), 1.5, 2.0 + 1.0j),
                                     (np.ones((2, 2), np.float32), 0.5, 3.0)])
def test_isinstance_of_staged_arguments_is_numpys_answer(x, y, z):
    check_function(scale_by_type_answers, x, y, z)


def test_isinstance_on_arrays_stages_through_grad_as_in_autograds_test():
    def checker(example, type_, truth):
        assert isinstance(example, type_) == truth
        return np.sum(example ** 2)
    for example, type_, truth in [(np.zeros(1), np.ndarray, True), (np.zeros(2), (tuple, list), False),
                                  (np.zeros((2, 3)), np.generic, False)]:
        np.testing.assert_allclose(s2s.grad(checker)(example + 1.0, type_, truth), 2 * (example + 1.0))


@pytest.mark.parametrize("classinfo", [np.ndarray, float, np.generic, numbers.Number,
                                       (np.ndarray, np.generic)])
def test_isinstance_of_a_strong_0d_value_is_refused_where_scalar_and_0d_array_differ(classinfo):
    """np.sum(x) is an np.float64 in NumPy, np.asarray(1.0) a 0-d array: both stage as f64[],
    and a 0-d array argument shares the staging of an np.float64 one, so no answer is safe."""
    def ask(x):
        return x * 2.0 if isinstance(np.sum(x), classinfo) else x
    with pytest.raises(s2s.StagingError, match="depends on whether it is a NumPy scalar, a 0-d array or a Python number") as caught:
        s2s.jit(ask)(np.ones(3))
    assert "test_python_types.py" in str(caught.value) and "np.ndim(x) == 0" in str(caught.value)


def scaled_by_python_arithmetic(x, y, n):
    return x * (y * 2.0) + x * (-y) + x * (y / 3 + 1) - (y ** 2) * x


@pytest.mark.parametrize("x", [np.ones(3, np.float32), np.arange(4, dtype=np.float16)])
def test_arithmetic_on_python_floats_stays_a_python_float_that_takes_the_arrays_dtype(x):
    """`y * 2.0` of a Python float y is a Python float in NumPy: float32 * it is float32.
    The operators staged it as an np.float64, which made the product float64."""
    check_function(scaled_by_python_arithmetic, x, 1.5, 2)
    assert s2s.jit(scaled_by_python_arithmetic)(x, 1.5, 2).dtype == x.dtype
