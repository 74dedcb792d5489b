"""The `s2s` command line: jaxpr, emit and check subcommands, sidecar constants, orphans,
errors."""
import os
import shutil
import subprocess
import sysconfig

import numpy as np

import s2s
from s2s.emit.python import load_source
from tests.fixtures import cli_module
from tests.helpers import run_s2s as run_cli

MODULE = os.path.join("tests", "fixtures", "cli_module.py")

EXPORTING = '''\
import numpy as np
import s2s


@s2s.export("f64[3]", transforms=("grad",), name="{name}")
def f(x):
    return np.sin(x).sum()
'''


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


def test_check_fails_for_a_module_without_exports(tmp_path):
    """Regression: `s2s check` of a module with no @s2s.export said "0 generated files are
    up to date" and exited 0, so a CI step pointed at the wrong file always passed."""
    result = run_cli("check", MODULE, "--against", str(tmp_path))
    assert result.returncode == 1
    assert "cli_module.py declares no @s2s.export" in result.stderr and "Traceback" not in result.stderr


def exporting_module(folder, name: str, filename: str = "exporting.py") -> str:
    """A module file in `folder` exporting `grad` of a function under the name `name`."""
    path = folder / filename
    path.write_text(EXPORTING.format(name=name))
    return str(path)


def test_check_fails_on_an_orphan_left_by_a_renamed_export(tmp_path):
    """Regression: after an export was renamed, its old file stayed in the folder and
    `s2s check` passed once the new file was there, though no export produced the old one."""
    out = str(tmp_path / "derivatives")
    assert run_cli("emit", exporting_module(tmp_path, "old"), "--out", out).returncode == 0
    renamed = exporting_module(tmp_path, "new")
    assert run_cli("emit", renamed, "--out", str(tmp_path / "elsewhere")).returncode == 0
    shutil.copy(tmp_path / "elsewhere" / "grad_new.py", out)   # the new file, committed beside the old
    result = run_cli("check", renamed, "--against", out)
    assert result.returncode == 1
    assert f"orphan {os.path.join(out, 'grad_old.py')}" in result.stdout
    assert "1 generated files are stale, missing or orphaned" in result.stdout


def test_emit_removes_its_own_orphans_and_nothing_else(tmp_path):
    """`s2s emit` deletes what it would leave stale: generated files (and their .npz) whose
    header names this module and whose export is gone, and no other file in the folder."""
    out = tmp_path / "derivatives"
    assert run_cli("emit", exporting_module(tmp_path, "old"), "--out", str(out)).returncode == 0
    (out / "grad_old.npz").write_bytes(b"constants of the old export")
    other_module = exporting_module(tmp_path, "other", "metrics.py")   # shares the folder
    assert run_cli("emit", other_module, "--out", str(out)).returncode == 0
    copied = (out / "grad_old.py").read_text()
    (out / "backup.py").write_text(copied)     # a copy under another name: its header names grad_old
    (out / "notes.py").write_text("# the team's notes, not generated\n")

    result = run_cli("emit", exporting_module(tmp_path, "new"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    removed = [line for line in result.stdout.splitlines() if line.startswith("removed ")]
    assert removed == [f"removed {out / 'grad_old.py'}", f"removed {out / 'grad_old.npz'}"]
    assert sorted(p.name for p in out.iterdir()) == ["backup.py", "grad_new.py", "grad_other.py", "notes.py"]


def test_check_calls_a_committed_file_that_is_not_utf8_stale(tmp_path):
    """A committed file with bytes that are not UTF-8 (saved as Latin-1 by an editor, say)
    made `s2s check` die with a UnicodeDecodeError traceback. It cannot be what s2s wrote
    (UTF-8): it is named as stale, with the byte, and check exits 1 as for any stale file."""
    out = tmp_path / "derivatives"
    out.mkdir()
    (out / "grad_f.py").write_bytes(b'"""grad_f: generated by s2s, then saved as Latin-1: caf\xe9."""\n')
    result = run_cli("check", exporting_module(tmp_path, "f"), "--against", str(out))
    assert result.returncode == 1, result.stderr
    assert f"cannot read {out / 'grad_f.py'} as the UTF-8 text s2s writes" in result.stdout
    assert "byte 0xe9" in result.stdout and "Traceback" not in result.stderr
    assert "1 generated files are stale, missing or orphaned" in result.stdout
