"""What `pip install ./runtime .` (not editable) puts in the wheels: every package under
s2s/ and runtime/s2s_runtime/ (a list written by hand once left out primitives/loops and
linalg, which an editable install hides), the `py.typed` markers that tell type checkers the
hints are meant to be read, and a runtime that asks for NumPy alone, so that emitted modules
run in production without jaxlib."""
import os
import tomllib

import setuptools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Each distribution's folder and the package it ships.
DISTRIBUTIONS = {ROOT: "s2s", os.path.join(ROOT, "runtime"): "s2s_runtime"}


def _pyproject(folder: str) -> dict:
    with open(os.path.join(folder, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_every_package_folder_is_in_its_distribution():
    for folder, top in DISTRIBUTIONS.items():
        packages = sorted(os.path.relpath(dirpath, folder).replace(os.sep, ".")
                          for dirpath, _, files in os.walk(os.path.join(folder, top))
                          if "__init__.py" in files)
        include = _pyproject(folder)["tool"]["setuptools"]["packages"]["find"]["include"]
        assert sorted(setuptools.find_packages(folder, include=include)) == packages, folder
    assert {"s2s.primitives.loops", "s2s.autograd.misc"} <= set(setuptools.find_packages(ROOT, include=["s2s*"]))


def test_both_packages_ship_their_typing_marker():
    for folder, package in DISTRIBUTIONS.items():
        assert "py.typed" in _pyproject(folder)["tool"]["setuptools"]["package-data"][package]
        assert os.path.isfile(os.path.join(folder, package, "py.typed"))


def test_the_runtime_needs_numpy_alone_and_s2s_needs_the_runtime():
    runtime = _pyproject(os.path.join(ROOT, "runtime"))["project"]
    assert [r.split(">")[0] for r in runtime["dependencies"]] == ["numpy"]
    assert [r.split(">")[0] for r in runtime["optional-dependencies"]["xla"]] == ["jaxlib"]
    assert any(r.startswith("s2s-runtime") for r in _pyproject(ROOT)["project"]["dependencies"])
