"""The run plan: each command's arms and each arm's role per comparison, named in one place,
and the run record meta.json keeps of it, read back for every kind of run (old records too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.config import Config, parse_config
from difftest.core.errors import UsageError
from difftest.flow.plan import (PLAN_FORMAT, Judged, PlanKind, Role, plan_check, plan_compare,
                           plan_noise, plan_probe, read_run)

ARMS = "".join(f'[arms.{n}]\ncommand = ["true"]\nevidence = ["lane = {n}"]\n'
               for n in ("p", "m"))
CONFIG = ARMS + """
[mutations.flip]
env = { FLIP = "1" }
[comparisons.lanes]
arm_a = "p"
arm_b = "m"
mutations = ["flip"]
noise_runs = 3
[comparisons.det]
arm_a = "p"
arm_b = "p"
"""


def _config(tmp_path: Path, text: str = CONFIG) -> Config:
    return parse_config(text, tmp_path / "difftest.toml")


def _names(judged: tuple[Judged, ...]) -> list[str]:
    return [j.name for j in judged]


def test_compare_names_the_reruns_of_a_and_their_roles(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    plan = plan_compare(cfg, cfg.comparison("lanes"))
    assert plan.kind is PlanKind.COMPARE and plan.label == "lanes"
    assert [a.name for a in plan.arms] == ["p", "m", "p#run2", "p#run3"]
    (j,) = plan.judged
    assert j.roles() == {"p": Role.A, "m": Role.B, "p#run2": Role.RERUN_OF_A,
                         "p#run3": Role.RERUN_OF_A}
    assert [r.text for r in j.evidence[0]] == ["lane = p"]
    assert plan.record() == {"format": PLAN_FORMAT, "kind": "compare", "roles": {
        "lanes": {"p": "a", "m": "b", "p#run2": "rerun-of-a", "p#run3": "rerun-of-a"}},
        **plan.judged_record()}
    assert plan.record()["comparison"]["name"] == "lanes"  # type: ignore[index]


def test_a_self_pair_runs_the_arm_twice_under_a_second_name(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    plan = plan_compare(cfg, cfg.comparison("det"))
    assert [a.name for a in plan.arms] == ["p", "p#2"]
    assert (plan.judged[0].spec.arm_a, plan.judged[0].spec.arm_b) == ("p", "p#2")
    # the second run keeps the arm's command and env
    assert plan.arms[1].command == plan.arms[0].command


def test_check_runs_each_arm_once_and_names_each_mutation_comparison(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    plan = plan_check(cfg)
    assert [a.name for a in plan.arms] == ["p", "m", "m+flip", "p#run2", "p#run3", "p#2"]
    assert _names(plan.judged) == ["lanes", "lanes/flip", "det"]
    assert _names(plan.bases()) == ["lanes", "det"]
    flip = plan.comparison("lanes/flip")
    assert flip.roles()["m+flip"] is Role.MUTATED_B and flip.mutation == "flip"
    assert flip.evidence[1] == ()  # arm B's evidence is not asked of a mutated arm
    assert _names(plan.mutations_of(plan.comparison("lanes"))) == ["lanes/flip"]
    assert _names(plan_check(cfg, ["lanes"], probes=False).judged) == ["lanes"]
    assert plan.record()["check"] == ["lanes", "det"]


def test_probe_runs_the_named_mutations_else_the_comparisons(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    plan = plan_probe(cfg, cfg.comparison("lanes"))
    assert plan.selected == ("flip",) and plan.label == "probe-lanes"
    assert [a.name for a in plan.arms] == ["p", "m", "m+flip", "p#run2", "p#run3"]
    meta = plan.record()
    assert meta["probe"] == ["flip"]
    assert list(meta["comparisons"]) == ["lanes", "lanes/flip"]  # type: ignore[call-overload]


def test_noise_names_each_rerun_against_the_first_run(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    plan = plan_noise(cfg, "p", 3)
    assert [a.name for a in plan.arms] == ["p", "p#run2", "p#run3"]
    assert _names(plan.judged) == ["p-vs-p#run2", "p-vs-p#run3"]
    assert plan.record()["noise"] == {"arm": "p", "runs": 3}
    with pytest.raises(UsageError, match="--noise-runs must be an integer from 2"):
        plan_noise(cfg, "p", 1)


def test_a_configured_arm_with_a_rerun_name_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, CONFIG + '[arms."p#run2"]\ncommand = ["true"]\n')
    with pytest.raises(UsageError, match="an arm is named 'p#run2'"):
        plan_noise(cfg, "p", 2)


@pytest.mark.parametrize("extra, kind", [
    ({"check": ["a"]}, PlanKind.CHECK),
    ({"noise": {"arm": "p", "runs": 2}}, PlanKind.NOISE),
    ({"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"}, "probe": []}, PlanKind.PROBE),
    ({"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"}}, PlanKind.COMPARE),
])
def test_a_record_without_a_plan_is_read_by_its_shape(extra: dict[str, object],
                                                      kind: PlanKind) -> None:
    assert read_run(Path("run"), {"extra": extra}, ["p", "m"]).kind is kind


def test_an_old_noise_record_names_its_comparisons() -> None:
    run = read_run(Path("run"), {"extra": {"noise": {"arm": "p", "runs": 3}}},
                   ["p", "p#run2", "p#run3"])
    assert run.names() == ["p-vs-p#run2", "p-vs-p#run3"]
    spec, evidence = run.pick("p-vs-p#run3")
    assert (spec.arm_a, spec.arm_b, evidence) == ("p", "p#run3", ((), ()))
    with pytest.raises(UsageError, match="a run of 2 comparisons; name one with --comparison"):
        run.pick(None)


def test_a_run_has_one_record_the_plan_and_every_reader_reads_it(tmp_path: Path) -> None:
    """What the run judged is in the plan record beside the roles, and read from there: an
    `extra` beside a current plan record is not read (it would be a second record)."""
    cfg = _config(tmp_path)
    plan = plan_probe(cfg, cfg.comparison("lanes"))
    record = plan.record()
    assert record["format"] == PLAN_FORMAT and record["kind"] == "probe"
    assert set(plan.judged_record()) <= set(record)
    decoy = {"comparisons": {"other": {"comparison": {"name": "other", "arm_a": "p",
                                                     "arm_b": "m"}}}}
    run = read_run(Path("run"), {"plan": record, "extra": decoy}, [a.name for a in plan.arms])
    assert run.key == "plan" and run.names() == ["lanes", "lanes/flip"]
    spec, _ = run.pick("lanes/flip")
    assert (spec.arm_a, spec.arm_b) == ("p", "m+flip")
    broken = {**record, "comparisons": "lanes"}
    with pytest.raises(UsageError, match="key 'plan.comparisons' must be a table"):
        read_run(Path("run"), {"plan": broken}, []).pick("lanes")


def test_a_check_record_that_lost_its_comparisons_is_not_judged_from_a_config() -> None:
    """A current record always holds its comparisons: one that lost them is damaged, and
    is not judged from the config it names (which a relative path resolves anew wherever
    export runs); a run recorded before check kept them still is (tests/flow/test_rejudge.py)."""
    record = {"format": PLAN_FORMAT, "kind": "check", "roles": {}, "check": ["lanes"],
              "config": "difftest.toml", "audit": {}}
    with pytest.raises(UsageError, match="key 'plan.comparisons' has no comparison 'lanes' "
                                         "although the run's plan names it"):
        read_run(Path("run"), {"plan": record}, []).pick("lanes")


@pytest.mark.parametrize("plan, message", [
    ({"format": PLAN_FORMAT + 1, "kind": "check"},
     f"plan format {PLAN_FORMAT + 1} is newer than this difftest"),
    ({"format": "1", "kind": "check"},
     r"key 'plan.format' must be a plan format \(an integer from 1\), got '1'"),
    ({"format": 0, "kind": "check"}, "key 'plan.format' must be a plan format"),
    ({"format": -5, "kind": "check"}, "key 'plan.format' must be a plan format"),
    ({"format": True, "kind": "check"}, "key 'plan.format' must be a plan format"),
    ({"kind": "check"}, "key 'plan.format' is missing"),
    ({"format": 1, "kind": "merge"}, "plan kind must be one of compare, check, probe, noise, "
                                     "calibrate, localize, bisect, got 'merge'"),
    ("compare", "run/meta.json: key 'plan' must be a table"),
    ({"format": 1, "kind": "compare", "roles": {"x": {"fa": "a", "fb": "a"}}},
     r"run/meta.json: key 'plan.roles.x': a comparison has one arm A and one arm B"),
    ({"format": 1, "kind": "compare", "roles": {"x": {"fa": "a"}}},
     r"key 'plan.roles.x': a comparison has one arm A and one arm B"),
    ({"format": 1, "kind": "compare", "roles": {"x": {"fa": "a", "fb": "c"}}},
     r"key 'plan.roles.x': a role is one of a, b, rerun-of-a, mutated-b"),
    ({"format": 1, "kind": "compare", "roles": ["x"]}, r"key 'plan.roles' must be a table"),
])
def test_a_plan_record_this_difftest_cannot_read_is_refused(plan: object,
                                                            message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_run(Path("run"), {"plan": plan, "extra": {}}, [])


def test_the_plan_roles_must_name_the_arms_of_the_comparison_picked() -> None:
    meta = {"plan": {"format": 1, "kind": "compare", "roles": {"x": {"p": "b", "m": "a"}}},
            "extra": {"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"}}}
    with pytest.raises(UsageError, match=r"run/meta.json: key 'plan.roles.x' does not match "
                                         r"the comparison it records \(arm A 'p', arm B 'm'\)"):
        read_run(Path("run"), meta, ["p", "m"]).pick(None)
    meta["plan"]["roles"]["x"] = {"p": "a", "m": "b"}  # type: ignore[index]
    spec, _ = read_run(Path("run"), meta, ["p", "m"]).pick("x")
    assert (spec.arm_a, spec.arm_b) == ("p", "m")


@pytest.mark.parametrize("kind", ["calibrate", "localize", "bisect"])
def test_export_of_a_run_its_command_judged_says_so(kind: str) -> None:
    record = read_run(Path("run"), {"plan": {"format": 1, "kind": kind, "roles": {}},
                                    "extra": {"calibrate": {}}}, ["a", "b"])
    with pytest.raises(UsageError, match=f"a {kind} run: `difftest {kind}` judged its arms "
                                         "itself, and it records no comparison to judge again"):
        record.pick(None)


@pytest.mark.parametrize("record, message", [
    ({"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"}, "evidence": "x"},
     r"key 'plan.evidence' must be two lists of rules \(arm A's, arm B's\), got 'x'"),
    ({"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"}, "evidence": [["lane ="], []]},
     r"key 'plan.evidence': "),
    ({"comparisons": {"x": {"comparison": {"name": "x", "arm_a": "p", "arm_b": "m"},
                            "evidence": [[]]}}},
     r"key 'plan.comparisons.x.evidence' must be two lists of rules"),
    ({"check": "x", "comparisons": {}}, r"key 'plan.check' must be a list of comparison names"),
])
def test_a_damaged_part_of_a_run_record_is_named_by_its_key(record: dict[str, object],
                                                            message: str) -> None:
    meta = {"plan": {"format": PLAN_FORMAT, "kind": "compare", "roles": {}, "audit": {},
                     **record}}
    with pytest.raises(UsageError, match=rf"run/meta.json: {message}"):
        read_run(Path("run"), meta, ["p", "m"]).pick("x")


def test_a_current_record_without_its_audit_thresholds_is_damaged() -> None:
    """Judged under default thresholds, a run could pass an audit its own did not; a record
    of an older format without them (written before runs kept them) still takes the defaults,
    and a command that judges its own arms records none."""
    comparison = {"name": "x", "arm_a": "p", "arm_b": "m"}
    with pytest.raises(UsageError, match="run/meta.json: key 'plan.audit' is missing"):
        read_run(Path("run"), {"plan": {"format": PLAN_FORMAT, "kind": "compare", "roles": {},
                                        "comparison": comparison}}, ["p", "m"])
    assert read_run(Path("run"), {"extra": {"comparison": comparison}}, ["p", "m"]).pick("x")
    read_run(Path("run"), {"plan": {"format": PLAN_FORMAT, "kind": "bisect", "roles": {}}}, [])
