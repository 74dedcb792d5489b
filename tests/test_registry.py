"""Every primitive has every rule that exists so far. Adding a pass adds its table here."""
import pytest

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import PRIMITIVES
from s2s.emit.pyexpr import INLINED_BEFORE_EMISSION, python_rules
from s2s.passes.jvp import jvp_rules

# A call primitive's emission is its inlined body.
RULE_TABLES = {"python emission": {**python_rules, **{p: "inlined" for p in INLINED_BEFORE_EMISSION}},
               "jvp": jvp_rules}

EXPECTED_PRIMITIVES = """
neg exp log log1p expm1 sin cos tan tanh logistic sqrt rsqrt abs sign floor ceil round erf
lgamma digamma add sub mul div pow integer_pow max min atan2 rem eq ne lt le gt ge and or not
xor select clamp convert_element_type iota broadcast_in_dim reshape transpose squeeze
expand_dims concatenate pad slice dynamic_slice dynamic_update_slice gather scatter_add
dot_general reduce_sum reduce_max reduce_min reduce_prod argmax argmin cumsum sort
stop_gradient cholesky triangular_solve lu
""".split()


def test_the_issue_primitives_all_exist():
    missing = [name for name in EXPECTED_PRIMITIVES if name not in PRIMITIVES]
    assert not missing, f"primitives not declared: {missing}"


@pytest.mark.parametrize("table", sorted(RULE_TABLES))
def test_every_primitive_has_a_rule_in_every_table(table):
    rules = RULE_TABLES[table]
    missing = sorted(name for name, prim in PRIMITIVES.items() if prim not in rules)
    assert not missing, f"primitives without a {table} rule: {missing}"


def test_every_primitive_has_abstract_eval_and_impl():
    for prim in PRIMITIVES.values():
        assert callable(prim.abstract_eval) and callable(prim.impl), prim
