"""Helpers every test module shares: git in a throwaway repository, replay arms that print a
committed trace, and golden files for report formats; and the markers every test gets from what
it needs (see tests/README.md).

Golden files: `pytest --regen-golden` rewrites them from what the code renders now; without
the flag a mismatch fails and leaves the rendered text beside the golden file as
`<name>.obtained` for a diff."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import FrameType, ModuleType
from typing import NamedTuple

import pytest

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden"
DURATIONS = TESTS / "durations.json"

# Markers, applied by pytest_collection_modifyitems below, never by hand. A test's markers come
# from its module (MODULE_MARKS), the fixtures it uses (FIXTURE_MARKS), what its code calls
# (CALL_MARKS) and its measured duration (tests/durations.json, SLOW_S).
SLOW_S = 1.0
MARKERS = {
    "slow": f"measured at {SLOW_S:g} s or more (tests/durations.json), or needs a heavy outside "
            "component (transformers, mlx, llama.cpp, Chromium, Slurm); the fast loop is "
            "-m 'not slow'",
    "subprocess": "starts real processes: arms, the difftest command line, a fresh pytest",
    "torch": "runs the reference runner, which imports torch (in-process or as an arm)",
    "transformers": "runs the Hugging Face transformers runner or adapter (the [hf] extra)",
    "mlx": "runs the mlx-lm runner or adapter (the [mlx] extra)",
    "llamacpp": "runs the llama.cpp runner or adapter (the [llamacpp] extra)",
    "chromium": "loads a page in headless Chromium",
    "slurm": "runs jobs on a Slurm cluster (scripts/slurm-up.sh)",
    "git": "makes git repositories, commits or worktrees",
    "numerics": "float results whose last bit could follow numpy's SIMD dispatch; CI runs these "
                "again with NPY_DISABLE_CPU_FEATURES",
    "fast": "the loop an edit needs (-m fast): not slow, starts no process, makes no git "
            "repository, needs no torch; plus one representative of each of those paths "
            "(FAST_REPRESENTATIVES)",
}
# What keeps a test out of the fast loop: a slow path (a process, git, torch), or slowness.
NOT_FAST = frozenset({"slow", "subprocess", "git", "torch"})
# One cheap test of each path the fast loop leaves out, so an edit that breaks the path still
# fails the loop: running arms (replay arms, run and judge), the command line (typer's runner,
# and a fresh interpreter: what it imports), git, and the reference runner's torch model.
FAST_REPRESENTATIVES = frozenset({
    "tests/flow/test_one_path.py::test_run_starts_each_planned_arm_once_and_judge_names_the_report"
    "[compare]",
    "tests/test_cli.py::test_malformed_trace_exits_2_with_file_and_line",
    "tests/test_cli_startup.py::test_a_compare_of_two_traces_loads_neither_bisect_nor_the_heavy_"
    "libraries",
    "tests/execute/test_worktree.py::test_resolve_ref_names_the_reason",
    "tests/runners/reference/test_reference_trace.py::test_logits_lines_are_the_raw_top8",
})
# Needing one of these makes a test slow whatever it measured.
HEAVY = frozenset({"transformers", "mlx", "llamacpp", "chromium", "slurm"})

NUMERICS = ("numerics",)
MODULE_MARKS: dict[str, tuple[str, ...]] = {
    "runners/reference/": ("torch",),
    "test_analysis_signals.py": ("subprocess",),
    "test_api.py": ("subprocess", "torch"),
    "test_coverage_gate.py": ("subprocess",),
    "test_cli_sweep.py": ("subprocess",),
    "test_scan_builds.py": ("subprocess",),
    "test_run_record.py": ("subprocess",),
    "test_sampled_comparison.py": ("subprocess", "torch"),
    "test_cli.py": ("subprocess",),
    "test_cli_compare.py": ("subprocess",),
    "test_cli_habits.py": ("subprocess",),
    "test_cli_reference.py": ("subprocess",),
    "test_compare.py": NUMERICS,
    "test_compare_logits.py": NUMERICS,
    "test_execute.py": ("subprocess",),
    "test_gate.py": ("subprocess",),
    "test_golden.py": ("subprocess",),
    "test_hf.py": ("transformers", "subprocess"),
    "test_hf_check.py": ("transformers", "subprocess"),
    "test_hf_corpus.py": ("transformers", "subprocess"),
    "test_hf_force.py": ("transformers", "subprocess"),
    "test_hf_sampled.py": ("transformers", "subprocess"),
    "test_hints.py": ("subprocess",),
    "test_html.py": ("subprocess",),
    "test_isolation.py": ("subprocess", "git"),
    "test_logit_sizes.py": NUMERICS,
    "test_localize_baseline.py": ("subprocess",),
    "test_lossless.py": NUMERICS,
    "test_markers.py": ("subprocess",),
    "test_mlx": ("mlx",),
    "test_llamacpp": ("llamacpp",),
    "test_noise.py": NUMERICS,
    "test_numerics_cli.py": ("numerics", "subprocess"),
    "test_one_path.py": ("subprocess",),
    "test_override_errors.py": ("subprocess",),
    "test_paths_gate.py": ("subprocess",),
    "test_paths_logits.py": NUMERICS,
    "test_pipeline.py": ("subprocess",),
    "test_probe_not_applied.py": ("subprocess",),
    "test_pytest_plugin.py": ("subprocess", "torch"),
    "test_report_outputs.py": ("subprocess",),
    "test_resolution.py": NUMERICS,
    "test_rejudge.py": ("subprocess",),
    "test_roles.py": ("subprocess", "torch"),
    "test_review_fixes.py": ("subprocess",),
    "test_slurm.py": ("slurm", "subprocess", "torch"),
    "test_stats.py": NUMERICS,
    "test_supervise.py": ("subprocess",),
    "test_switch_gate.py": ("subprocess", "torch"),
    "test_tolerance.py": NUMERICS,
    "test_worktree.py": ("git", "subprocess"),
}
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "slurm": ("slurm",),
    "default_report": ("torch", "subprocess"),
    "each_reader": (),
}
# What the test's code calls, by the module it comes from ("browser": anything from
# tests/browser.py) or by module.name ("conftest.git": the helper below).
CALL_MARKS: dict[str, tuple[str, ...]] = {
    "browser": ("chromium",),
    "conftest.git": ("git", "subprocess"),
    "subprocess": ("subprocess",),
}


def _module_marks(rel: str) -> set[str]:
    """The markers of a test file, by its path under tests/ ("runners/reference/..." for a folder,
    a name prefix such as "test_mlx" for a family of files)."""
    found: set[str] = set()
    name = rel.rsplit("/", 1)[-1]
    for key, marks in MODULE_MARKS.items():
        if rel == key or name == key or (key.endswith("/") and rel.startswith(key)) or (
                not key.endswith((".py", "/")) and name.startswith(key)):
            found.update(marks)
    return found


def _called(function: object) -> set[str]:
    """Where the globals a test function's code uses (nested functions included) come from:
    a module's name ("subprocess"), or a function's module.name ("conftest.git"); a "tests."
    prefix is dropped, so both import styles of a helper module count."""
    code = getattr(function, "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    scope = getattr(function, "__globals__", {})
    # a module imported inside the function is a name of its code, not a global
    found = {n for n in names - scope.keys() if n in sys.modules}
    for name in names & scope.keys():
        obj = scope[name]
        module = getattr(obj, "__name__", "") if isinstance(obj, ModuleType) else getattr(
            obj, "__module__", None)
        if not module:
            continue
        module = module.removeprefix("tests.")
        found.add(module)
        if not isinstance(obj, ModuleType):
            found.add(f"{module}.{getattr(obj, '__name__', '')}")
    return found


def _durations() -> dict[str, list[float]]:
    """nodeid -> [setup, call] seconds, as `--store-durations` last measured them."""
    try:
        return dict(json.loads(DURATIONS.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}


def _shared_fixtures(item: pytest.Item) -> Iterable[str]:
    """The fixtures of `item` set up once for many tests (module, class, package or session
    scope): the test that runs first pays for them."""
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (getattr(info, "name2fixturedefs", None) or {}).items():
        if defs and defs[-1].scope != "function":
            yield name


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    measured = _durations()
    marks: dict[str, set[str]] = {}
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue  # not one of ours (`pytest --difftest` items)
        found = _module_marks(rel)
        for fixture in getattr(item, "fixturenames", ()):
            found.update(FIXTURE_MARKS.get(fixture, ()))
        for origin in _called(getattr(item, "function", None)) & CALL_MARKS.keys():
            found.update(CALL_MARKS[origin])
        setup, call = measured.get(item.nodeid, (0.0, 0.0))
        if found & HEAVY or setup + call >= SLOW_S:
            found.add("slow")
        marks[item.nodeid] = found
    # A shared fixture that is slow to set up is paid by whichever of its tests runs first: if
    # one test measured slow in its set-up, every test using that fixture is slow.
    slow_setup = {(str(i.path), f) for i in items if measured.get(i.nodeid, (0.0, 0.0))[0] >= SLOW_S
                  for f in _shared_fixtures(i)}
    for item in items:
        if item.nodeid not in marks:
            continue
        if any((str(item.path), f) in slow_setup for f in _shared_fixtures(item)):
            marks[item.nodeid].add("slow")
        if not marks[item.nodeid] & NOT_FAST or item.nodeid in FAST_REPRESENTATIVES:
            marks[item.nodeid].add("fast")
        for name in sorted(marks[item.nodeid]):
            item.add_marker(name)
    _UNMEASURED[:] = [n for n, m in marks.items() if n not in measured and "slow" not in m]


_MEASURED: dict[str, list[float]] = {}
_UNMEASURED: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the tests the slow marker could not judge: they run in the fast loop until measured."""
    if _UNMEASURED and not terminalreporter.config.getoption("--store-durations"):
        files = sorted({n.split("::", 1)[0] for n in _UNMEASURED})
        terminalreporter.write_line(
            f"tests/durations.json has no time for {len(_UNMEASURED)} collected test(s) (in "
            f"{', '.join(files[:5])}{', ...' if len(files) > 5 else ''}); measure them with "
            f"`python -m pytest --store-durations {' '.join(files[:5])}` and commit the file")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call"):
        entry = _MEASURED.setdefault(report.nodeid, [0.0, 0.0])
        entry[0 if report.when == "setup" else 1] = report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """`--store-durations`: merge this run's setup and call times into tests/durations.json
    (entries of test files that no longer exist are dropped)."""
    if not session.config.getoption("--store-durations") or not _MEASURED:
        return
    if hasattr(session.config, "workerinput"):
        return  # under pytest-xdist the controller, which sees every worker's reports, writes
    merged = {k: v for k, v in _durations().items()
              if (TESTS.parent / k.split("::", 1)[0]).exists()}
    merged.update({k: [round(s, 2), round(c, 2)] for k, (s, c) in _MEASURED.items()})
    lines = (f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(merged.items()))
    DURATIONS.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


