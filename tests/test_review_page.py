"""The review page of `s2s emit --html` and `s2s check --html`, in the user's repository of
tests/workflows/test_user_repository.py (a model whose derivative runs through a helper in
another file), read two ways:

- as HTML parsed here: every location comment links to the source line it names (found
  here from the comment and the file's text, not by s2s's reader), a real edit marks
  exactly the lines of the diff `s2s check` prints and the line git says was edited,
  missing and orphaned files are listed, user text is escaped, and the page is the same
  bytes on every run and names nothing outside itself;
- in headless Chromium, driven over its DevTools pipe (no driver, no port): the page
  renders with the source beside the derivative, clicking a statement jumps to its source
  line, and the page requests nothing but itself (its Content-Security-Policy would refuse).
"""
from __future__ import annotations

import fcntl
import html.parser
import json
import os
import re
import select
import shutil
import subprocess
import time

import pytest

from s2s.cli import main
from tests.helpers import run_s2s, run_s2s_in
from tests.workflows.test_user_repository import HELPERS, METRICS, MODEL, git

CHROMIUM = shutil.which("chromium")


class PageRows(html.parser.HTMLParser):
    """The page as data: each table row's section (the generated file's stem), id, class,
    cells' text and link targets; the summary's status of each file; every id on the page;
    every attribute value that names something (href, src, action)."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.rows: list[dict] = []
        self.ids: set[str] = set()
        self.references: list[str] = []
        self.summary: dict[str, str] = {}
        self._cell = None
        self._item = None
        self._section = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        self.references += [value for name, value in attrs.items() if name in ("href", "src", "action")]
        if tag == "section":
            self._section = attrs["id"].removeprefix("gen-")
        elif tag == "tr":
            self.rows.append({"section": self._section, "id": attrs.get("id"), "class": attrs.get("class", ""),
                              "cells": [], "links": []})
        elif tag == "td":
            self.rows[-1]["cells"].append("")
            self._cell = self.rows[-1]
        elif tag == "a" and self._cell is not None:
            self._cell["links"].append(attrs["href"])
        elif tag == "li":
            self._item = []

    def handle_endtag(self, tag):
        if tag == "tr":
            self._cell = None
        elif tag == "li":
            status, path = self._item
            self.summary[path] = status
            self._item = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["cells"][-1] += data
        elif self._item is not None:
            self._item.append(data)

    def row(self, row_id: str) -> dict:
        [row] = [r for r in self.rows if r["id"] == row_id]
        return row

    def section(self, stem: str) -> list[dict]:
        """The rows of one generated file's section: its source lines and its own lines."""
        return [r for r in self.rows if r["section"] == stem]


def named_line(comment: str, sources: dict[str, list[str]]) -> tuple[str, int]:
    """The source line an emitted `# helpers.py dense+1` names, read from the source text:
    the line `offset` below the file's `def FUNCTION(`."""
    filename, function, offset = re.fullmatch(r"(\S+) ([\w.]+)\+(\d+)", comment).groups()
    lines = sources[filename]
    [def_index] = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"def {function}(")]
    return filename, def_index + 1 + int(offset)


def emitted_lines(page: PageRows, stem: str) -> list[dict]:
    return [r for r in page.section(stem) if (r["id"] or "").startswith(f"gen-{stem}-")]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    """The user's repository: derivatives emitted (the model's with --html) and committed,
    then the model's loss edited from a sum to a mean, and `s2s check --html` run on it."""
    repository = tmp_path_factory.mktemp("repository")
    (repository / "mypkg").mkdir()
    for name, text in [("__init__.py", ""), ("helpers.py", HELPERS), ("model.py", MODEL), ("metrics.py", METRICS)]:
        (repository / "mypkg" / name).write_text(text)
    emitted = run_s2s_in(repository, "emit", "mypkg/model.py", "--out", "derivatives/", "--html", "review/emit.html")
    assert emitted.returncode == 0 and "s2s: review page review/emit.html" in emitted.stderr, emitted.stderr
    assert run_s2s_in(repository, "emit", "mypkg/metrics.py", "--out", "derivatives/").returncode == 0
    git(repository, "init", "-q")
    git(repository, "add", ".")
    git(repository, "commit", "-qm", "model and its reviewed derivatives")
    model = repository / "mypkg" / "model.py"
    model.write_text(model.read_text().replace("(h * h).sum()", "(h * h).mean()"))
    return repository


