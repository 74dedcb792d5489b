"""A build folder never serves an entry that mixes two versions (issue 39).

Two versions of one module, `mixed.py` in two checkouts: A closes over one table and takes
tanh, B over another and takes sin, so their executables and constants both differ and an
executable run on the other version's constants computes numbers that match neither. Three
ways a folder used to mix them: a file of another build copied in (load checked only the
executable's hash), a compile killed between its writes (the constants were written in
place, before the new executable and the manifest), and two compiles into one folder at
once (each wrote the same file names; the manifest merged last named the other's files).
Each check loads every entry of the manifest and holds it to NumPy's values of A or B.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from s2s.batch_compile import compile_paths, read_manifest
from s2s_runtime import manifest

VERSION = '''\
import numpy as np
import s2s

TABLE = np.arange(12.0).reshape(4, 3) / {scale}


@s2s.export("f64[2,4]", transforms=("primal", "grad"))
def project(x):
    return np.sum(np.{activation}(x @ TABLE))
'''
VERSIONS = {"A": {"scale": 10.0, "activation": "tanh"}, "B": {"scale": -7.0, "activation": "sin"}}
DERIVATIVES = {"tanh": lambda z: 1 - np.tanh(z) ** 2, "sin": np.cos}
X = np.linspace(-1, 1, 8).reshape(2, 4)
NAMES = ("mixed.project", "mixed.grad_project")


def expected(version: str) -> dict:
    """NumPy's results of each entry of `version` on X."""
    table = np.arange(12.0).reshape(4, 3) / VERSIONS[version]["scale"]
    activation = VERSIONS[version]["activation"]
    z = X @ table
    return {"mixed.project": np.sum(getattr(np, activation)(z)),
            "mixed.grad_project": DERIVATIVES[activation](z) @ table.T}


def checkout(root, version: str) -> str:
    """The path of `mixed.py` of `version`, in a checkout folder of its own."""
    folder = root / f"checkout_{version}"
    folder.mkdir(exist_ok=True)
    (folder / "mixed.py").write_text(VERSION.format(**VERSIONS[version]))
    return str(folder / "mixed.py")