# An arm that replays a captured trace on stderr, as a runner would print it.
REPLAY = ("import sys; sys.stdout.write('generated 7 blocks\\n'); "
          "sys.stderr.write(open(sys.argv[-1]).read())")


def ctrl_c_reaches_it() -> None:
    """`preexec_fn` of a process a test sends Ctrl-C: SIGINT back to its default, which a test
    run started in the background by a shell (`pytest ... &`) inherits as ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def process_dead(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper that is not us."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_dead(pid: int, within: float) -> bool:
    """Whether `pid` is dead within `within` seconds (polled every 20 ms)."""
    end = time.monotonic() + within
    while time.monotonic() < end and not process_dead(pid):
        time.sleep(0.02)
    return process_dead(pid)


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in `repo` with a fixed identity; its output without the final newline."""
    proc = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args} failed: {proc.stderr}")
    return proc.stdout.rstrip("\n")


# An arm that prints a runner's capture (argv[1]: its path without `.log`) or, where its launch
# sets a mutation (DIFFTEST_MUTATION), the capture of the arm so mutated (PATH+MUTATION.log).
REPLAY_MUTATED = "; ".join([
    "import os, sys", "capture = sys.argv[1]",
    "mutation = os.environ.get('DIFFTEST_MUTATION', 'none')",
    "capture += '' if mutation == 'none' else '+' + mutation",
    "sys.stdout.write('generated\\n')",
    "sys.stderr.write(open(capture + '.log', encoding='utf-8').read())"])


