"""Helpers every test module shares: git in a throwaway repository, replay arms that print a
committed trace, and golden files for report formats.

Golden files: `pytest --regen-golden` rewrites them from what the code renders now; without
the flag a mismatch fails and leaves the rendered text beside the golden file as
`<name>.obtained` for a diff."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden"

# An arm that replays a captured trace on stderr, as a runner would print it.
REPLAY = ("import sys; sys.stdout.write('generated 7 blocks\\n'); "
          "sys.stderr.write(open(sys.argv[-1]).read())")


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


def replay_command(trace: Path) -> list[str]:
    """The argv of a replay arm, in config form ({python} is the running interpreter)."""
    return ["{python}", "-c", REPLAY, str(trace)]


def replay_arm(name: str, trace: Path) -> str:
    """A TOML [arms.NAME] table for a replay arm."""
    argv = ", ".join(json.dumps(a) for a in replay_command(trace))
    return f"[arms.{name}]\ncommand = [{argv}]\n"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite tests/golden/* from what the code renders now")


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