@pytest.fixture(scope="module")
def checked(repository):
    """`s2s check --html` of the edited repository: its result and its page."""
    result = run_s2s_in(repository, "check", "mypkg/", "--against", "derivatives/", "--html", "review/check.html")
    return result, (repository / "review" / "check.html").read_text()


def test_emit_page_links_each_commented_statement_to_the_line_its_comment_names(repository):
    """The page `s2s emit` wrote, read against the sources it was emitted from (committed)."""
    sources = {name: git(repository, "show", f"HEAD:mypkg/{name}").splitlines() for name in ("model.py", "helpers.py")}
    page = PageRows((repository / "review" / "emit.html").read_text())
    assert page.summary == {"derivatives/grad_loss.py": "written"}
    lines = emitted_lines(page, "grad_loss")
    written = (repository / "derivatives" / "grad_loss.py").read_text().splitlines()
    assert [row["cells"][1] for row in lines] == written   # the whole file, as written
    linked = 0
    for row, text in zip(lines, written):
        comment = re.search(r"  # (\S+ [\w.]+\+\d+)$", text)
        if comment is None:
            assert row["links"] == []
            continue
        filename, number = named_line(comment[1], sources)
        [href] = row["links"]
        assert page.row(href[1:])["cells"] == [str(number), sources[filename][number - 1]]
        linked += 1
    assert linked == 5   # every statement: all come from the helper's line
    # Beside it, the exported function whole (from its decorator) first, then the helper.
    beside = [(r["id"], r["cells"]) for r in page.section("grad_loss") if r["id"].startswith("src-")]
    expected = [("model.py", n) for n in (9, 10, 11, 12)] + [("helpers.py", n) for n in (4, 5)]
    assert beside == [(f"src-grad_loss-mypkg-{filename}-{n}", [str(n), sources[filename][n - 1]])
                      for filename, n in expected]


def test_check_page_marks_the_changed_lines_and_the_edit_that_caused_them(repository, checked):
    """The page of a failing check (written, and the exit status still 1): the changed and
    struck-out lines are the `+` and `-` lines of the diff check prints, and the line git
    says was edited is marked as a cause; the file that did not change marks nothing."""
    result, text = checked
    assert result.returncode == 1 and "s2s: review page review/check.html" in result.stderr, result.stderr
    page = PageRows(text)
    assert page.summary == {"derivatives/grad_loss.py": "stale", "derivatives/grad_spread.py": "up to date"}
    diff = result.stdout.splitlines()
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    rows = page.section("grad_loss")
    assert [r["cells"][1] for r in rows if r["class"] == "changed"] == added
    assert [r["cells"][1] for r in rows if r["class"] == "removed"] == removed
    [edited] = [int(n) for n in re.findall(r"^@@ -\d+(?:,\d+)? \+(\d+) @@", git(repository, "diff", "-U0"), re.M)]
    causes = [r["id"] for r in rows if r["class"] == "cause"]
    assert f"src-grad_loss-mypkg-model.py-{edited}" in causes
    assert page.row(f"src-grad_loss-mypkg-model.py-{edited}")["cells"][1] == "    return (h * h).mean()"
    # Each changed statement links to a line marked as a cause.
    for row in rows:
        if row["class"] == "changed" and row["links"]:
            assert page.row(row["links"][0][1:])["class"] == "cause"
    assert not [r for r in page.section("grad_spread") if r["class"]]


