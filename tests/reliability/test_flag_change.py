"""An executable compiled under one XLA_FLAGS is not served to a run with other flags: the
flags (and everything else that changes the compiled code) are in the cache key."""
import textwrap

from s2s_runtime import disk_cache, xla
from tests.reliability import MULTIPLY_ADD_MODULE, entries, run_python
from tests.reliability import cache_dir  # noqa: F401,F811  (a fixture)

# XLA without its HLO passes leaves multiply and add unfused: the flag visibly changes the code.
NO_HLO_PASSES = "--xla_disable_all_hlo_passes=true"

COMPILE = textwrap.dedent("""
    import json
    from s2s_runtime.xla import Executable
    exe = Executable(%r, ["float32"])
    print(json.dumps({"hit": exe.cache_hit, "fused": "fusion" in exe.optimized_hlo_text()}))
""") % MULTIPLY_ADD_MODULE


def test_entry_compiled_with_other_xla_flags_is_not_served(cache_dir, tmp_path):
    assert run_python(COMPILE, tmp_path, {"XLA_FLAGS": NO_HLO_PASSES}) == {"hit": False, "fused": False}
    assert run_python(COMPILE, tmp_path, {"XLA_FLAGS": None}) == {"hit": False, "fused": True}
    assert len(entries(cache_dir)) == 2
    assert run_python(COMPILE, tmp_path, {"XLA_FLAGS": NO_HLO_PASSES}) == {"hit": True, "fused": False}
    assert run_python(COMPILE, tmp_path, {"XLA_FLAGS": None}) == {"hit": True, "fused": True}


def test_key_names_everything_that_changes_the_code():
    device = xla.devices()[0]
    key = "\n".join(str(part) for part in xla.disk_cache_key("module", device, xla.placement(device)[1]))
    client = xla.client()
    for expected in ("module", "jaxlib 0.", f"platform {client.platform} {client.platform_version}",
                     f"{device.device_kind} devices", "compile options", "option overrides",
                     "XLA_FLAGS=", "host CPU"):
        assert expected in key


def test_xla_flags_are_read_once_per_process(monkeypatch):
    """XLA parses XLA_FLAGS once per process: a later change of the variable does not change
    what compiles use, so it must not change the key either."""
    first = disk_cache.process_environment()
    monkeypatch.setenv("XLA_FLAGS", NO_HLO_PASSES + " --changed-later")
    assert disk_cache.process_environment() == first
