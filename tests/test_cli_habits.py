"""The command line behaves as its ecosystem expects: --version, -h, completion, help on every
option, one error style with exit 2, NO_COLOR, and exit 1 for "differ" and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from difftest.cli import app
from conftest import Ran, cli_in

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
COMPARE = DATA / "compare"


def difftest(*args: object, stdout: object = subprocess.PIPE,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh process, with this checkout's package."""
    full = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    full.pop("DIFFTEST_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "difftest", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=full, timeout=300, check=False,
                          cwd=REPO)


def difftest_in(*args: object) -> Ran:
    """The same command line run in this process (`conftest.cli_in`): for what a command does
    with its arguments, where no process of its own is under test."""
    return cli_in(REPO, *map(str, args), env={"DIFFTEST_TRACEBACK": ""})


def test_version_names_the_package_and_the_trace_scanner() -> None:
    done = difftest("--version")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("difftest ") and lines[1].startswith("trace scanner: ")


def test_dash_h_is_help_and_completion_is_on() -> None:
    runner = CliRunner()
    short, long = runner.invoke(app, ["-h"]), runner.invoke(app, ["--help"])
    assert short.exit_code == long.exit_code == 0
    assert short.output == long.output
    assert "--install-completion" in long.output and "--version" in long.output
    assert runner.invoke(app, ["compare", "-h"]).output == runner.invoke(
        app, ["compare", "--help"]).output


def test_every_option_has_help_text_that_markup_did_not_eat() -> None:
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    missing = []
    for name, command in group.commands.items():
        for param in command.params:
            if getattr(param, "help", None) in (None, "") and param.name not in ("help",):
                missing.append(f"{name} {param.opts[0]}")
    assert missing == []
    audit_help = CliRunner().invoke(app, ["audit", "--help"]).output
    assert "[audit]" in " ".join(audit_help.split())


def test_no_color_means_no_escape_sequences() -> None:
    for args in (["--help"], ["compare", "--help"], ["compare", "--bogus"]):
        done = difftest(*args, env={"NO_COLOR": "1", "TERM": "xterm-256color"})
        assert "\x1b" not in done.stdout + done.stderr


