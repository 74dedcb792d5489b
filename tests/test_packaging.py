"""What `pip install .` (not editable) puts in the wheel: every package under s2s/ and
s2s_runtime/ (a list written by hand once left out primitives/loops and linalg, which an
editable install hides), and the `py.typed` markers that tell type checkers the hints are
meant to be read."""
import os
import tomllib

import setuptools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_every_package_folder_is_in_the_distribution():
    folders = sorted(os.path.relpath(dirpath, ROOT).replace(os.sep, ".")
                     for top in ("s2s", "s2s_runtime")
                     for dirpath, _, files in os.walk(os.path.join(ROOT, top))
                     if "__init__.py" in files)
    found = setuptools.find_packages(ROOT, include=_config()["packages"]["find"]["include"])
    assert sorted(found) == folders
    assert "s2s.primitives.loops" in folders and "s2s.autograd.misc" in folders


def test_both_packages_ship_their_typing_marker():
    data = _config()["package-data"]
    for package in ("s2s", "s2s_runtime"):
        assert "py.typed" in data[package]
        assert os.path.isfile(os.path.join(ROOT, package, "py.typed"))