def replay_command(trace: Path) -> list[str]:
    """The argv of a replay arm, in config form ({python} is the running interpreter)."""
    return ["{python}", "-c", REPLAY, str(trace)]


def replay_arm(name: str, trace: Path) -> str:
    """A TOML [arms.NAME] table for a replay arm."""
    argv = ", ".join(json.dumps(a) for a in replay_command(trace))
    return f"[arms.{name}]\ncommand = [{argv}]\n"


# An arm that replays a runner's captured runs for `difftest localize` (argv[-1]: STEM, a path
# without suffix): its free run (STEM.log); teacher-forced (DIFFTEST_FORCE), the forced run
# (STEM.forced.log), refusing a stream other than the one it was captured on (force.json beside
# it); capturing at REQ:POS (DIFFTEST_CAPTURE), the capturing run (STEM.capture-REQ-POS.log) and
# its dumps copied from STEM.capture-REQ-POS/ into DIFFTEST_CAPTURE_DIR. A step or a stream it
# has no capture of fails the arm.
REPLAY_LOCALIZE = "\n".join([
    "import json, os, shutil, sys",
    "stem = sys.argv[-1]",
    "force = os.environ.get('DIFFTEST_FORCE', '').strip()",
    "at = os.environ.get('DIFFTEST_CAPTURE', '').strip()",
    "if force and json.load(open(force)) != json.load(open(os.path.join(",
    "        os.path.dirname(stem), 'force.json'))):",
    "    sys.exit('replay: forced on a stream this arm was not captured on')",
    "if at:",
    "    capture = stem + '.capture-' + at.replace(':', '-')",
    "    shutil.copytree(capture, os.environ['DIFFTEST_CAPTURE_DIR'], dirs_exist_ok=True)",
    "    log = capture + '.log'",
    "else:",
    "    log = stem + ('.forced' if force else '') + '.log'",
    "sys.stdout.write('generated\\n')",
    "sys.stderr.write(open(log, encoding='utf-8').read())"])


