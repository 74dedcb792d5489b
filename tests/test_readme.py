"""The README stays true: its quick start matches CI, and its table lists every supported function."""
import os
import re
import subprocess
import sys

import s2s
from s2s.numpy_api import NUMPY_IMPLS
from tests.helpers import CHECKOUT_PATH

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    block = readme().split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert "jax" not in commands[0]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert commands[1] in f.read()


def test_every_supported_numpy_function_is_in_the_table():
    table = readme().split("## Supported NumPy", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"[a-z_0-9]+", table))
    missing = sorted({fn.__name__ for fn in NUMPY_IMPLS} - listed)
    assert not missing, f"add these to README's table: {missing}"


def test_the_readme_example_runs(tmp_path):
    code = readme().split("```python", 1)[1].split("```", 1)[0]
    namespace = {"__name__": "readme_example"}
    path = tmp_path / "readme_example.py"
    path.write_text(code)
    exec(compile(code, str(path), "exec"), namespace)
    assert "np.tanh" in s2s.emit_python(namespace["predict"], namespace["params"], namespace["x"])


def test_layout_names_every_module():
    block = readme().split("## Layout", 1)[1].split("```", 2)[1]
    missing = []
    for package in ("s2s", "runtime/s2s_runtime"):
        for dirpath, _, filenames in os.walk(os.path.join(ROOT, package)):
            folder = os.path.relpath(dirpath, ROOT) + "/"
            for filename in filenames:
                if not filename.endswith(".py") or f"{folder}{filename}" in block:
                    continue
                stem = filename[:-3]
                listed_in_folder = folder in block and (
                    stem == "__init__" or re.search(rf"\b{stem}\b", block.split(folder, 1)[1]))
                if not listed_in_folder:
                    missing.append(folder + filename)
    assert not missing, f"add these to README's Layout: {sorted(missing)}"


def test_the_readme_pmap_example_runs_as_shown(tmp_path):
    """The data-parallel example, run as its first line says, prints what its comment says."""
    block = readme().split("## Several devices", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    command = block.splitlines()[1]
    assert command.startswith("# data_parallel.py: run as `S2S_NUM_CPU_DEVICES=8 python data_parallel.py`")
    (tmp_path / "data_parallel.py").write_text(block)
    env = {**os.environ, "S2S_NUM_CPU_DEVICES": "8", "PYTHONPATH": CHECKOUT_PATH}
    run = subprocess.run([sys.executable, "data_parallel.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "{'W': True, 'b': True}"
