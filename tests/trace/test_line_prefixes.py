"""Lines behind a launcher's or logger's prefix: `srun -l`'s `N: `, `[rankN]:`, ISO timestamps,
`LEVEL name:`, and an arm's own `line_prefix`. Behind a known prefix a tag is read and a `vt:`
error fails the arm; behind an unknown one it is a finding, never skipped as noise. Both readers
(compiled and pure-Python) agree on every case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from difftest.core.kinds import FindingKind
from difftest.trace import parse_text
from difftest.trace.parser import fast_path_available
from conftest import Ran, cli_in

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data" / "compare"
PY = sys.executable
READERS = [pytest.param(True, id="pure"),
           pytest.param(False, id="compiled", marks=pytest.mark.skipif(
               not fast_path_available(), reason="the compiled scanner is not built"))]
VERIFY = "[SPECTRACE] req=a pos=1 k=1 ns=1 acc=0 draft=[ 3 ] emit=[ 4 ]"
KNOWN = ["0: ", "  3: ", "17:", "[rank0]: ", "[rank12]:", "2026-12-03 16:20:01 ",
         "2026-12-03T16:20:01.123Z ", "2026-12-03 16:20:01,123+01:00 ", "INFO vllm: ",
         "ERROR vllm.engine: ", "WARNING:root:", "[rank0]: 2026-12-03 16:20:01 ERROR x: ",
         "[2026-12-03 16:20:01] ", "[2026-12-03T16:20:01.5Z]", "ERROR 12-03 16:20:01 [engine.py:42] ",
         "INFO 12-03 16:20:01.123 [v1/core/sched.py:7] "]
UNKNOWN = ["node7| ", "  ", "host-a | ", "INFO ", ">> ", "x|"]


@pytest.mark.parametrize("pure", READERS)
@pytest.mark.parametrize("prefix", KNOWN)
def test_a_known_prefix_is_stripped_before_the_tag_and_the_engine_error(prefix: str,
                                                                      pure: bool) -> None:
    t = parse_text(f"{prefix}{VERIFY}\n{prefix}vt: CUDA error: out of memory\n", "t.log",
                   pure=pure)
    assert (len(t.verifies), t.findings) == (1, ())
    assert [(e.line, e.message) for e in t.engine_errors] == [
        (2, "vt: CUDA error: out of memory")]


@pytest.mark.parametrize("pure", READERS)
@pytest.mark.parametrize("prefix", UNKNOWN)
def test_a_tag_or_engine_error_behind_an_unknown_prefix_is_a_finding(prefix: str,
                                                                   pure: bool) -> None:
    t = parse_text(f"{VERIFY}\n{prefix}{VERIFY}\n{prefix}vt: boom\n", "t.log", pure=pure)
    assert [(f.line, f.kind) for f in t.findings] == [(2, FindingKind.MISPLACED_TAG),
                                                      (3, FindingKind.MISPLACED_TAG)]
    assert "line_prefix" in t.findings[0].message
    assert (len(t.verifies), t.engine_errors) == (1, ())


@pytest.mark.parametrize("pure", READERS)
def test_text_that_only_resembles_a_prefix_stays_output(pure: bool) -> None:
    t = parse_text("3 tokens [done]\nINFO dvt: 3\n0: plain\n[rank0]: hello\n"
                   "2026-12-03 16:20:01 started\n", pure=pure)
    assert (t.findings, t.engine_errors, t.lines_skipped) == ((), (), 5)


@pytest.mark.parametrize("pure", READERS)
def test_an_arms_own_prefix_pattern(pure: bool) -> None:
    text = f"host-a | {VERIFY}\nhost-a | vt: boom\n"
    bare = parse_text(text, pure=pure)
    assert len(bare.findings) == 2 and not bare.verifies.req.size
    own = parse_text(text, pure=pure, line_prefix=r"[\w-]+ \| ")
    assert (own.findings, len(own.verifies), len(own.engine_errors)) == ((), 1, 1)


def _difftest(cwd: Path, *args: str) -> Ran:
    """`difftest ARGS` from `cwd`, in this process (`conftest.cli_in`); the arms it runs are
    processes of their own."""
    return cli_in(cwd, *args)


@pytest.mark.parametrize("line", ["[rank0]: vt: CUDA error: out of memory",
                                  "2026-12-03 16:20:01 vt: CUDA error: out of memory",
                                  "0: INFO engine: vt: CUDA error: out of memory"])
def test_a_prefixed_engine_error_fails_the_arm(tmp_path: Path, line: str) -> None:
    b = tmp_path / "b.log"
    b.write_text((DATA / "agree_b.log").read_text() + line + "\n")
    r = _difftest(tmp_path, "compare", "--trace-a", str(DATA / "agree_a.log"), "--trace-b",
                  str(b))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "vt: CUDA error: out of memory" in r.stdout


def _arm(name: str, prefix: str, extra: str = "") -> str:
    trace = (DATA / "agree_a.log").read_text()
    code = ("import sys\nfor line in sys.stdin.read().splitlines():\n"
            f"    print({prefix!r} + line, file=sys.stderr)\n")
    runner = f"import sys; sys.stdin = open({str(DATA / 'agree_a.log')!r}); exec({code!r})"
    assert trace
    return (f"[arms.{name}]\ncommand = [{json.dumps(PY)}, \"-c\", {json.dumps(runner)}]\n"
            + extra)


def test_an_arm_with_line_prefix_is_read_and_one_without_is_not(tmp_path: Path) -> None:
    cfg = (_arm("plain", "") + _arm("tagged", "host-a | ", "line_prefix = '[\\w-]+ \\| '\n")
           + _arm("untold", "host-a | ")
           # the prefix changes how lines are printed, not what runs: no trace-visible switch
           + '[comparisons.told]\narm_a = "plain"\narm_b = "tagged"\ntoggle = []\n'
           + '[comparisons.untold]\narm_a = "plain"\narm_b = "untold"\ntoggle = []\n')
    (tmp_path / "difftest.toml").write_text(cfg)
    told = _difftest(tmp_path, "compare", "-c", "told", "--run-root", "runs", "--no-progress")
    assert told.returncode == 0, told.stdout + told.stderr
    untold = _difftest(tmp_path, "compare", "-c", "untold", "--run-root", "runs",
                       "--no-progress")
    assert untold.returncode in (3, 4), untold.stdout + untold.stderr
    # re-judging the recorded run uses the arm's pattern again
    run = next(p for p in (tmp_path / "runs").iterdir() if "told" in p.name
               and "untold" not in p.name)
    assert _difftest(tmp_path, "export", str(run)).returncode == 0


def test_a_bad_line_prefix_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "difftest.toml").write_text(_arm("x", "", "line_prefix = '(['\n"))
    r = _difftest(tmp_path, "check", "--no-progress")
    assert r.returncode == 2
    assert "difftest.toml: [arms.x]: key 'line_prefix': not a valid regular expression" in r.stderr


def test_trace_commands_take_a_line_prefix_option(tmp_path: Path) -> None:
    b = tmp_path / "b.log"
    b.write_text("".join(f"host-b | {line}\n"
                         for line in (DATA / "agree_b.log").read_text().splitlines()))
    args = ("compare", "--trace-a", str(DATA / "agree_a.log"), "--trace-b", str(b))
    bare = _difftest(tmp_path, *args)  # nothing read: no trace lines, misplaced-tag findings
    assert bare.returncode == 2 and "no VT_SPEC_TRACE lines" in bare.stderr
    told = _difftest(tmp_path, *args, "--line-prefix", r"host-\w \| ")
    assert told.returncode == 0, told.stdout + told.stderr
    assert _difftest(tmp_path, "audit", str(b), "--line-prefix", r"host-\w \| ").returncode == 0
    r = _difftest(tmp_path, "parse", str(b), "--line-prefix", "(")
    assert r.returncode == 2 and "line_prefix '(': not a valid regular expression" in r.stderr