def test_missing_and_orphaned_files_are_on_the_page(repository, tmp_path):
    copy = tmp_path / "repository"
    shutil.copytree(repository, copy)
    derivatives = copy / "derivatives"
    loss = (derivatives / "grad_loss.py").read_text()
    (derivatives / "grad_old.py").write_text(loss.replace("grad_loss", "grad_old"))   # a renamed export's file
    (derivatives / "grad_spread.py").unlink()
    result = run_s2s_in(copy, "check", "mypkg/", "--against", "derivatives/", "--html", "check.html")
    assert result.returncode == 1, result.stderr
    page = PageRows((copy / "check.html").read_text())
    assert page.summary == {"derivatives/grad_loss.py": "stale", "derivatives/grad_old.py": "orphan",
                            "derivatives/grad_spread.py": "missing"}
    # The missing file is shown as `s2s emit` would write it, every line new.
    spread = emitted_lines(page, "grad_spread")
    assert spread and all(r["class"] == "changed" for r in spread)
    assert not emitted_lines(page, "grad_old")


SHOWN_AS_WRITTEN = '''\
import numpy as np
import s2s


@s2s.export("f64[3]", transforms=("grad",))
def f(x):
    # </td></tr><script>alert("x & y")</script> <!-- \u202eevil
    return np.sin(x).sum()
'''