@pytest.mark.parametrize("args, message", [
    (["compare", "--bogus"], "No such option: --bogus"),
    (["compare", "--trace-a", COMPARE / "agree_a.log", "--trace-b", COMPARE / "agree_b.log",
      "--near-tie", "-1"], "the overrides: comparison near_tie: must be >= 0, got -1"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["audit", "/nonexistent/trace.log"], "no such trace file"),
    (["check", "--config", DATA / "configs" / "bad_syntax.toml"], "TOML syntax error"),
    (["compare", "--trace-a", COMPARE / "agree_a.log"], "--trace-a and --trace-b go together"),
    (["compare", "--arm-a", "paged", "--trace-b", COMPARE / "agree_b.log"],
     "give either --trace-a/--trace-b or arms, not both"),
])
def test_one_error_style_for_usage_errors_and_bad_input(args: list[object],
                                                        message: str) -> None:
    done = difftest_in(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("difftest: error: ") and message in done.stderr
    assert "Usage:" not in done.stderr and "Traceback" not in done.stderr
    assert "internal error" not in done.stderr  # said as what it is, not as a bug
    assert len(done.stderr.strip().splitlines()) == 1


def test_no_arguments_print_the_help_on_stdout_and_exit_2() -> None:
    done = difftest()
    assert done.returncode == 2 and done.stderr == "", done.stderr
    assert done.stdout.startswith("Usage: difftest [OPTIONS] COMMAND [ARGS]...")
    assert "  compare  " in done.stdout and "Traceback" not in done.stdout


def test_stdout_to_a_full_device_is_a_clear_error() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        done = difftest("compare", "--trace-a", COMPARE / "agree_a.log", "--trace-b",
                        COMPARE / "agree_b.log", stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("difftest: error: cannot write to standard output: No space "
                                   "left on device")


def test_a_reader_that_stops_early_is_a_clear_error_not_a_difference(tmp_path: Path) -> None:
    """`difftest parse ... | head`: the pipe closes while events are written; click would exit
    1 on the broken pipe, which says "differ"."""
    trace = tmp_path / "long.log"
    trace.write_text("".join(f"[spec-logits] req=a pos={i} row=0 top=[ 1:2.5 3:1.25 ]\n"
                             for i in range(4000)))  # ~700 kB of JSON, past any pipe buffer
    full = dict(os.environ, PYTHONPATH=str(REPO))
    full.pop("DIFFTEST_TRACEBACK", None)
    proc = subprocess.Popen([sys.executable, "-m", "difftest", "parse", "-f", "json", trace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 2, err
    assert err == "difftest: error: cannot write to standard output: Broken pipe\n"


@pytest.mark.parametrize("args", [["--help"], ["compare", "--trace-a", "agree_a.log",
                                                  "--trace-b", "agree_b.log"]])
def test_a_closed_stdout_is_a_clear_error_not_a_difference(args: list[str]) -> None:
    # started with standard output closed (`>&-`): Python gives the process no sys.stdout;
    # exit 1 would say "differ"
    full = dict(os.environ, PYTHONPATH=str(REPO))
    full.pop("DIFFTEST_TRACEBACK", None)
    done = subprocess.run(["sh", "-c", 'exec "$0" -m difftest "$@" >&-', sys.executable, *args],
                          stderr=subprocess.PIPE, text=True, env=full, timeout=300, check=False,
                          cwd=COMPARE)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("difftest: error: standard output is closed") \
        and "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "env"), [
    ([], {}),  # the help that no arguments print
    (["cache"], {}),
    (["--help"], {}),
    ([], {"_DIFFTEST_COMPLETE": "source_bash"}),  # the completion script a shell sources
    ([], {"_DIFFTEST_COMPLETE": "complete_bash", "COMP_WORDS": "difftest ", "COMP_CWORD": "1"}),
])
def test_every_path_to_standard_output_says_a_full_device_the_one_way(
        args: list[str], env: dict[str, str]) -> None:
    """Help and shell completion write standard output too: a full device is the one error
    line and exit 2 there as well, not a traceback and exit 1."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        done = difftest(*args, stdout=full, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("difftest: error: cannot write to standard output: No space "
                                   "left on device")


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_into_a_closed_pipe_is_a_clear_error_not_a_difference(args: list[str]) -> None:
    """The reader is gone before the process starts (click's own main exits 1 on the broken
    pipe, silently)."""
    full = dict(os.environ, PYTHONPATH=str(REPO))
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "difftest", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=full, timeout=300,
                              check=False)
    finally:
        os.close(write)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "difftest: error: cannot write to standard output: Broken pipe\n"


def test_help_to_a_descriptor_not_open_for_writing_names_standard_output() -> None:
    with open(os.devnull) as read_only:
        done = difftest("--help", stdout=read_only)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("difftest: error: cannot write to standard output: Bad file "
                                   "descriptor")


def test_a_completion_request_for_a_shell_it_lacks_is_not_a_difference() -> None:
    done = difftest(env={"_DIFFTEST_COMPLETE": "bash_source"})  # click's spelling, not typer's
    assert done.returncode == 2, (done.stdout, done.stderr)


def test_the_command_group_keeps_clicks_context_settings() -> None:
    """`main` runs the command itself, so what a caller passes for the context (a help width,
    a default map) must still reach it."""
    wide = CliRunner().invoke(app, ["compare", "--help"], terminal_width=200)
    assert max(map(len, wide.output.splitlines())) > 100
    json = CliRunner().invoke(app, ["parse", str(COMPARE / "agree_a.log")],
                              default_map={"parse": {"format": "json"}})
    assert json.exit_code == 0 and json.output.lstrip().startswith(("{", "[")), json.output


def _bad_inputs(tmp: Path) -> list[list[object]]:
    gz = tmp / "trace.log.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00garbage")
    empty = tmp / "empty.log"
    empty.write_text("")
    huge = tmp / "huge_int.log"
    huge.write_text("[SPECTRACE] req=a pos=" + "9" * 5000 + " k=1 ns=1 acc=0 draft=[ 1 ] "
                    "emit=[ 2 ]\n")
    agree_a, agree_b = COMPARE / "agree_a.log", COMPARE / "agree_b.log"
    level1 = tmp / "agree_b_level1.log"  # the same drafts, without the logit lines
    level1.write_text("".join(line for line in agree_b.read_text().splitlines(keepends=True)
                              if not line.startswith("[spec-logits]")))
    return [
        ["compare", "--trace-a", agree_a, "--trace-b", level1],
        ["audit", gz], ["audit", empty], ["audit", huge], ["parse", huge],
        ["compare", "--trace-a", agree_a, "--trace-b", agree_b, "--csv", tmp / "no/dir/x.csv"],
        ["compare", "--trace-a", agree_a, "--trace-b", agree_b, "--html", tmp / "no/x.html"],
        ["compare", "--trace-a", agree_a, "--trace-b", agree_b, "--expect", "maybe"],
        ["compare", "--trace-a", agree_a, "--trace-b", tmp],
        ["export", tmp], ["probe", "-c", "nope"], ["compare", "--arm-a", "nope"],
        ["check", "--config", DATA / "configs" / "bad_unknown_key.toml"],
        ["audit", DATA / "malformed_pos.log"], ["parse", DATA / "malformed_pos.log"],
        ["compare", "--trace-a", DATA / "truncated_level3.log", "--trace-b", agree_b],
    ]


def test_no_command_exits_1_unless_the_arms_really_differ(tmp_path: Path) -> None:
    """Exit 1 is CI's "differ": bad input, usage errors, arm failures and even bugs in difftest
    must exit with another code, and never with a traceback."""
    seen = {}
    for args in _bad_inputs(tmp_path):
        done = difftest_in(*args)
        seen[" ".join(map(str, args[:2]))] = done.returncode
        assert done.returncode not in (1,), (args, done.stderr)
        assert done.returncode in (0, 2, 3, 4), (args, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
    # and a real difference still exits 1
    differ = difftest_in("compare", "--trace-a", COMPARE / "agree_a.log", "--trace-b",
                         COMPARE / "differ_b.log")
    assert differ.returncode == 1 and differ.stdout.startswith("traces: DIFFER")


def test_a_bug_is_an_internal_error_not_a_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    import difftest.api as api

    def broken(*args: object, **kwargs: object) -> None:
        raise IndexError("index 0 is out of bounds")

    monkeypatch.setattr(api, "compare_traces", broken)
    monkeypatch.delenv("DIFFTEST_TRACEBACK", raising=False)
    r = CliRunner().invoke(app, ["compare", "--trace-a", str(COMPARE / "agree_a.log"),
                                 "--trace-b", str(COMPARE / "agree_b.log")])
    assert r.exit_code == 2
    assert "difftest: error: internal error IndexError: index 0 is out of bounds" in r.output


def test_html_option_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    r = CliRunner().invoke(app, ["compare", "--trace-a", str(COMPARE / "agree_a.log"),
                                 "--trace-b", str(COMPARE / "differ_b.log"), "--html", str(out)])
    assert r.exit_code == 1, r.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_errors_are_styled_without_the_click_package() -> None:
    """typer vendors click and no longer depends on it: the CLI must not need it either."""
    code = ("import builtins, sys\nreal = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'click' or name.startswith('click.'):\n"
            "        raise ImportError('no click here')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "sys.argv = ['difftest', 'compare', '--bogus']\n"
            "from difftest.cli import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("difftest: error: No such option: --bogus")