def version_served(build, names=NAMES) -> str:
    """'A' or 'B': the version every entry `names` of `build` computes (the test fails when
    an entry is refused, computes neither, or the entries disagree)."""
    served = set()
    for name in names:
        got = manifest.load(str(build / "manifest.json"), name)(X)
        matches = [v for v in VERSIONS if np.allclose(got, expected(v)[name], rtol=1e-12, atol=0)]
        assert matches, f"{name} computes neither version: {got}"
        served.update(matches)
    assert len(served) == 1, served
    return served.pop()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Folders with version A and version B compiled, kept pristine: a test copies them."""
    root = tmp_path_factory.mktemp("builds")
    for version in VERSIONS:
        assert compile_paths([checkout(root, version)], str(root / f"build_{version}")) == 0
    return root


def copy_build(builds, version: str, into):
    shutil.copytree(builds / f"build_{version}", into)
    return into


# ---------------------------------------------------------------------------------------
# A file of another build copied in


def entry_files(build, name: str) -> dict:
    return json.loads((build / "manifest.json").read_text())["entries"][name]["files"]


@pytest.mark.parametrize("kind", ["consts", "exe", "mlir", "hlo"])
def test_a_file_copied_from_another_build_is_refused_by_name(builds, tmp_path, kind):
    """Regression: B's folder with A's constants file copied over B's computed numbers that
    match neither version (load checked the executable's hash alone)."""
    build = copy_build(builds, "B", tmp_path / "build")
    for name in NAMES:
        ours, theirs = entry_files(build, name)[kind], entry_files(builds / "build_A", name)[kind]
        shutil.copyfile(builds / "build_A" / theirs, build / ours)
        with pytest.raises(manifest.ManifestError,
                           match=rf"{re.escape(name)}.*{re.escape(ours)} does not match.*recompile"):
            manifest.load(str(build / "manifest.json"), name)


def test_an_entry_without_the_hash_of_a_file_it_names_is_refused(builds, tmp_path):
    """A manifest that records no hash for a file (the constants' was never checked) is
    never loaded unverified."""
    build = copy_build(builds, "B", tmp_path / "build")
    document = json.loads((build / "manifest.json").read_text())
    del document["entries"]["mixed.project"]["consts_sha256"]
    (build / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(manifest.ManifestError, match=r"records no hash.*consts.*recompile"):
        manifest.load(str(build / "manifest.json"), "mixed.project")
    assert version_served(build, ["mixed.grad_project"]) == "B"


# ---------------------------------------------------------------------------------------
# A compile killed between its writes


class Killed(BaseException):
    """The simulated end of a killed process: no `except Exception` of s2s catches it."""


def test_a_compile_killed_at_any_write_leaves_the_old_or_the_new_build(builds, tmp_path, monkeypatch):
    """B compiled over A's folder, killed just before and just after each of its renames
    into the folder in turn (`os.replace` is every write's last step): after each kill the
    folder serves all of A or all of B, and the next compile leaves no file that its
    manifest does not list."""
    source = checkout(tmp_path, "B")
    real_replace, seen = os.replace, []
    renames = {}
    for when in ("before", "after"):
        for kill_at in range(1, 40):
            build = copy_build(builds, "A", tmp_path / f"build_{when}_{kill_at}")

            def replace(src, dst, *args, **kwargs):
                if os.path.dirname(os.path.abspath(dst)) != str(build):
                    return real_replace(src, dst, *args, **kwargs)
                seen.append(dst)
                if len(seen) == kill_at and when == "before":
                    raise Killed(dst)
                real_replace(src, dst, *args, **kwargs)
                if len(seen) == kill_at:
                    raise Killed(dst)
            seen.clear()
            monkeypatch.setattr(os, "replace", replace)
            try:
                compile_paths([source], str(build))
            except Killed:
                pass
            else:
                renames[when] = kill_at - 1   # a run with fewer renames: every one was tried
                break
            finally:
                monkeypatch.setattr(os, "replace", real_replace)
            version_served(build)
            assert compile_paths([source], str(build)) == 0
            assert version_served(build) == "B"
            assert sorted(os.listdir(build)) == listed_files(build)
    assert renames == {"before": 2 * 4 + 1, "after": 2 * 4 + 1}   # 4 files per entry, then the manifest


def listed_files(build) -> list[str]:
    entries = read_manifest(str(build))["entries"].values()
    return sorted(["manifest.json"] + [f for e in entries for f in e["files"].values()])


KILLER = """\
import os, signal, sys
from s2s.batch_compile import compile_paths

source, build = sys.argv[1:]
real_replace = os.replace

def replace(src, dst, *args, **kwargs):
    if os.path.abspath(dst) == os.path.join(build, "manifest.json"):
        os.kill(os.getpid(), signal.SIGKILL)   # every file written, the manifest not yet
    return real_replace(src, dst, *args, **kwargs)

os.replace = replace
compile_paths([source], build)
"""


def test_a_compile_killed_by_sigkill_before_its_manifest_leaves_the_old_build(builds, tmp_path):
    build = copy_build(builds, "A", tmp_path / "build")
    killed = subprocess.run([sys.executable, "-c", KILLER, checkout(tmp_path, "B"), str(build)],
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert version_served(build) == "A"


# ---------------------------------------------------------------------------------------
# Two compiles into one folder at once

# Both processes plan (import, stage, lower) at once. The first then waits to take the
# folder's lock until the second has finished, and the second writes nothing until the
# first is at the lock: with per-file writes outside any lock, the first's files are all
# written and overwritten by the second's before the first's manifest names them.
RACER = textwrap.dedent("""\
    import fcntl, os, sys, time
    from s2s.batch_compile import compile_paths

    role, source, build, markers = sys.argv[1:]

    def mark(name):
        open(os.path.join(markers, name), "w").close()

    def wait_for(name):
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(markers, name)) and time.monotonic() < deadline:
            time.sleep(0.01)

    real_flock, real_replace = fcntl.flock, os.replace

    def flock(fd, operation):
        if role == "first" and operation & fcntl.LOCK_EX and not os.path.exists(os.path.join(markers, "first-locking")):
            mark("first-locking")
            wait_for("second-done")
        return real_flock(fd, operation)

    def replace(src, dst, *args, **kwargs):
        if role == "second" and os.path.dirname(os.path.abspath(dst)) == build:
            wait_for("first-locking")
        return real_replace(src, dst, *args, **kwargs)

    fcntl.flock, os.replace = flock, replace
    try:
        status = compile_paths([source], build)
    finally:
        if role == "second":
            mark("second-done")
    sys.exit(status)
""")


def test_two_compiles_of_two_versions_into_one_folder_at_once_serve_one_version(tmp_path):
    """Regression: two compiles of one module from two checkouts into one --out left ok
    entries that did not load (the manifest merged last named executables the other
    compile had overwritten)."""
    build, markers = tmp_path / "build", tmp_path / "markers"
    markers.mkdir()
    runs = [subprocess.Popen([sys.executable, "-c", RACER, role, checkout(tmp_path, version),
                              str(build), str(markers)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for role, version in (("first", "A"), ("second", "B"))]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    entries = read_manifest(str(build))["entries"]
    assert sorted(entries) == sorted(NAMES) and all(e["status"] == "ok" for e in entries.values())
    assert version_served(build) == "A"   # the first compile, which wrote last
    assert sorted(os.listdir(build)) == listed_files(build)
