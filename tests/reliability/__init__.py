"""Reliability tests: s2s never serves wrong code and never writes where it must not.

The executable cache (a swapped entry, a changed XLA flag, a folder or entry someone else
can write: checked end to end in subprocesses that share one ``S2S_CACHE_DIR``, like separate
runs of a user's program), build folders and the CLI (manifest fuzzing, hostile names),
staging (stale globals, cells, defaults and attributes) and bad inputs. The cache tests'
shared fixture and helpers live here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from s2s_runtime import disk_cache


# x * x + x on three floats: small, and XLA fuses it (unless told to skip its HLO passes).
MULTIPLY_ADD_MODULE = """module @m {
  func.func public @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.multiply %arg0, %arg0 : tensor<3xf32>
    %1 = stablehlo.add %0, %arg0 : tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}"""


def isolated_cache_dir(tmp_path, monkeypatch):
    """A fresh cache folder for one test, in the environment so subprocesses share it (the
    body of the cache_dir fixtures here and in tests/s2s_runtime/test_disk_cache.py)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("S2S_CACHE_DIR", str(folder))
    monkeypatch.delenv("S2S_DISK_CACHE", raising=False)
    monkeypatch.delenv("S2S_CACHE_MAX_BYTES", raising=False)
    disk_cache.configure()
    yield folder
    disk_cache.configure()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    yield from isolated_cache_dir(tmp_path, monkeypatch)


class Compiled:
    """A stand-in executable: its serialized form is its payload."""

    def __init__(self, payload: bytes):
        self.payload = payload


def get_or_compile(key, payload: bytes, compiles: list) -> tuple[Compiled, bool]:
    """disk_cache.get_or_compile of a stand-in executable; each compile appends to `compiles`."""
    return disk_cache.get_or_compile(key, lambda: compiles.append(payload) or Compiled(payload),
                                     lambda exe: exe.payload, lambda data: Compiled(bytes(data)))


def entries(folder) -> set[Path]:
    return set(Path(folder).glob("*" + disk_cache.SUFFIX)) if Path(folder).exists() else set()


def run_python(code: str, folder: Path, env_changes: dict[str, str | None] | None = None):
    """Runs `code`, saved as a program in `folder` (s2s reads its functions' source), in a
    fresh interpreter (this environment, with `env_changes`; None removes a variable) and
    returns the JSON value its last line of output prints."""
    program = Path(folder) / "program.py"
    program.write_text(code)
    env = dict(os.environ)
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
