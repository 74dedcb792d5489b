"""`s2s_runtime.manifest.load` on damaged and hostile manifests: 200 random mutations of a
real manifest (fields deleted, retyped or replaced; paths, avals, dtypes, shapes and names
changed; the JSON truncated) each give a `ManifestError` or the correct result, and a file
name that leads out of the build folder (absolute, `..`, a symlink out, /dev/zero, a FIFO)
is refused. The module is compiled once; every mutation only reloads."""
import copy
import json
import os
import random

import numpy as np
import pytest

from s2s.batch_compile import compile_paths
from s2s_runtime import manifest

MODULE = '''\
import numpy as np
import s2s

TABLE = np.arange(12.0).reshape(4, 3) / 10.0


@s2s.export("f64[2,4]", transforms=("primal", "grad"))
def project(x):
    return np.sum(np.tanh(x @ TABLE))
'''

X = np.linspace(-1, 1, 8).reshape(2, 4)
TABLE = np.arange(12.0).reshape(4, 3) / 10.0
EXPECTED = {"mod.project": [np.sum(np.tanh(X @ TABLE))],
            "mod.grad_project": [(1 - np.tanh(X @ TABLE) ** 2) @ TABLE.T]}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "mod.py").write_text(MODULE)
    assert compile_paths([str(root / "mod.py")], str(root / "build")) == 0
    return root / "build"


def load_and_check(path, name):
    """ManifestError, or the correct result: anything else fails the test."""
    try:
        call = manifest.load(str(path), name)
    except manifest.ManifestError as e:
        assert str(e)
        return "refused"
    result = call(X)   # (the function's own result: one array, or a tuple of them)
    results = list(result) if isinstance(result, tuple) else [result]
    assert len(results) == len(EXPECTED[name])
    for got, want in zip(results, EXPECTED[name]):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    return "ran"


def test_unchanged_manifest_runs(build):
    for name in EXPECTED:
        assert load_and_check(build / "manifest.json", name) == "ran"


HOSTILE_VALUES = [None, True, 0, -1, 3, 2.5, "", "x", "../mod.py", "/dev/zero", "float32",
                  "object", "V8", [], [1], [-1], [2, 4], ["2"], {}, {"shape": [2, 4]},
                  {"shape": [2, 4], "dtype": "float64"}, "a" * 300, "\0", "ok"]


def mutation_sites(value, path=()):
    """Every (path, value) in the JSON document, containers included."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from mutation_sites(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from mutation_sites(v, path + (i,))


def mutate(document: dict, rng: random.Random) -> str:
    """A random mutation of the manifest, as the text written to disk."""
    text = json.dumps(document)
    built_files = sorted(f for e in document["entries"].values() for f in e["files"].values())  # another's
    if rng.random() < 0.08:
        return text[:rng.randrange(len(text))]
    document = copy.deepcopy(document)
    # The export declaration ("spec") is only read by `s2s compile`: leave its many leaves
    # out so that most mutations hit what load reads.
    sites = [s for s in mutation_sites(document) if s[0] and "spec" not in s[0]]
    path, value = rng.choice(sites)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = rng.choice(["delete", "replace", "replace", "rename"])
    if action == "delete":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        parent[rng.choice(["mod.project", "mod.grad_project", "x", "", "exe"])] = parent.pop(key)
    else:
        parent[key] = rng.choice(HOSTILE_VALUES + built_files)
    return json.dumps(document)


def test_two_hundred_mutations_refused_or_correct(build):
    document = json.loads((build / "manifest.json").read_text())
    rng = random.Random(12)
    outcomes = {"refused": 0, "ran": 0}
    for i in range(200):
        path = build / "mutated.json"
        path.write_text(mutate(document, rng))
        outcomes[load_and_check(path, rng.choice(list(EXPECTED)))] += 1
    assert outcomes["refused"] > 40 and outcomes["ran"] > 10, outcomes


def with_exe(build, exe: str):
    document = json.loads((build / "manifest.json").read_text())
    document["entries"]["mod.project"]["files"]["exe"] = exe
    path = build / "escape.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("exe", ["/dev/zero", "../mod.py", "sub/../../mod.py", "", "mod.project.exe\0"])
def test_exe_path_must_stay_in_the_build_folder(build, exe):
    with pytest.raises(manifest.ManifestError, match="exe"):
        manifest.load(str(with_exe(build, exe)), "mod.project")


def project_exe(build):
    """The executable file of entry mod.project (named by its content's hash)."""
    return build / json.loads((build / "manifest.json").read_text())["entries"]["mod.project"]["files"]["exe"]


def test_absolute_path_to_the_right_file_is_still_refused(build):
    with pytest.raises(manifest.ManifestError, match="absolute"):
        manifest.load(str(with_exe(build, str(project_exe(build)))), "mod.project")


def test_symlink_out_of_the_build_folder_is_refused(build, tmp_path):
    outside = tmp_path / "elsewhere.exe"
    outside.write_bytes(project_exe(build).read_bytes())
    link = build / "linked.exe"
    if not link.exists():
        link.symlink_to(outside)
    with pytest.raises(manifest.ManifestError, match="outside the build folder"):
        manifest.load(str(with_exe(build, "linked.exe")), "mod.project")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_blocking(build):
    fifo = build / "pipe.exe"
    if not fifo.exists():
        os.mkfifo(fifo)
    with pytest.raises(manifest.ManifestError, match="not a regular file"):
        manifest.load(str(with_exe(build, "pipe.exe")), "mod.project")


def test_not_json_and_not_an_object_are_manifest_errors(build):
    for text in ["{", "[1, 2]", "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")]:
        (build / "broken.json").write_text(text)
        with pytest.raises(manifest.ManifestError):
            manifest.load(str(build / "broken.json"), "mod.project")
    with pytest.raises(manifest.ManifestError, match="cannot read"):
        manifest.load(str(build / "missing.json"), "mod.project")
