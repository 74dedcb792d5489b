"""Derivative review wired as README's "In your repository's CI" wires it, in a temporary
repository with a package and committed derivatives (`tests/workflows/test_user_repository.py`'s):
README's GitHub Actions workflow (its check step run as the job runs it), and README's
`.pre-commit-config.yaml` run by real pre-commit against this checkout's
`.pre-commit-hooks.yaml`, named by a git revision as a user's config names s2s's tag.

The hook checks the whole package whichever Python file changed: an edit to a helper the
model imports changes the model's derivative as much as an edit to the model does.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml   # pre-commit's own dependency (pre-commit is a test extra)

from tests.helpers import CHECKOUT_PATH, ROOT, run_s2s_in
from tests.test_readme import readme
from tests.workflows.test_user_repository import committed, git, repository   # noqa: F401 (fixtures)

def readme_yaml(after: str) -> dict | list:
    """The first YAML block in README after the text `after`."""
    text = readme()
    block = re.search(r"```yaml\n(.*?)```", text[text.index(after):], re.S)
    return yaml.safe_load(block.group(1))


def test_readme_workflow_checks_the_package_as_its_job_runs(repository):   # noqa: F811
    workflow = readme_yaml("`.github/workflows/derivatives.yml`")
    [job] = workflow["jobs"].values()
    [check] = [step for step in job["steps"] if step.get("run", "").startswith("s2s check")]
    installs = " ".join(step.get("run", "") for step in job["steps"])
    assert "#subdirectory=runtime" in installs and "pip install -e ." in installs
    command = shlex.split(check["run"])
    result = run_s2s_in(repository, *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "generated files are up to date" in result.stdout
    [upload] = [step for step in job["steps"] if "upload-artifact" in step.get("uses", "")]
    assert upload["if"] == "failure()"
    page = repository / upload["with"]["path"]
    assert page.is_file() and "grad_loss" in page.read_text()


@pytest.fixture
def hooked(committed, tmp_path):   # noqa: F811 (the fixture imported above)
    """A copy of the user's repository with README's `.pre-commit-config.yaml`, naming a git
    repository that holds this checkout's `.pre-commit-hooks.yaml` where README names s2s's."""
    hooks = tmp_path / "s2s-hooks"
    hooks.mkdir()
    shutil.copy(os.path.join(ROOT, ".pre-commit-hooks.yaml"), hooks)
    git(hooks, "init", "-q")
    git(hooks, "add", ".")
    git(hooks, "commit", "-qm", "hooks")
    revision = git(hooks, "rev-parse", "HEAD").strip()
    repository = tmp_path / "repository"
    shutil.copytree(committed, repository)
    config = readme_yaml("In your `.pre-commit-config.yaml`")
    [s2s_repository] = config["repos"]
    s2s_repository.update(repo=hooks.as_uri(), rev=revision)
    (repository / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(repository, "add", ".pre-commit-config.yaml")
    git(repository, "commit", "-qm", "pre-commit checks the derivatives")
    return repository


def pre_commit(repository, *args) -> subprocess.CompletedProcess:
    """`pre-commit run` in the repository, its clone cache inside the test's folder. The
    hook's `s2s` is the console script beside this Python, importing this checkout."""
    env = dict(os.environ, PRE_COMMIT_HOME=str(repository.parent / "pre-commit-home"),
               PYTHONPATH=CHECKOUT_PATH,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", *args], cwd=repository, env=env,
                          capture_output=True, text=True)


def test_the_hook_passes_on_up_to_date_derivatives(hooked):
    result = pre_commit(hooked, "--all-files")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "generated derivatives are up to date" in result.stdout and "Passed" in result.stdout


def test_an_edit_to_a_helper_fails_the_hook_with_the_diff_and_the_fix(hooked):
    helpers = hooked / "mypkg" / "helpers.py"
    helpers.write_text(helpers.read_text().replace("np.tanh(", "np.sin("))
    git(hooked, "add", "mypkg/helpers.py")
    result = pre_commit(hooked)   # what `git commit` runs: the staged files
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Failed" in result.stdout
    assert "derivatives/grad_loss.py (regenerated)" in result.stdout and "np.cos" in result.stdout
    assert "s2s emit mypkg/model.py --out derivatives/" in result.stdout


def test_a_change_to_no_python_file_skips_the_hook(hooked):
    (hooked / "notes.txt").write_text("not code\n")
    git(hooked, "add", "notes.txt")
    result = pre_commit(hooked)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Skipped" in result.stdout
