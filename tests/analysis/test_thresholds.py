"""Thresholds a user can justify: the per-dtype table, `tolerance = "dtype"` from the less
precise arm, the near-tie derived per row, and the report's word on where thresholds came from
and on a zero noise floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.analysis.audit import AuditThresholds, audit_trace
from difftest.analysis.compare import NEAR_TIE, STATUS_NAMES, compare
from difftest.core.rules import Rules
from difftest.config import ComparisonSpec, load_config
from difftest.core.errors import ConfigError, UsageError
from difftest.analysis.floor import measure_floor
from difftest.flow.evaluate import ArmOutcome, evaluate, judge_traces
from difftest.flow.overrides import Overrides
from difftest.core.thresholds import DTYPE_TOLERANCES, Dtype, ToleranceMode, parse_dtype
from difftest.numerics.tolerance import Tolerance, derived_near_tie
from difftest.trace import parse_trace

DATA = Path(__file__).parents[1] / "data" / "compare"


def status_at(c: object, req: str, pos: int, row: int) -> str:
    r = c.rows  # type: ignore[attr-defined]
    for i in range(len(r)):
        if (c.requests[int(r.req[i])], int(r.pos[i]), int(r.row[i])) == (req, pos, row):  # type: ignore[attr-defined]
            return STATUS_NAMES[int(r.status[i])]
    raise AssertionError(f"no row {req}@{pos} row {row}")


def test_the_table_is_torch_testings_default() -> None:
    torch = pytest.importorskip("torch")
    from torch.testing._comparison import _DTYPE_PRECISIONS  # the documented source

    names = {Dtype.FLOAT64: torch.float64, Dtype.FLOAT32: torch.float32,
             Dtype.FLOAT16: torch.float16, Dtype.BFLOAT16: torch.bfloat16}
    for dtype, (atol, rtol) in DTYPE_TOLERANCES.items():
        assert _DTYPE_PRECISIONS[names[dtype]] == (rtol, atol), dtype


@pytest.mark.parametrize(("text", "dtype"), [
    ("bf16", Dtype.BFLOAT16), ("torch.bfloat16", Dtype.BFLOAT16), ("FP16", Dtype.FLOAT16),
    ("half", Dtype.FLOAT16), ("float32", Dtype.FLOAT32), ("double", Dtype.FLOAT64)])
def test_dtype_spellings(text: str, dtype: Dtype) -> None:
    assert parse_dtype(text) is dtype


def test_an_unknown_dtype_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'int8'.*bfloat16"):
        parse_dtype("int8")


ARMS = ('[arms.a]\ncommand = ["x"]\ndtype = "bf16"\n'
        '[arms.b]\ncommand = ["x"]\n')


def test_config_arm_dtype_reaches_the_comparison(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text(ARMS + '[comparisons.c]\narm_a = "a"\narm_b = "b"\ntolerance = "dtype"\n')
    config = load_config(path)
    spec = config.comparison("c")
    assert config.arms["a"].dtype is Dtype.BFLOAT16
    assert spec.rules.tolerance is ToleranceMode.DTYPE
    assert spec.arm_dtypes == (Dtype.BFLOAT16, None)
    assert spec.rules.near_tie is None  # derived unless set


@pytest.mark.parametrize(("extra", "expected"), [
    ('[arms.z]\ncommand = ["x"]\ndtype = "int8"\n', "[arms.z]: key 'dtype': unknown dtype 'int8'"),
    ('[comparisons.c]\narm_a = "a"\narm_b = "b"\ntolerance = "dtype"\natol = 0.1\n',
     "[comparisons.c]: key 'tolerance': \"dtype\" takes atol and rtol from the dtype table"),
    # zero is a value too: the table would replace it silently
    ('[comparisons.c]\narm_a = "a"\narm_b = "b"\ntolerance = "dtype"\natol = 0.0\n',
     "[comparisons.c]: key 'tolerance': \"dtype\" takes atol and rtol from the dtype table: set "
     "either tolerance or atol/rtol, not both (key 'atol' is set, to 0.0)"),
    ('[comparisons.c]\narm_a = "a"\narm_b = "b"\nrtol = 0\ntolerance = "dtype"\n',
     "(key 'rtol' is set, to 0)"),
    ('[comparisons.c]\narm_a = "a"\narm_b = "b"\ntolerance = "loose"\n',
     "[comparisons.c]: key 'tolerance': must be \"dtype\""),
])
def test_bad_dtype_settings_name_file_table_and_key(tmp_path: Path, extra: str,
                                                    expected: str) -> None:
    path = tmp_path / "d.toml"
    path.write_text(ARMS + extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value)


# agree_a vs ties_b: a@8 row 3 flips with margins A 0.02, B 0.005 (B's top-1 4.49); b@9 row 2
# flips with margins A 0.03, B 0.53.

def test_near_tie_derived_per_row_from_atol() -> None:
    a, b = parse_trace(DATA / "agree_a.log"), parse_trace(DATA / "ties_b.log")
    c = compare(a, b, Rules(near_tie=None, atol=0.011))  # 2 * 0.011 = 0.022 > 0.02 and 0.005
    assert status_at(c, "a", 8, 3) == "near-tie"
    assert status_at(c, "b", 9, 2) == "differ"
    assert c.near_tie_derived and c.near_tie_admitted == pytest.approx(0.005)
    c = compare(a, b, Rules(near_tie=None, atol=0.009))  # 0.018 < A's margin 0.02: no longer a tie
    assert status_at(c, "a", 8, 3) == "differ"
    assert c.near_tie_admitted is None


def test_near_tie_derived_follows_the_rows_top1_through_rtol() -> None:
    a, b = parse_trace(DATA / "agree_a.log"), parse_trace(DATA / "ties_b.log")
    # 2 * 0.0023 * 4.49 = 0.0207 admits a@8 (margins 0.02, 0.005); a fixed 0.0046 would not
    c = compare(a, b, Rules(near_tie=None, rtol=0.0023))
    assert status_at(c, "a", 8, 3) == "near-tie"
    c = compare(a, b, Rules(near_tie=None, rtol=0.0021))  # 0.0189 < 0.02
    assert status_at(c, "a", 8, 3) == "differ"


def test_bitwise_derives_no_near_tie_even_for_an_exact_tie() -> None:
    assert derived_near_tie(Tolerance(), __import__("numpy").array([3.0]))[0] == 0.0
    a, b = parse_trace(DATA / "agree_a.log"), parse_trace(DATA / "ties_b.log")
    c = compare(a, b, Rules(near_tie=None))
    assert int((c.rows.status == NEAR_TIE).sum()) == 0


def test_a_set_near_tie_overrides_the_derived_rule() -> None:
    a, b = parse_trace(DATA / "agree_a.log"), parse_trace(DATA / "ties_b.log")
    c = compare(a, b, Rules(near_tie=0.001, atol=0.5))  # derived would be 1.0 and admit both flips
    assert status_at(c, "a", 8, 3) == "differ" and not c.near_tie_derived


def with_config_line(tmp_path: Path, name: str, line: str) -> Path:
    out = tmp_path / name
    out.write_text(line + "\n" + (DATA / name).read_text())
    return out


def test_dtype_tolerance_comes_from_the_less_precise_arm_and_says_so(tmp_path: Path) -> None:
    a = with_config_line(tmp_path, "agree_a.log", "[spec-config] dtype_logits=bfloat16")
    spec = ComparisonSpec("c", "A", "B", Rules(tolerance=ToleranceMode.DTYPE),
                          arm_dtypes=(None, Dtype.FLOAT32))
    rep = judge_traces(a, DATA / "ties_b.log", spec)
    assert rep.comparison is not None
    assert (rep.comparison.rules.atol, rep.comparison.rules.rtol) == DTYPE_TOLERANCES[Dtype.BFLOAT16]
    said = [r for r in rep.verdict.reasons if r.startswith("thresholds:")]
    assert len(said) == 1 and "bfloat16" in said[0] and "dtype_logits" in said[0]
    assert "arm A" in said[0] and "torch.testing" in said[0]
    # bf16's rtol makes a@8 a near-tie (2*(1e-5 + 0.016*4.49) = 0.144), and the report says
    # how and the largest margin it admitted
    assert status_at(rep.comparison, "a", 8, 3) == "near-tie"
    rule = [r for r in rep.verdict.reasons if r.startswith("near_tie derived")]
    assert len(rule) == 1 and "largest margin admitted 0.005" in rule[0]


def test_dtype_tolerance_of_two_float32_arms_is_tight(tmp_path: Path) -> None:
    spec = ComparisonSpec("c", "A", "B", Rules(tolerance=ToleranceMode.DTYPE),
                          arm_dtypes=(Dtype.FLOAT32, Dtype.FLOAT32))
    rep = judge_traces(DATA / "agree_a.log", DATA / "ties_b.log", spec)
    assert rep.comparison is not None
    assert status_at(rep.comparison, "a", 8, 3) == "differ"
    assert any("arms.A.dtype in the config" in r for r in rep.verdict.reasons)


def test_dtype_tolerance_without_a_dtype_is_refused_naming_the_arm() -> None:
    spec = ComparisonSpec("c", "A", "B", Rules(tolerance=ToleranceMode.DTYPE),
                          arm_dtypes=(Dtype.FLOAT32, None))
    with pytest.raises(UsageError, match="comparison c: .*B states none"):
        judge_traces(DATA / "agree_a.log", DATA / "ties_b.log", spec)


def thresholds_said(rep: object) -> list[str]:
    return [r for r in rep.verdict.reasons if r.startswith("thresholds:")]  # type: ignore[attr-defined]


def test_overrides_of_a_dtype_comparison_win_zero_included_and_are_credited(
        tmp_path: Path) -> None:
    # under bf16 a@8 is a near-tie; --atol 0 --rtol 0 must make the comparison bitwise, not be
    # taken for "unset" and replaced by the table
    a = with_config_line(tmp_path, "agree_a.log", "[spec-config] dtype_logits=bfloat16")
    spec = ComparisonSpec("c", "A", "B", Rules(tolerance=ToleranceMode.DTYPE),
                          arm_dtypes=(None, Dtype.FLOAT32))
    rep = judge_traces(a, DATA / "ties_b.log", Overrides.of(dict(atol=0.0, rtol=0.0)).on(spec))
    assert rep.comparison is not None
    assert (rep.comparison.rules.atol, rep.comparison.rules.rtol) == (0.0, 0.0)
    assert status_at(rep.comparison, "a", 8, 3) == "differ"
    assert thresholds_said(rep) == ["thresholds: atol 0, rtol 0 from the overrides"]
    # one override: the other value still comes from the table, and each is credited
    rep = judge_traces(a, DATA / "ties_b.log", Overrides.of(dict(atol=0.5)).on(spec))
    assert rep.comparison is not None
    assert (rep.comparison.rules.atol, rep.comparison.rules.rtol) == (0.5, 1.6e-2)
    said = thresholds_said(rep)
    assert len(said) == 1 and said[0].startswith("thresholds: atol 0.5 from the overrides; rtol "
                                                 "0.016 from the dtype table (bfloat16"), said


def test_an_override_of_a_thresholds_file_value_is_credited_to_the_override() -> None:
    spec = ComparisonSpec("c", "A", "B", Rules(atol=0.002, near_tie=0.004), thresholds="t.toml",
                          threshold_origin="t.toml (calibrated: n 3)")
    rep = judge_traces(DATA / "agree_a.log", DATA / "ties_b.log", Overrides.of(dict(atol=0.6)).on(spec))
    assert rep.comparison is not None and rep.comparison.rules.atol == 0.6
    assert thresholds_said(rep) == ["thresholds: atol 0.6 from the overrides; rtol 0, near_tie "
                                    "0.004 from t.toml (calibrated: n 3)"]
    rep = judge_traces(DATA / "agree_a.log", DATA / "ties_b.log", spec)
    assert thresholds_said(rep) == ["thresholds: atol 0.002, rtol 0, near_tie 0.004 from t.toml "
                                    "(calibrated: n 3)"]


def test_bitwise_by_default_says_nothing_about_thresholds() -> None:
    rep = judge_traces(DATA / "agree_a.log", DATA / "ties_b.log", ComparisonSpec("c", "A", "B"))
    assert not [r for r in rep.verdict.reasons if r.startswith(("thresholds:", "near_tie derived"))]
    assert rep.comparison is not None and rep.comparison.rules.atol == rep.comparison.rules.rtol == 0.0


def outcome(name: str, path: Path) -> ArmOutcome:
    trace = parse_trace(path)
    return ArmOutcome(name, path, trace=trace, audit=audit_trace(trace, AuditThresholds()))


def test_a_zero_floor_is_named_with_what_it_means() -> None:
    a = outcome("A", DATA / "agree_a.log")
    rerun = outcome("A#run2", DATA / "agree_a.log")
    b = outcome("B", DATA / "agree_b.log")
    rep = evaluate(ComparisonSpec("c", "A", "B", Rules(noise_runs=2)), a, b, AuditThresholds(),
                   reruns_of_a=[rerun])
    note = [r for r in rep.verdict.reasons if r.startswith("noise floor of A is zero")]
    assert len(note) == 1
    assert "deterministic" in note[0] and "judged bitwise" in note[0]
    assert "difftest calibrate" in note[0]
    assert measure_floor("A", [a.trace, rerun.trace]).zero  # type: ignore[list-item]


def test_a_nonzero_floor_is_not_called_deterministic() -> None:
    a = outcome("A", DATA / "agree_a.log")
    rerun = outcome("A#run2", DATA / "shift_b.log")
    b = outcome("B", DATA / "agree_b.log")
    rep = evaluate(ComparisonSpec("c", "A", "B", Rules(noise_runs=2)), a, b, AuditThresholds(),
                   reruns_of_a=[rerun])
    assert not [r for r in rep.verdict.reasons if "deterministic" in r]


@pytest.mark.parametrize(("da", "db", "loose"), [
    (Dtype.FLOAT32, Dtype.BFLOAT16, Dtype.BFLOAT16), (Dtype.FLOAT16, Dtype.FLOAT32, Dtype.FLOAT16),
    (Dtype.FLOAT64, Dtype.FLOAT16, Dtype.FLOAT16), (Dtype.FLOAT16, Dtype.BFLOAT16, Dtype.BFLOAT16)])
def test_the_less_precise_arm_sets_the_tolerance_whichever_side(da: Dtype, db: Dtype,
                                                                 loose: Dtype) -> None:
    spec = ComparisonSpec("c", "A", "B", Rules(tolerance=ToleranceMode.DTYPE),
                          arm_dtypes=(da, db))
    rep = judge_traces(DATA / "agree_a.log", DATA / "agree_b.log", spec)
    assert rep.comparison is not None
    assert (rep.comparison.rules.atol, rep.comparison.rules.rtol) == DTYPE_TOLERANCES[loose]


def half_trace(value: str, dtype: str | None) -> object:
    from difftest.trace import parse_text

    head = f"[spec-config] dtype_logits={dtype}\n" if dtype else ""
    return parse_text(head + "[spec-propose] rows=1 nqpr=2 drafts/row=1 first=[7 ]\n"
                      f"[spec-logits] req=r pos=5 row=1 top=[ 7:{value} 3:2 ]\n"
                      "[SPECTRACE] req=r pos=5 k=1 ns=2 acc=1 draft=[ 7 ] emit=[ 7 9 ]\n",
                      path=f"{value}-{dtype}")


@pytest.mark.parametrize(("dtype", "judged"), [(None, "unresolved"), ("float32", "unresolved"),
                                                ("bfloat16", "differ")])
def test_a_stated_half_dtype_makes_its_short_prints_exact(dtype: str | None, judged: str) -> None:
    # 4.46875 and 4.5 are neighbouring bfloat16 numbers, 0.03125 apart; read as a 6-digit print
    # each is only known to 5e-6, so against a bound 4e-6 under their difference the row is
    # unresolved; a bf16 arm's values are the numbers themselves and the row differs
    a, b = half_trace("4.46875", dtype), half_trace("4.5", dtype)
    c = compare(a, b, Rules(atol=0.03125 - 4e-6, near_tie=0.0))  # type: ignore[arg-type]
    unresolved = bool(c.rows.logit_unresolved[0])
    assert ("differ" if c.blocks_logit_differing else
            "unresolved" if unresolved else "same") == judged


def test_a_bf16_claim_with_values_that_are_not_bf16_changes_nothing() -> None:
    import numpy as np

    from difftest.numerics.resolution import exact_in_half

    assert exact_in_half(np.array([4.46875, 4.5, -2.0]), "bfloat16")
    assert not exact_in_half(np.array([4.46875, 4.49]), "bfloat16")
    assert exact_in_half(np.array([4.46875, 0.000244140625]), "float16")
    assert not exact_in_half(np.array([4.4687500001]), "float16")
