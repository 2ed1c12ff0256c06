"""Arm names: what a configured name may be, and every name difftest gives an arm it adds to
the configured ones. This is the one place an arm's name is composed; every command's plan
(compare, check, probe, noise, calibrate, localize, a bisect round) takes its names from here
(`tests/test_one_path.py` refuses a name composed anywhere else).

An added arm's name is its configured arm's name and a mark no configured name is given for
that purpose: `#2` (the second run of a self-pair), `#runK` (run K of arm A: its noise floor),
`#seqK` (round K of `--until-decided`), `+MUTATION` (a mutated arm), `(as B)` (arm A rerun as
B: the built-in inert probe), `A:`/`B:` and `@INPUT` (a calibration input), `KEY-` (a rerun
that captures activations for localize), `@COMMIT.SLOT` (a bisect's test of a commit).
"""

from __future__ import annotations

MAX_ARM_NAME = 100  # arm names become file names and table rows
MAX_NAME = MAX_ARM_NAME
ROUND = "#seq"
_WORD = 40  # the longest calibration input an arm is named by (a longer one: by its place)


def name_problem(name: str) -> str | None:
    """Why a configured name (arm, comparison, mutation) cannot be one, else None. These names
    become file names in a run directory (captures, diff-<comparison>.csv), so none may climb
    out of it or hide a control character in a report."""
    if not name.strip():
        return "must not be empty"
    if len(name) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters, this one has {len(name)}"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "must not contain control characters"
    if "/" in name or "\\" in name:
        return "must not contain a path separator ('/' or '\\')"
    if ".." in name or name == ".":
        return "must not be '.' or contain '..'"
    return None


def second_run(arm: str, n: int = 2) -> str:
    """Arm B of a comparison of an arm with itself: the arm's `n`-th name (`ARM#2`, or `#3`...
    where a configured arm has that one)."""
    return f"{arm}#{n}"


def rerun_name(arm: str, run: int) -> str:
    """The name of arm's `run`-th run (1-based); run 1 keeps the arm's own name."""
    return arm if run == 1 else f"{arm}#run{run}"


def round_name(arm: str, round_: int) -> str:
    """An arm's run in round `round_` of `--until-decided`."""
    return f"{arm}{ROUND}{round_}"


def is_round(name: str) -> bool:
    """Whether an arm's name is one of `--until-decided`'s rounds (`round_name`)."""
    head, sep, tail = name.rpartition(ROUND)
    return bool(sep and head and tail.isdigit())


def mutated_name(arm: str, mutation: str) -> str:
    """`<arm>+<mutation>`: the mutated arm's capture files sit beside the base's."""
    return f"{arm}+{mutation}"


def judged_against(comparison: str, what: str) -> str:
    """`<comparison>/<what>`: a comparison judged again against a mutated arm B (`what` the
    mutation), against arm A itself (`self`) or against A's capture as B (the inert probe)."""
    return f"{comparison}/{what}"


def pair_name(arm_a: str, arm_b: str) -> str:
    """`<arm_a>-vs-<arm_b>`: a comparison no config names (two arms given on the command line,
    a noise run's rerun against its first run)."""
    return f"{arm_a}-vs-{arm_b}"


def rerun_as(arm_a: str, arm_b: str) -> str:
    """Arm A's output judged as arm B (the built-in inert probe)."""
    return f"{arm_a}(as {arm_b})"


def on_input(side: str, arm: str, value: str, index: int) -> str:
    """Arm `side` (A or B) of a calibration on one input: by the input where it is a short
    word, else by its place in the list (a prompt)."""
    word = value if len(value) <= _WORD and " " not in value and name_problem(value) is None \
        else f"input{index + 1}"
    return f"{side}:{arm}@{word}"


def capturing(key: str, arm: str) -> str:
    """An arm rerun by localize to capture its activations, `KEY-NAME` (KEY: a, b or b0)."""
    return f"{key}-{arm}"


def at_commit(arm: str, short: str, slot: int) -> str:
    """An arm (or a comparison) run at a commit in a bisect, once per `slot` of that commit in
    the round."""
    return f"{arm}@{short}.{slot}"
