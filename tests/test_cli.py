"""The `s2s` command line: jaxpr, emit and check subcommands, sidecar constants, orphans,
errors."""
import os
import shutil
import subprocess
import sysconfig

import numpy as np
import pytest

import s2s
import s2s.errors
from s2s.cli import main
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


def in_process(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `s2s ARGV` run by `s2s.cli.main` in this process:
    the same code as the command, without a second interpreter's start-up per call."""
    try:
        status = main(list(argv))
    except SystemExit as exit:   # argparse's refusals, --version
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_bad_command_lines_exit_2(tmp_path, capsys):
    """A command line s2s refuses exits 2, a mistake in the user's code 1 (above): a CI step
    tells a mistyped command from stale derivatives."""
    exporting = exporting_module(tmp_path, "f")
    refused = {
        "no such module": ["jaxpr", "no_such_file.py:f"],
        "no such function": ["jaxpr", f"{MODULE}:no_such_function"],
        "no function after the colon": ["emit", f"{MODULE}:"],
        "an --args spec that does not parse": ["jaxpr", f"{MODULE}:affine", "--args", "f32[3"],
        "a module without --out": ["emit", exporting],
        "--args for a whole module": ["emit", exporting, "--args", "f64[3]", "--out", str(tmp_path / "o")],
        "an unknown transform": ["emit", f"{MODULE}:affine", "--transform", "hessian"],
        "check of no module": ["check", "--against", str(tmp_path)],
        "check of a missing folder": ["check", str(tmp_path / "nowhere"), "--against", str(tmp_path)],
        "check of a function that is not exported": ["check", f"{exporting}:np", "--against", str(tmp_path)],
        "compile of a missing path": ["compile", "nonexistent", "--out", str(tmp_path / "build")],
        "compile with no workers": ["compile", exporting, "--out", str(tmp_path / "build"), "-j", "0"],
        "an unknown command": ["bogus"],
    }
    for what, argv in refused.items():
        status, _, err = in_process(capsys, *argv)
        assert status == 2 and err.startswith(("s2s", "usage: s2s")), (what, err)
    result = run_cli("compile", "nonexistent", "--out", str(tmp_path / "build"))   # the command itself
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr


def test_version(capsys):
    status, out, _ = in_process(capsys, "--version")
    assert status == 0 and out.strip() == f"s2s {s2s.__version__}"


def test_a_function_without_args_or_export_is_asked_for_args(capsys):
    status, _, err = in_process(capsys, "jaxpr", f"{MODULE}:affine")
    assert status == 2
    assert "takes x, w, b" in err and "pass them with --args" in err


def test_emit_python_without_example_arguments_asks_for_them():
    with pytest.raises(s2s.errors.StagingError, match="given no example arguments, and it takes x, w, b"):
        s2s.emit_python(s2s.grad(cli_module.affine))


def test_jaxpr_of_a_module_prints_each_export_and_a_function_uses_its_export_spec(tmp_path, capsys):
    """`s2s jaxpr mod.py` prints the jaxpr of each export's transforms; `mod.py:f` with no
    --args stages f with its @s2s.export's arguments: both agree with --args given by hand."""
    module = exporting_module(tmp_path, "f")
    whole = in_process(capsys, "jaxpr", module)
    by_hand = in_process(capsys, "jaxpr", f"{module}:f", "--args", "f64[3]", "--transform", "grad")
    assert whole[0] == 0 and by_hand[0] == 0, whole[2] + by_hand[2]
    assert whole[1] == "# grad_f: grad of f\n" + by_hand[1]
    assert "cos" in by_hand[1]
    status, primal, err = in_process(capsys, "jaxpr", f"{module}:f")
    assert status == 0, err
    assert primal.startswith("{ lambda ; a:f64[3]. let") and "cos" not in primal


def test_emit_transform_of_a_function_that_is_not_exported(tmp_path):
    """`--transform vjp` writes vjp_affine(x, w, b, out_bar) -> (out, (x_bar, w_bar, b_bar));
    checked against the vjp of tanh(x @ w + b) written out in NumPy."""
    result = run_cli("emit", f"{MODULE}:affine", "--args", "f64[4,3], f64[3,2], f64[2]",
                     "--transform", "vjp", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    module = load_source((tmp_path / "vjp_affine.py").read_text(), "vjp_affine")
    rng = np.random.default_rng(2)
    x, w, b, out_bar = (rng.standard_normal(s) for s in ((4, 3), (3, 2), (2,), (4, 2)))
    out, (x_bar, w_bar, b_bar) = module.vjp_affine(x, w, b, out_bar)
    y = np.tanh(x @ w + b)
    g = out_bar * (1 - y ** 2)
    for actual, expected in [(out, y), (x_bar, g @ w.T), (w_bar, x.T @ g), (b_bar, g.sum(0))]:
        np.testing.assert_allclose(actual, expected, rtol=1e-12)


TWO_EXPORTS = '''\
import numpy as np
import s2s


@s2s.export("f64[3]", transforms=("grad",))
def f(x):
    return np.sin(x).sum()


@s2s.export("f64[3]", transforms=("grad",))
def g(x):
    return np.cos(x).sum()
'''


def test_check_takes_folders_several_paths_and_one_function(tmp_path, capsys):
    source = tmp_path / "src"
    source.mkdir()
    (source / "two.py").write_text(TWO_EXPORTS)
    exporting_module(source, "h")
    (source / "plain.py").write_text("import numpy as np\n")   # no exports: not checked
    out = str(tmp_path / "derivatives")
    for module in ("two.py", "exporting.py"):
        assert in_process(capsys, "emit", str(source / module), "--out", out)[0] == 0
    status, stdout, _ = in_process(capsys, "check", str(source), "--against", out)
    assert status == 0 and "3 generated files are up to date" in stdout, stdout
    status, stdout, _ = in_process(capsys, "check", str(source / "two.py"), str(source / "exporting.py"),
                                   "--against", out)
    assert status == 0 and "3 generated files are up to date" in stdout, stdout

    os.remove(os.path.join(out, "grad_g.py"))
    status, stdout, _ = in_process(capsys, "check", f"{source / 'two.py'}:f", "--against", out)
    assert status == 0 and "1 generated files are up to date" in stdout, stdout
    status, stdout, _ = in_process(capsys, "check", f"{source / 'two.py'}:g", "--against", out)
    assert status == 1 and f"missing {os.path.join(out, 'grad_g.py')}" in stdout, stdout
    status, stdout, _ = in_process(capsys, "check", "--format", "github", f"{source / 'two.py'}:g", "--against", out)
    assert status == 1 and stdout.startswith(   # at g's def, the line below its @s2s.export
        f"::error file={source / 'two.py'},line=11,title=s2s check::{os.path.join(out, 'grad_g.py')} is missing"), stdout
    status, stdout, _ = in_process(capsys, "check", str(source), "--against", out)
    assert status == 1 and "1 generated files are stale, missing or orphaned (3 expected)" in stdout, stdout


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
