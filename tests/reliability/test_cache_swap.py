"""An entry copied over another key's file is a miss that gets replaced, never a hit: the
entry stores its full key and the load checks it."""
import logging
import shutil
import textwrap
from pathlib import Path

import numpy as np

from s2s_runtime import disk_cache
from tests.reliability import entries, get_or_compile, run_python
from tests.reliability import cache_dir  # noqa: F401,F811  (a fixture)


def test_entry_copied_over_another_keys_file_is_a_miss(cache_dir, caplog):
    sin_key, cos_key, calls = ("f_sin", "cpu"), ("f_cos", "cpu"), []
    get_or_compile(sin_key, b"sin code", calls)
    get_or_compile(cos_key, b"cos code", calls)
    sin_file, cos_file = disk_cache.entry_path(sin_key), disk_cache.entry_path(cos_key)
    shutil.copyfile(cos_file, sin_file)
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        exe, hit = get_or_compile(sin_key, b"sin code", calls)
    assert (hit, exe.payload) == (False, b"sin code")
    assert "another key" in caplog.text
    assert calls == [b"sin code", b"cos code", b"sin code"]
    assert disk_cache.decode(Path(sin_file).read_bytes(), sin_key) == b"sin code"   # replaced
    assert get_or_compile(sin_key, b"sin code", calls)[1] is True       # the replacement is served
    assert get_or_compile(cos_key, b"cos code", calls)[1] is True       # the original is untouched


RUN_JITTED = textwrap.dedent("""
    import json
    import numpy as np
    import s2s

    def f_sin(x):
        return np.sin(x) * 2.0

    def f_cos(x):
        return np.cos(x) * 2.0

    fn = {"f_sin": f_sin, "f_cos": f_cos}[%r]
    print(json.dumps(s2s.jit(fn)(np.array([0.0, 0.5, 1.0])).tolist()))
""")


def test_swapped_entry_is_not_served_through_jit(cache_dir, tmp_path):
    x = np.array([0.0, 0.5, 1.0])
    assert np.allclose(run_python(RUN_JITTED % "f_sin", tmp_path), 2 * np.sin(x))
    [sin_entry] = entries(cache_dir)
    assert np.allclose(run_python(RUN_JITTED % "f_cos", tmp_path), 2 * np.cos(x))
    [cos_entry] = entries(cache_dir) - {sin_entry}
    shutil.copyfile(cos_entry, sin_entry)
    assert np.allclose(run_python(RUN_JITTED % "f_sin", tmp_path), 2 * np.sin(x))   # recompiled, not cos
    assert np.allclose(run_python(RUN_JITTED % "f_cos", tmp_path), 2 * np.cos(x))
