"""s2s.staging: the collector pause around big stagings and what it leaves behind."""
import gc
import weakref

import pytest

from s2s import staging


class Node:
    """An object that can be part of a reference cycle (and be weakly referenced)."""


def _cycle_made_while_paused():
    """A weak reference to an object in a garbage cycle made inside `paused_gc`."""
    with staging.paused_gc():
        node = Node()
        node.self = node
        ref = weakref.ref(node)
        del node
    return ref


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pause_moves_what_it_made_to_the_oldest_generation(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    ref = _cycle_made_while_paused()
    assert gc.get_count()[0] < 100   # the young generation is (nearly) empty again
    assert ref() is not None and gc.isenabled()
    gc.collect(1)                    # a young pass does not see it: it is in the oldest
    assert ref() is not None
    gc.collect()                     # a full collection frees the cycle
    assert ref() is None


def test_s2s_runs_a_full_collection_once_it_has_moved_its_budget(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    monkeypatch.setattr(staging, "PROMOTION_BUDGET", 1000)
    gc.collect()
    first = _cycle_made_while_paused()
    assert first() is not None
    with staging.paused_gc():
        made = [Node() for _ in range(2000)]   # more than the budget
    assert first() is None and staging._promoted == 0
    del made


def test_a_full_collection_by_the_program_restarts_the_budget(collector_enabled, monkeypatch):
    """What s2s moved before a program's own `gc.collect()` was traversed by it: s2s does
    not collect again for those objects (a cost that grows with all the program holds)."""
    monkeypatch.setattr(staging, "PROMOTION_BUDGET", 1000)
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    with staging.paused_gc():
        kept = [Node() for _ in range(900)]
    assert 900 <= staging._promoted <= 1000
    gc.collect()
    full_collections = gc.get_stats()[2]["collections"]
    with staging.paused_gc():
        more = [Node() for _ in range(900)]   # over the budget counted from before gc.collect()
    assert gc.get_stats()[2]["collections"] == full_collections   # s2s ran none
    assert 900 <= staging._promoted <= 1000
    del kept, more


def test_a_program_that_freezes_objects_keeps_its_generations(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    frozen = Node()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        _cycle_made_while_paused()
        assert gc.get_freeze_count() == count   # nothing of ours frozen, nothing of its thawed
        assert staging._promoted == 0
    finally:
        gc.unfreeze()
    del frozen


def test_nested_pauses_promote_once_on_the_way_out(collector_enabled, monkeypatch):
    monkeypatch.setattr(staging, "_promoted", 0)
    with staging.paused_gc():
        with staging.paused_gc():
            kept = [Node() for _ in range(500)]
        assert not gc.isenabled() and staging._promoted == 0   # the inner one leaves it paused
    assert gc.isenabled() and staging._promoted >= 500
    del kept


def test_the_callers_garbage_is_collected_before_a_pause_not_moved(collector_enabled, monkeypatch):
    """Review: the move takes the young generations whole, so a cycle the caller dropped
    just before staging (an 80 MB one, say) would have waited for a full collection."""
    monkeypatch.setattr(staging, "_promoted", 0)
    gc.collect()
    node = Node()
    node.self = node
    dropped = weakref.ref(node)
    del node
    with staging.paused_gc():
        pass
    assert dropped() is None

