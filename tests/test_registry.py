"""Every primitive has every rule that exists so far. Adding a pass adds its table here."""
import pytest

import s2s  # noqa: F401  (declares every primitive)
from s2s.staging import PRIMITIVES
from s2s.emit.pyexpr import python_rules
from s2s.emit.stablehlo import stablehlo_rules
from s2s.passes.inline import call_primitives
from s2s.passes.jvp import jvp_rules
from s2s.passes.transpose import transpose_rules
from s2s.passes.vmap import batch_rules

# A call primitive's emission is its inlined body.
RULE_TABLES = {"python emission": {**python_rules, **{p: "inlined" for p in call_primitives}},
               "jvp": jvp_rules,
               "batching": batch_rules,
               "StableHLO lowering": {**stablehlo_rules, **{p: "inlined" for p in call_primitives}}}

EXPECTED_PRIMITIVES = """
neg exp log log1p expm1 sin cos tan tanh logistic sqrt rsqrt abs sign floor ceil round erf
lgamma digamma add sub mul div pow integer_pow max min atan2 rem eq ne lt le gt ge and or not
xor select clamp convert_element_type iota broadcast_in_dim reshape transpose squeeze
expand_dims concatenate pad slice dynamic_slice dynamic_update_slice gather scatter_add
dot_general reduce_sum reduce_max reduce_min reduce_prod argmax argmin cumsum sort
stop_gradient cholesky triangular_solve lu cond while_loop scan custom_root custom_linear_solve
remat name psum pmax pmin all_gather axis_index ppermute psum_scatter all_to_all pmap
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


# Primitives linear in (some of) their operands: transposition must handle each of them.
LINEAR_PRIMITIVES = """
add sub neg add_any mul div convert_element_type select broadcast_in_dim reshape transpose
squeeze expand_dims concatenate pad slice dynamic_slice dynamic_update_slice rev gather
scatter_add reduce_sum cumsum dot_general triangular_solve solve custom_vjp_lin cond scan
while_loop while_reverse custom_linear_solve psum all_gather ppermute psum_scatter all_to_all remat name pmap
real imag conj complex fft
""".split()


def test_every_linear_primitive_has_a_transpose_rule():
    missing = [n for n in LINEAR_PRIMITIVES if PRIMITIVES[n] not in transpose_rules]
    assert not missing, f"linear primitives without a transpose rule: {missing}"
    unexpected = sorted(p.name for p in transpose_rules if p.name not in LINEAR_PRIMITIVES)
    assert not unexpected, f"transpose rules for primitives not listed as linear: {unexpected}"
