"""The `s2s` command line: jaxpr and emit subcommands, sidecar constants, errors."""
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np

import s2s
from s2s.emit.python import load_source
from tests.fixtures import cli_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.path.join("tests", "fixtures", "cli_module.py")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "s2s", *args], cwd=ROOT, capture_output=True, text=True)


def test_jaxpr_subcommand_prints_the_jaxpr():
    result = run_cli("jaxpr", f"{MODULE}:affine", "--args", "f32[4,3], f32[3,2], f32[2]")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("{ lambda ; a:f32[4,3] b:f32[3,2] c:f32[2]. let")
    assert "tanh" in result.stdout


def test_jaxpr_with_static_int_argument():
    result = run_cli("jaxpr", f"{MODULE}:repeat", "--args", "f64[3], 3")
    assert result.returncode == 0, result.stderr
    # The loop over range(3) is one scan of length 3, with one sin in its body.
    assert result.stdout.count("= sin") == 1 and "length=3" in result.stdout


def test_emit_writes_the_same_module_as_emit_python(tmp_path):
    result = run_cli("emit", f"{MODULE}:affine", "--args", "f32[4,3], f32[3,2], f32[2]", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "affine.py").read_text()
    args = [s2s.ShapeDtype(s, "float32") for s in ((4, 3), (3, 2), (2,))]
    assert written == s2s.emit_python(cli_module.affine, *args)


def test_large_constants_go_to_a_deterministic_sidecar(tmp_path):
    out = []
    for sub in ("a", "b"):
        result = run_cli("emit", f"{MODULE}:with_table", "--args", "f64[3,40]", "--out", str(tmp_path / sub))
        assert result.returncode == 0, result.stderr
        out.append(((tmp_path / sub / "with_table.py").read_text(), (tmp_path / sub / "with_table.npz").read_bytes()))
    assert out[0] == out[1]
    source = out[0][0]
    assert "rt.load_npz" in source and "0.0005" not in source
    path = tmp_path / "a" / "with_table.py"
    module = load_source(source, "with_table", filename=str(path))
    x = np.random.default_rng(0).standard_normal((3, 40))
    np.testing.assert_allclose(module.with_table(x), cli_module.with_table(x))


def test_emit_python_embeds_large_constants():
    source = s2s.emit_python(cli_module.with_table, np.ones((3, 40)))
    assert "rt.array_from_base64" in source
    module = load_source(source, "with_table")
    x = np.random.default_rng(1).standard_normal((3, 40))
    np.testing.assert_allclose(module.with_table(x), cli_module.with_table(x))


def test_user_error_is_a_compiler_message_not_a_traceback():
    result = run_cli("jaxpr", f"{MODULE}:broken", "--args", "f32[3,4]")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "cli_module.py:" in result.stderr and "^" in result.stderr


def test_bad_command_lines_exit_2():
    assert run_cli("jaxpr", "no_such_file.py:f").returncode != 0
    assert run_cli("jaxpr", f"{MODULE}:affine", "--args", "f32[3").returncode == 1
    assert run_cli("bogus").returncode == 2


def test_console_script_is_installed():
    # pip puts it in this interpreter's scripts folder (which may not be on PATH, e.g. with
    # pyenv before a rehash).
    exe = os.path.join(sysconfig.get_path("scripts"), "s2s")
    if not os.path.exists(exe):
        exe = shutil.which("s2s")
    assert exe is not None and os.path.exists(exe)
    result = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "jaxpr" in result.stdout
