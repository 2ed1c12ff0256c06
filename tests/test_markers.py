"""Markers come from what a test needs, applied by conftest.py at collection: by module, by the
fixtures a test uses and what it calls, and by its measured duration (tests/durations.json).
The checks read real test files collected in a fresh pytest (one collection, shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLI = "tests/runners/reference/test_reference_cli.py"
FILES = ("tests/report/test_html.py", "tests/test_slurm.py", CLI, "tests/numerics/test_resolution.py",
         "tests/trace/test_align.py")

# A plugin that prints every collected test's markers as one JSON object.
DUMP = """
import json

def pytest_collection_finish(session):
    marks = {i.nodeid: sorted({m.name for m in i.iter_markers()}) for i in session.items}
    print("MARKS" + json.dumps(marks))
"""


def run_pytest(*args: str, plugins: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(REPO), *([str(plugins)] if plugins else [])])
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=path), capture_output=True,
                          text=True, timeout=300, check=False)


def markers(tmp_path: Path, *files: str) -> dict[str, set[str]]:
    """node id -> its markers, from a fresh collection of `files`."""
    (tmp_path / "dump_marks.py").write_text(DUMP)
    done = run_pytest("-p", "dump_marks", *files, plugins=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("MARKS"))
    return {k: set(v) for k, v in json.loads(line.removeprefix("MARKS")).items()}


def representative_files() -> list[str]:
    from tests.conftest import FAST_REPRESENTATIVES

    return sorted({n.split("::", 1)[0] for n in FAST_REPRESENTATIVES})


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """One fresh collection of every file the tests below read (a test's markers depend on its
    own file and the measured durations only, not on what else is collected with it)."""
    files = dict.fromkeys([*FILES, *representative_files()])
    return markers(tmp_path_factory.mktemp("marks"), *files)


def test_module_fixtures_calls_and_durations_give_the_markers(
        collected: dict[str, set[str]]) -> None:
    marks = {n: m for n, m in collected.items() if n.split("::", 1)[0] in FILES}
    assert {n.split("::", 1)[0] for n in marks} == set(FILES)

    def tests_with(marker: str, file: str) -> set[str]:
        return {n.split("::")[1] for n, m in marks.items() if n.startswith(file) and marker in m}

    # what a test calls: only the tests that drive the browser (tests/browser.py) need Chromium
    assert tests_with("chromium", "tests/report/test_html.py") == {
        "test_chromium_loads_the_report_with_no_failed_request_and_drawn_figures",
        "test_chromium_screenshot_shows_the_page",
        "test_a_blocked_reference_is_caught_by_the_probe"}
    # the module's components; a heavy one makes a test slow whatever it measured
    slurm = [m for n, m in marks.items() if n.startswith("tests/test_slurm.py")]
    assert slurm and all({"slurm", "slow", "subprocess"} <= m for m in slurm)
    assert all("torch" in m for n, m in marks.items() if n.startswith(CLI))
    assert {n for n, m in marks.items() if "numerics" in m} == {
        n for n in marks if n.startswith("tests/numerics/test_resolution.py")}
    # measured: a test of 1 s or more is slow, and so is every user of a shared fixture that
    # was slow to set up (`runs`, module scope, starts five runner processes), whatever its
    # own call cost
    measured = json.loads((REPO / "tests" / "durations.json").read_text())
    for node, (setup, call) in measured.items():
        if node in marks and setup + call >= 1.0:
            assert "slow" in marks[node], node
    assert "slow" in marks[f"{CLI}::test_no_trace_without_vt_spec_trace"]
    assert measured[f"{CLI}::test_no_trace_without_vt_spec_trace"][1] < 1.0
    assert "slow" not in marks[f"{CLI}::test_bad_option_and_help_do_not_import_torch"]
    assert not any("slow" in m for n, m in marks.items() if n.startswith("tests/trace/test_align.py"))


def test_the_markers_are_registered_and_a_misspelt_one_is_an_error(tmp_path: Path) -> None:
    names = ("slow", "subprocess", "torch", "transformers", "mlx", "chromium", "slurm", "git",
             "numerics", "fast")
    good = tmp_path / "test_good.py"
    good.write_text("import pytest\n" + "".join(
        f"\n\n@pytest.mark.{n}\ndef test_{n}() -> None:\n    pass\n" for n in names))
    bad = tmp_path / "test_bad.py"
    bad.write_text("import pytest\n\n\n@pytest.mark.slwo\ndef test_x() -> None:\n    pass\n")
    config = ("-p", "tests.conftest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO))
    done = run_pytest(*config, str(good))
    assert done.returncode == 0 and f"{len(names)} tests collected" in done.stdout, done.stdout
    refused = run_pytest(*config, str(bad))
    assert refused.returncode != 0
    assert "'slwo' not found in `markers`" in refused.stdout + refused.stderr


def test_the_fast_loop_is_what_no_slow_path_needs_and_one_test_of_each(
        collected: dict[str, set[str]]) -> None:
    """`-m fast`: no test that is slow, starts a process, makes a git repository or needs
    torch, except the one named representative of each such path, which exists and is in."""
    from tests.conftest import FAST_REPRESENTATIVES, NOT_FAST

    files = {"tests/trace/test_align.py", *representative_files()}
    marks = {n: m for n, m in collected.items() if n.split("::", 1)[0] in files}
    assert {n.split("::", 1)[0] for n in marks} == files
    for node, found in marks.items():
        if node in FAST_REPRESENTATIVES:
            assert "fast" in found, node
        else:
            assert ("fast" in found) == (not found & NOT_FAST), (node, found)
    assert FAST_REPRESENTATIVES <= marks.keys()  # each representative still exists
    paths = {kind for node in FAST_REPRESENTATIVES for kind in marks[node] & NOT_FAST}
    assert {"subprocess", "git", "torch"} <= paths  # every slow path keeps a test in the loop
    assert all("fast" in m for n, m in marks.items() if n.startswith("tests/trace/test_align.py"))