def replay_localize_command(stem: Path, *args: str) -> list[str]:
    """The argv of a REPLAY_LOCALIZE arm of the captures at `stem`, in config form; `args`: the
    runner's arguments it was captured with, which the replay ignores and the launch shows (a
    fault given as --fault is part of what the arm says it ran)."""
    return ["{python}", "-c", REPLAY_LOCALIZE, *args, str(stem)]


class Ran(NamedTuple):
    """What a command line gave back: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def _cli_timed_out(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("difftest ran past its time limit (blocked on a FIFO it should have "
                       "refused?)")


def cli_in(cwd: Path, *args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> Ran:
    """`difftest ARGS` run from `cwd` with `env` added to the environment, in this process
    (typer's runner calls the app that `python -m difftest` calls), for tests of what a command
    does rather than of the process it runs in: no interpreter start-up per call. An exception
    the command line lets through fails the test, as a traceback would; a call that blocks
    (a FIFO opened for writing) is cut after `timeout` seconds, as a subprocess timeout would."""
    from typer.testing import CliRunner

    from difftest.cli import app

    previous = signal.signal(signal.SIGALRM, _cli_timed_out)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.chdir(cwd):
            result = CliRunner().invoke(app, list(args), env=env)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


@contextlib.contextmanager
def environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """os.environ with `env` set (None: unset) for the block's duration, then restored as it
    was, variables the block itself set or removed included."""
    saved = os.environ.copy()
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def runner_main(runner: str, *args: str, env: Mapping[str, str | None] | None = None) -> Ran:
    """`python -m difftest.runners.RUNNER ARGS` run in this process: its `main` (whose code the
    command exits with) under `env` (environment()), with what it writes to stdout and stderr.
    For a runner's tests of what it computes and prints rather than of its process: the runner's
    own code, models and option checks, without another interpreter importing torch,
    transformers or mlx again (2-3 s of CPU a start)."""
    main = importlib.import_module(f"difftest.runners.{runner}.__main__").main
    out, err = io.StringIO(), io.StringIO()
    with environment(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 1
    return Ran(code, out.getvalue(), err.getvalue())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite tests/golden/* from what the code renders now")
    parser.addoption("--store-durations", action="store_true",
                     help="merge this run's per-test seconds into tests/durations.json, "
                          "which decides the slow marker")


class Golden:
    """Compare rendered text with tests/golden/<name>; write `<name>.obtained` on a mismatch."""

    def __init__(self, regen: bool) -> None:
        self.regen = regen

    def check(self, name: str, text: str) -> None:
        expected = GOLDEN / name
        obtained = expected.with_name(expected.name + ".obtained")
        if self.regen:
            expected.parent.mkdir(parents=True, exist_ok=True)
            expected.write_text(text, encoding="utf-8")
            obtained.unlink(missing_ok=True)
            return
        if not expected.exists():
            obtained.write_text(text, encoding="utf-8")
            pytest.fail(f"no golden file {expected}; run `pytest --regen-golden` to create it")
        if expected.read_text(encoding="utf-8") != text:
            obtained.write_text(text, encoding="utf-8")
            pytest.fail(f"{name} differs from its golden file; compare {expected} with "
                        f"{obtained}, and run `pytest --regen-golden` if the change is meant")
        obtained.unlink(missing_ok=True)


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(bool(request.config.getoption("--regen-golden")))


READERS = ("compiled", "pure")


@pytest.fixture(params=READERS)
def each_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a parser test under both readers (parse calls that do not name one follow the
    DIFFTEST_PURE_PARSER setting): every expectation holds for the compiled scanner and the
    pure-Python reader alike, and each one's own code is exercised."""
    from difftest.trace import fast_path_available
    from difftest.trace.parser import PURE_ENV

    reader = str(request.param)
    if reader == "compiled" and not fast_path_available():
        pytest.skip("the compiled scanner is not built")
    monkeypatch.setenv(PURE_ENV, "1" if reader == "pure" else "0")
    return reader


def verify_line(req: str, pos: int, draft: list[int], emit: list[int]) -> str:
    """A `[SPECTRACE]` line as the producer prints it (acc = ns - 1)."""
    return (f"[SPECTRACE] req={req} pos={pos} k={len(draft)} ns={len(emit)} acc={len(emit) - 1} "
            f"draft=[ {' '.join(map(str, draft))} ] emit=[ {' '.join(map(str, emit))} ]")


def logits_line(req: str, pos: int, row: int, top: list[tuple[int, str]]) -> str:
    """A `[spec-logits]` line with the values spelled as given."""
    cells = " ".join(f"{i}:{x}" for i, x in top)
    return f"[spec-logits] req={req} pos={pos} row={row} top=[ {cells} ]"