def test_user_text_is_escaped_and_shown_as_written(tmp_path):
    """A source line that holds markup shows as its text, and no markup of it reaches the
    page; a character that cannot be seen (a right-to-left override) shows as its escape."""
    module = tmp_path / "tricky.py"
    module.write_text(SHOWN_AS_WRITTEN, encoding="utf-8")
    result = run_s2s("emit", str(module), "--out", str(tmp_path / "out"), "--html", str(tmp_path / "page.html"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "<script" not in text and "\u202e" not in text and "<!-- \\" not in text
    page = PageRows(text)
    [row] = [r for r in page.rows if r["id"] and r["id"].endswith("tricky.py-7")]
    assert row["cells"][1] == SHOWN_AS_WRITTEN.splitlines()[6].replace("\u202e", "\\u202e")


def test_page_is_self_contained_and_the_same_bytes_every_run(repository, checked):
    again = run_s2s_in(repository, "check", "mypkg/", "--against", "derivatives/", "--html", "review/check.html")
    assert again.returncode == 1
    text = (repository / "review" / "check.html").read_text()
    assert text == checked[1]
    page = PageRows(text)
    assert page.references and all(ref.startswith("#") and ref[1:] in page.ids for ref in page.references)
    assert "://" not in text and "<script" not in text
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            'style-src \'unsafe-inline\';') in text


def test_emit_of_one_function_to_stdout_writes_its_page_beside(tmp_path):
    """`s2s emit mod.py:fn` without --out prints the module alone on stdout (the page's
    path goes to stderr) and the page shows that module beside the function."""
    module = tmp_path / "tricky.py"
    module.write_text(SHOWN_AS_WRITTEN, encoding="utf-8")
    result = run_s2s("emit", f"{module}:f", "--transform", "grad", "--html", str(tmp_path / "one.html"))
    assert result.returncode == 0 and result.stdout.startswith('"""grad_f: generated by s2s'), result.stderr
    page = PageRows((tmp_path / "one.html").read_text(encoding="utf-8"))
    assert [r["cells"][1] for r in emitted_lines(page, "grad_f")] == result.stdout.splitlines()
    [link] = {href for row in emitted_lines(page, "grad_f") for href in row["links"]}
    assert page.row(link[1:])["cells"] == ["8", "    return np.sin(x).sum()"]


def test_html_never_overwrites_a_file_s2s_did_not_write(tmp_path, capsys):
    notes = tmp_path / "notes.html"
    notes.write_text("<p>the team's notes</p>\n")
    module = tmp_path / "tricky.py"
    module.write_text(SHOWN_AS_WRITTEN, encoding="utf-8")
    status = main(["check", str(module), "--against", str(tmp_path), "--html", str(notes)])
    assert status == 2 and "refusing to overwrite" in capsys.readouterr().err
    assert notes.read_text() == "<p>the team's notes</p>\n"


# ---------------------------------------------------------------------------------------
# In a real browser


def _renumbered_past_4(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Chromium:
    """Headless Chromium driven over `--remote-debugging-pipe` (the DevTools protocol as
    NUL-terminated JSON on its file descriptors 3 and 4), attached to its one page."""

    FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1280,800", "--remote-debugging-pipe"]

    def __init__(self, profile):
        commands, self._commands = os.pipe()
        self._answers, answers = os.pipe()
        # The child's ends renumbered past 4 (close-on-exec), so that giving them the numbers
        # 3 and 4 in the child cannot overwrite one with the other; 3 and 4 are the only
        # descriptors past stderr the child inherits (Python opens none inheritable).
        commands, answers = (_renumbered_past_4(fd) for fd in (commands, answers))
        self.process = subprocess.Popen(
            [CHROMIUM, *self.FLAGS, f"--user-data-dir={profile}", "about:blank"], close_fds=False,
            preexec_fn=lambda: (os.dup2(commands, 3), os.dup2(answers, 4)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (commands, answers):
            os.close(fd)
        self._buffer, self._last_id, self.events = b"", 0, []
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.send("Network.enable", self.session)
        self.send("Page.enable", self.session)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._answers, 1 << 16) if ready else b""
            if not chunk:
                raise AssertionError("chromium stopped answering")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._last_id:
                assert "error" not in answer, answer
                return answer["result"]
            self.events.append(answer)

    def open(self, url: str) -> None:
        """Loads `url` in the page, its events (requests) starting afresh."""
        self.events.clear()
        self.send("Page.navigate", self.session, url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._receive(deadline))

    def evaluate(self, expression: str, wait: bool = False):
        result = self.send("Runtime.evaluate", self.session, expression=expression, returnByValue=True,
                           awaitPromise=wait)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the middle of the element."""
        x, y = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                             f"e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); "
                             f"return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", self.session, type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        self.send("Browser.close")
        self.process.wait(30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        if os.environ.get("S2S_BROWSER_REQUIRED"):   # set by .ci/run, which installs it
            pytest.fail("chromium is not installed, and CI's run needs the browser test to run")
        pytest.skip("chromium is not installed (.ci/run installs it: apt-get install chromium)")
    chromium = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


@pytest.fixture
def check_page(repository, checked, browser):
    url = (repository / "review" / "check.html").as_uri()
    browser.open(url)
    return url


def test_page_renders_source_beside_derivative(browser, check_page):
    text = browser.evaluate("document.body.innerText")
    assert "    return (h * h).mean()" in text                     # a source line
    assert "    bcast = np.broadcast_to(" in text                  # a changed derivative line
    left, right = browser.evaluate(
        "[...document.querySelectorAll('#gen-grad_loss .pair > div')].map(d => {"
        " const r = d.getBoundingClientRect(); return [r.left, r.right, r.width, r.height]; })")
    assert left[2] > 200 and right[2] > 200 and left[3] > 0 and left[1] <= right[0]   # side by side


def test_clicking_a_statement_jumps_to_its_source_line(browser, check_page):
    selector = "#gen-grad_loss tr.changed a.from"
    href = browser.evaluate(f"document.querySelector({json.dumps(selector)}).getAttribute('href')")
    browser.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    browser.click(selector)
    deadline = time.monotonic() + 10
    while browser.evaluate("location.hash") != href and time.monotonic() < deadline:
        time.sleep(0.05)
    assert browser.evaluate("location.hash") == href
    assert browser.evaluate("document.querySelector(':target').id") == href[1:]
    top, bottom, height = browser.evaluate(
        "(() => { const r = document.querySelector(':target').getBoundingClientRect(); "
        "return [r.top, r.bottom, innerHeight]; })()")
    assert 0 <= top and bottom <= height


def test_the_page_requests_nothing_but_itself(browser, check_page):
    requests = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert requests == [check_page]
    assert browser.evaluate("performance.getEntriesByType('resource').length") == 0
    # What would fetch something is refused by the page's own policy, before any request.
    violated = browser.evaluate(
        "new Promise(done => { document.addEventListener('securitypolicyviolation', e => done(e.violatedDirective));"
        " setTimeout(() => done('no violation'), 5000); fetch('http://127.0.0.1:9/').catch(() => {}); })", wait=True)
    assert violated == "connect-src"
