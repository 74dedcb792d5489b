"""A cache folder or entry that another user owns, or that group or others can write, is
refused as ssh and pip refuse such files: a warning once per process, then the compile runs
uncached. Anyone who can write the folder could otherwise plant native code in it."""
import logging
import os

import pytest

from s2s_runtime import disk_cache
from tests.reliability import entries, get_or_compile
from tests.reliability import cache_dir  # noqa: F401,F811  (a fixture)

OTHER_UID = 4242


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees its own first warning (the module warns once per path per process)."""
    monkeypatch.setattr(disk_cache, "_warned", set())


def refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "s2s_runtime.disk_cache" and "not using" in r.getMessage()]


def test_new_folder_is_private(cache_dir):
    get_or_compile(("k",), b"code", [])
    assert os.stat(cache_dir).st_mode & 0o777 == 0o700
    [entry] = entries(cache_dir)
    assert entry.stat().st_mode & 0o077 == 0


def test_world_writable_folder_is_refused_once_and_runs_uncached(cache_dir, caplog):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    calls = []
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        for _ in range(3):
            assert get_or_compile(("k",), b"code", calls)[1] is False
    assert len(calls) == 3 and not entries(cache_dir)
    [message] = refusals(caplog)
    assert "writable by group or others (mode 0777)" in message and str(cache_dir) in message


def test_group_writable_entry_is_refused_and_replaced(cache_dir, caplog):
    calls = []
    get_or_compile(("k",), b"code", calls)
    [entry] = entries(cache_dir)
    os.chmod(entry, 0o666)
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        assert get_or_compile(("k",), b"code", calls)[1] is False
        assert get_or_compile(("k",), b"code", calls)[1] is True     # replaced by this user's own 0600 entry
    assert len(calls) == 2 and entry.stat().st_mode & 0o777 == 0o600
    [message] = refusals(caplog)
    assert "mode 0666" in message


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="chown needs root")
def test_folder_owned_by_another_user_is_refused(cache_dir, caplog):
    cache_dir.mkdir(mode=0o700)
    os.chown(cache_dir, OTHER_UID, -1)
    calls = []
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        assert get_or_compile(("k",), b"code", calls)[1] is False
        assert get_or_compile(("k",), b"code", calls)[1] is False
    assert not entries(cache_dir)
    [message] = refusals(caplog)
    assert f"owned by uid {OTHER_UID}" in message


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="chown needs root")
def test_entry_owned_by_another_user_is_refused(cache_dir, caplog):
    calls = []
    get_or_compile(("k",), b"code", calls)
    [entry] = entries(cache_dir)
    os.chown(entry, OTHER_UID, -1)
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        assert get_or_compile(("k",), b"code", calls)[1] is False
    assert len(calls) == 2 and entry.stat().st_uid == os.geteuid()
    [message] = refusals(caplog)
    assert f"owned by uid {OTHER_UID}" in message


def test_cache_of_another_uid_is_refused(cache_dir, caplog, monkeypatch):
    """The same check without root: this process pretends to be another user."""
    calls = []
    get_or_compile(("k",), b"code", calls)
    monkeypatch.setattr(disk_cache, "_current_uid", lambda: OTHER_UID)
    with caplog.at_level(logging.WARNING, logger="s2s_runtime.disk_cache"):
        assert get_or_compile(("k",), b"code", calls)[1] is False
    assert len(calls) == 2
    [message] = refusals(caplog)
    assert f"not by this user (uid {OTHER_UID})" in message and str(cache_dir) in message


def test_symlinked_entry_is_not_followed(cache_dir, tmp_path):
    calls = []
    get_or_compile(("k",), b"code", calls)
    [entry] = entries(cache_dir)
    elsewhere = tmp_path / "planted"
    os.replace(entry, elsewhere)
    os.symlink(elsewhere, entry)
    assert get_or_compile(("k",), b"code", calls)[1] is False and len(calls) == 2
    assert not entry.is_symlink()
