"""What `pip install ./runtime .` (not editable) installs, read from the wheels themselves,
built here from a copy of the checkout as pip builds them: every module under s2s/ and
runtime/s2s_runtime/ (a list of packages written by hand once left out primitives/loops and
linalg, which an editable install hides), the `py.typed` markers that tell type checkers the
hints are meant to be read, and a runtime that asks for NumPy alone, so that emitted modules
run in production without jaxlib."""
import email
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import ROOT

# Each distribution's folder (relative to the checkout) and the package it ships.
DISTRIBUTIONS = {".": "s2s", "runtime": "s2s_runtime"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, zipfile.ZipFile]:
    """Package → its wheel, built without build isolation (the test extras pin the
    setuptools the build needs) from a copy, so no build folder lands in the checkout."""
    source = tmp_path_factory.mktemp("checkout")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), source)
    shutil.copy(os.path.join(ROOT, "README.md"), source)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
    for folder, package in DISTRIBUTIONS.items():
        shutil.copytree(os.path.join(ROOT, folder, package), source / folder / package, ignore=skip)
    shutil.copy(os.path.join(ROOT, "runtime", "pyproject.toml"), source / "runtime")
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(source), str(source / "runtime")], check=True, capture_output=True)
    found = {name.split("-")[0]: zipfile.ZipFile(out / name) for name in os.listdir(out)}
    return {package: found[package] for package in DISTRIBUTIONS.values()}


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


@pytest.mark.parametrize("folder, package", DISTRIBUTIONS.items())
def test_every_module_of_the_checkout_is_in_its_wheel(wheels, folder, package):
    base = os.path.join(ROOT, folder)
    modules = {os.path.relpath(os.path.join(dirpath, f), base).replace(os.sep, "/")
               for dirpath, dirnames, files in os.walk(os.path.join(base, package))
               for f in files if f.endswith(".py")}
    shipped = set(wheels[package].namelist())
    assert modules - shipped == set()
    assert {"s2s/primitives/loops/replay.py", "s2s/autograd/misc/optimizers.py"} <= set(wheels["s2s"].namelist())


@pytest.mark.parametrize("package", DISTRIBUTIONS.values())
def test_both_wheels_ship_their_typing_marker(wheels, package):
    assert f"{package}/py.typed" in wheels[package].namelist()


def test_the_runtime_needs_numpy_alone_and_s2s_needs_the_runtime(wheels):
    runtime = _metadata(wheels["s2s_runtime"]).get_all("Requires-Dist")
    assert [r for r in runtime if "extra ==" not in r] == ["numpy>=2.0"]
    assert [re.match(r"[\w-]+", r).group() for r in runtime if 'extra == "xla"' in r] == ["jaxlib"]
    assert any(r.startswith("s2s-runtime") for r in _metadata(wheels["s2s"]).get_all("Requires-Dist"))
    assert not any(n.startswith("s2s/") for n in wheels["s2s_runtime"].namelist())
    assert not any(n.startswith("s2s_runtime/") for n in wheels["s2s"].namelist())
