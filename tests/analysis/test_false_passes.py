"""False passes: trace pairs that carry a real difference and once came out `agree`. Each is a
named case with the smallest traces that show it; a green here means nothing larger than the
stated blind radius passed."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from difftest import api
from difftest.cli import app
from difftest.analysis.compare import DIVERGED, NOISE_FLIP, Comparison
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind, VerdictKind
from difftest.analysis.logit_instrument import blind_radius
from difftest.flow.evaluate import ComparisonReport
from difftest.report import comparison as render
from spec_traces import Step, blocks, chain, f32, judged, shifted, trace_lines
from conftest import replay_arm

COMPARE = Path(__file__).parents[1] / "data" / "compare"


def base(n: int = 10, k: int = 4, seed: int = 0, **kw: float) -> list[Step]:
    return chain("r", blocks(n, k, seed, **kw))


def cmp_of(report: ComparisonReport) -> Comparison:
    assert report.comparison is not None
    return report.comparison


def with_value(step: Step, row: int, entry: int, value: float) -> Step:
    rows = list(step.rows)
    top = list(rows[row])
    top[entry] = (top[entry][0], value)
    rows[row] = tuple(top)
    return Step(step.req, step.pos, tuple(rows), step.acc, step.bonus)


# -- 1. non-finite values are compared as values ------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("tol", [(1e-4, 0.0), (1e-5, 1e-5)])
def test_a_non_finite_value_in_b_is_a_difference_under_any_tolerance(
        bad: float, tol: tuple[float, float]) -> None:
    a = base()
    b = list(a)
    b[3] = with_value(b[3], 1, 2, bad)  # not the top-1: the drafted tokens stay the same
    report = judged(trace_lines(a), trace_lines(b), atol=tol[0], rtol=tol[1])
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    assert cmp_of(report).blocks_logit_differing == 1


def test_a_whole_row_of_nan_in_b_is_a_difference() -> None:
    a = base()
    b = list(a)
    rows = list(b[5].rows)
    rows[2] = tuple((i, math.nan) for i, _ in rows[2])
    b[5] = Step(b[5].req, b[5].pos, tuple(rows))
    report = judged(trace_lines(a), trace_lines(b), atol=1e-4)
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


def test_a_nan_in_b_is_a_difference_under_a_noise_floor() -> None:
    a = base()
    rerun = [shifted(s, 0, 2e-6) for s in a]
    b = list(a)
    b[3] = with_value(b[3], 1, 2, math.nan)
    report = judged(trace_lines(a), trace_lines(b), reruns=[trace_lines(rerun)])
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


def test_the_same_non_finite_value_in_both_arms_is_named() -> None:
    a = base()
    a[3] = with_value(a[3], 1, 3, -math.inf)
    report = judged(trace_lines(a), trace_lines(a), atol=1e-4)
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
    assert any("non-finite" in r and "both arms" in r for r in report.verdict.reasons), \
        report.verdict.reasons
    data = json.loads(render.render_json(report))
    assert data["logit_values_nonfinite_both"] == 1


# -- 2. the A/A floor is measured with the comparison's drafting rules ---------------------------

def sequential_floor_case() -> tuple[list[Step], list[Step], list[Step]]:
    a = base()
    # row 1 of block 4 is a near-tie that one rerun breaks the other way; the rerun's later
    # rows of that block ran on another token
    s = a[4]
    (i0, v0), (i1, _) = s.rows[0][:2]
    a[4] = s = with_value(s, 0, 1, f32(v0 - 1e-4))
    rerun = list(a)
    rows = list(s.rows)
    rows[0] = ((i1, v0), (i0, f32(v0 - 1e-4)), *rows[0][2:])
    rows[1:] = [tuple((i, f32(v + 3.0)) for i, v in r) for r in rows[1:]]
    rerun[4] = Step(s.req, s.pos, tuple(rows))
    # B: +0.5 on the top-1 logit of 4 of the 40 rows
    b = list(a)
    for n in (1, 3, 6, 8):
        b[n] = shifted(b[n], 2, 0.5)
    return a, rerun, b


@pytest.mark.parametrize("declared", [True, False])
def test_a_sequential_floor_leaves_out_the_rows_after_a_rerun_flip(declared: bool) -> None:
    a, rerun, b = sequential_floor_case()
    head = DraftingKind.SEQUENTIAL if declared else None
    report = judged(trace_lines(a, drafting=head), trace_lines(b, drafting=head),
                    reruns=[trace_lines(rerun, drafting=head)], near_tie=0.01,
                    drafting=None if declared else DraftingKind.SEQUENTIAL)
    floor = cmp_of(report).logits.floor  # type: ignore[union-attr]
    assert floor is not None and floor.floor < 1e-3, floor
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


# -- 3. the floor is a bound with a size ---------------------------------------------------------

def noisy_rerun(a: list[Step], size: float = 1.9e-6) -> list[Step]:
    """A rerun of A whose every value moved by about `size` (a float32 step or two)."""
    return [Step(s.req, s.pos, tuple(tuple((i, f32(v + size)) for i, v in r) for r in s.rows))
            for s in a]


def test_three_values_far_above_the_floor_count() -> None:
    a = base()
    rerun = noisy_rerun(a)
    b = list(a)
    for n in (2, 5, 7):
        b[n] = shifted(b[n], 1, 3.0)
    report = judged(trace_lines(a), trace_lines(b), reruns=[trace_lines(rerun)])
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    band = [r for r in report.verdict.reasons if "multiplier" in r or "band" in r]
    assert band, report.verdict.reasons


def test_three_hard_flips_far_above_the_floor_count() -> None:
    a = base()
    rerun = noisy_rerun(a)
    b = list(a)
    for n in (2, 5, 7):
        rows = list(b[n].rows)
        (i0, v0), (i1, v1) = rows[1][:2]
        rows[1] = ((i1, v0), (i0, v1), *rows[1][2:])  # the same values, the ids swapped
        b[n] = Step(b[n].req, b[n].pos, tuple(rows))
    report = judged(trace_lines(a), trace_lines(b), reruns=[trace_lines(rerun)])
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    assert not (cmp_of(report).rows.status == NOISE_FLIP).any()


# -- 4. flips judged as noise are drawn, counted and exported -------------------------------------

def noise_flip_report() -> ComparisonReport:
    a, rerun, b = noise_flip_traces()
    return judged(trace_lines(a), trace_lines(b), reruns=[trace_lines(rerun)])


def noise_flip_traces() -> tuple[list[Step], list[Step], list[Step]]:
    """A, a rerun of A and B: near-equal flips in the rerun (two) and in B (one)."""
    a = base(margin=0.25)
    rerun = list(a)
    b = list(a)
    for n, arm in ((1, rerun), (4, rerun), (6, b)):  # near-equal flips in a rerun and in B
        rows = list(a[n].rows)
        (i0, v0), (i1, _) = rows[0][:2]
        rows[0] = ((i1, v0), (i0, f32(v0 - 1e-6)), *rows[0][2:])
        arm[n] = Step(a[n].req, a[n].pos, tuple(rows))
    a = [with_value(s, 0, 1, f32(s.rows[0][0][1] - 1e-6)) if n in (1, 4, 6) else s
         for n, s in enumerate(a)]
    return a, rerun, b


def test_noise_flips_are_drawn_counted_and_exported(tmp_path: Path) -> None:
    report = noise_flip_report()
    assert (cmp_of(report).rows.status == NOISE_FLIP).sum() == 1, report.verdict.reasons
    page = tmp_path / "report.html"
    api.export_html(report, page)
    assert "noise-flip" in page.read_text()
    out = tmp_path / "diff.csv"
    api.export_csv(report, out)
    assert ",noise-flip," in out.read_text()
    data = json.loads(render.render_json(report))
    assert data["rows_noise_flip"] == 1


# one run of arm A per slot: concurrent runs claim the slots, each prints its slot's trace
CLAIM = ("import os, sys\n"
         "d = sys.argv[-1]\n"
         "for k in range(2):\n"
         "    try:\n"
         "        os.close(os.open(os.path.join(d, f'slot{k}'), os.O_CREAT | os.O_EXCL))\n"
         "    except FileExistsError:\n"
         "        continue\n"
         "    sys.stderr.write(open(os.path.join(d, f'a{k}.log')).read())\n"
         "    break\n")


def test_a_check_with_noise_flips_writes_every_report(tmp_path: Path) -> None:
    a, rerun, b = noise_flip_traces()
    for name, arm in (("a0.log", a), ("a1.log", rerun), ("b.log", b)):
        (tmp_path / name).write_text("\n".join(trace_lines(arm)) + "\n")
    config = tmp_path / "arms.toml"
    config.write_text(
        f"[arms.a]\ncommand = {json.dumps(['{python}', '-c', CLAIM, str(tmp_path)])}\n"
        + replay_arm("b", tmp_path / "b.log")
        + '[comparisons.nf]\narm_a = "a"\narm_b = "b"\nnoise_runs = 2\nnear_tie = 0\n')
    result = api.check(config, run_root=tmp_path / "runs", probes=False, progress=False)
    (report,) = result.reports
    assert cmp_of(report).rows_noise_flip >= 1, report.verdict.reasons
    run_dir = result.run_dir
    assert run_dir is not None
    for name in ("junit.xml", "check.json", "check.md", "check.html", "diff-nf.csv"):
        assert (run_dir / name).is_file(), name
    assert "noise-flip" in (run_dir / "diff-nf.csv").read_text()


# -- 5. a lost step is a difference --------------------------------------------------------------

def test_a_lost_first_step_of_a_request_is_a_difference() -> None:
    a = base()
    b = a[1:]
    report = judged(trace_lines(a), trace_lines(b))
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    assert not any("different acceptance" in r for r in report.verdict.reasons)
    assert any("lost" in r for r in report.verdict.reasons), report.verdict.reasons


def test_a_step_visited_inside_the_other_arms_accepted_run_is_acceptance() -> None:
    # B accepts 2 drafts at pos 0 and so never starts a step at 1 or 2: not a difference
    rows = blocks(6, 4, 3)
    a = chain("r", rows[:1] + rows[3:], acc=[2, 0, 0, 0])
    b = chain("r", rows[:1], acc=[0]) + chain("r", rows[1:3], start=1) + chain(
        "r", rows[3:], start=3)
    b = [Step(s.req, s.pos, s.rows, 0, s.bonus) for s in b]
    # A's steps at pos 0 (acc 2: emits rows 0-1's tokens and 7) and B's at 0, 1, 2 agree on the
    # emitted stream only when B emits what A accepted
    b[0] = Step("r", 0, a[0].rows, 0, a[0].draft[0])
    b[1] = Step("r", 1, rows[1], 0, a[0].draft[1])
    b[2] = Step("r", 2, rows[2], 0, a[0].bonus)
    report = judged(trace_lines(a), trace_lines(b))
    assert not cmp_of(report).divergences
    assert not any("lost" in r for r in report.verdict.reasons), report.verdict.reasons
    # not lost steps; but B verified A's very block at pos 0 and accepted none of what A's
    # accepted: greedy verify of one block from one context accepts alike, so that is the
    # verify or acceptance path differing (difftest.analysis.bugclass), named as such
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons
    assert any(r.startswith("acceptance: at r pos 0 both arms drafted the same tokens")
               for r in report.verdict.reasons), report.verdict.reasons


# -- 6. the stated blind radius is a promise -----------------------------------------------------

def test_the_logit_radius_covers_rows_the_print_cannot_resolve() -> None:
    a = base(low=20.0)  # values in [10, 100): a quantum of 1e-4 at 6 digits
    b = [shifted(s, j, 1.9e-4) for s in a for j in (0,)]
    report = judged(trace_lines(a, digits=6), trace_lines(b, digits=6), atol=1e-4)
    radius = blind_radius(cmp_of(report)).logits
    assert radius is not None and radius >= 1.9e-4, radius
    # and a shift above the stated radius fails
    c = [shifted(s, 0, radius * 1.05) for s in a]
    over = judged(trace_lines(a, digits=6), trace_lines(c, digits=6), atol=1e-4)
    assert over.verdict.kind is VerdictKind.DIFFER, over.verdict.reasons


def test_the_token_radius_covers_near_ties() -> None:
    a = base(margin=0.25)
    report = judged(trace_lines(a), trace_lines(a), near_tie=2.0)
    radius = blind_radius(cmp_of(report)).tokens
    assert radius is not None and radius >= 2.0, radius


# -- 7. one capture is never compared with itself ------------------------------------------------

def test_one_trace_compared_with_itself_is_refused(tmp_path: Path) -> None:
    src = COMPARE / "agree_a.log"
    link = tmp_path / "link.log"
    link.symlink_to(src)
    copy = tmp_path / "copy.log"
    shutil.copyfile(src, copy)
    for other in (src, link):
        with pytest.raises(UsageError, match="itself"):
            api.compare_traces(src, other)
        r = CliRunner().invoke(app, ["compare", "--trace-a", str(src), "--trace-b", str(other)])
        assert r.exit_code == 2 and "itself" in r.output, r.output
    # a byte-identical copy (or two runs of a deterministic engine) is judged: INERT, never a
    # pass
    assert api.compare_traces(src, copy).verdict.kind == "inert"
    r = CliRunner().invoke(app, ["compare", "--trace-a", str(src), "--trace-b", str(copy)])
    assert r.exit_code == 3 and "are byte-identical" in r.output, r.output


def test_a_run_rejudged_with_one_arm_named_twice_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "arms.toml"
    config.write_text(replay_arm("base", COMPARE / "agree_a.log")
                      + replay_arm("cand", COMPARE / "differ_b.log"))
    runs = tmp_path / "runs"
    first = CliRunner().invoke(app, ["compare", "--config", str(config), "--arm-a", "base",
                                     "--arm-b", "cand", "--run-root", str(runs), "--no-progress"])
    assert first.exit_code == 1, first.output
    (run_dir,) = runs.iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["plan"]["comparison"]["arm_b"] = "base"
    (run_dir / "meta.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(app, ["export", str(run_dir)])
    assert r.exit_code == 2 and "itself" in r.output, r.output
    with pytest.raises(UsageError, match="itself"):
        api.rejudge(run_dir)


# -- 8. float64 values printed with too few digits -----------------------------------------------

def test_float64_values_below_float32_resolution_are_not_rounded_away() -> None:
    a = base()
    a = [with_value(s, 0, 1, s.rows[0][1][1] + 1e-9 * (n + 1)) for n, s in enumerate(a)]
    b = [with_value(s, 0, 1, s.rows[0][1][1] + 2e-8) for s in a]
    report = judged(trace_lines(a), trace_lines(b))
    assert report.verdict.kind is not VerdictKind.AGREE or any(
        "float32" in r for r in report.verdict.reasons), report.verdict.reasons
    assert report.verdict.kind is VerdictKind.DIFFER, report.verdict.reasons


# -- 9. reasons count the judged rows only -------------------------------------------------------

def sequential_reasons_report() -> ComparisonReport:
    a = base()
    b = list(a)
    s = a[4]
    rows = list(s.rows)
    (i0, v0), (i1, _) = rows[0][:2]
    rows[0] = ((i1, v0), (i0, v0), *rows[0][2:])  # an exact tie, broken the other way
    # the rows after the near-tie flip ran on another token: other values, other ids entirely
    rows[1] = tuple((i, f32(v + 0.5)) for i, v in rows[1])
    rows[2:] = [tuple((i + 1000, v) for i, v in r) for r in rows[2:]]
    b[4] = Step(s.req, s.pos, tuple(rows))
    a = list(a)
    a[4] = with_value(a[4], 0, 1, v0)
    return judged(trace_lines(a), trace_lines(b), reruns=[trace_lines(a)], near_tie=0.01, atol=1e-5,
                  drafting=DraftingKind.SEQUENTIAL)


def test_reasons_beside_an_agree_count_only_judged_rows(tmp_path: Path) -> None:
    report = sequential_reasons_report()
    c = cmp_of(report)
    assert (c.rows.status == DIVERGED).sum() == 3
    assert report.verdict.kind is VerdictKind.AGREE, report.verdict.reasons
    # the minimum-detectable-effects sentence says which flips it counts; no judgement of a row
    text = " ".join(r for r in report.verdict.reasons
                    if not r.startswith("minimum detectable effects"))
    assert "share no id" not in text and "counts" not in text, report.verdict.reasons
    data = json.loads(render.render_json(report))
    assert data["logit_rows_disjoint"] == 0
    assert data["logit_excess_test"]["exceed"] == 0 and data["flip_test"]["flips_b"] == 0
    out = tmp_path / "diff.csv"
    api.export_csv(report, out)
    assert out.read_text().count(",context-diverged,") == 3
    # the table and the JSON give the same reasons
    table = render.render_table(report).splitlines()
    assert [line[4:] for line in table if line.startswith("  - ")] == data["reasons"]


# -- 10. an internal error is exit 2 whatever the environment says -------------------------------

def test_an_internal_error_is_exit_2_with_the_traceback_shown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise IndexError("index 6 is out of bounds")

    monkeypatch.setattr(api, "compare_traces", broken)
    monkeypatch.setenv("DIFFTEST_TRACEBACK", "1")
    r = CliRunner().invoke(app, ["compare", "--trace-a", str(COMPARE / "agree_a.log"),
                                 "--trace-b", str(COMPARE / "agree_b.log")])
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" in r.output and "IndexError: index 6 is out of bounds" in r.output


def test_float32_prints_are_told_from_wider_ones() -> None:
    import numpy as np

    from difftest.numerics.resolution import WideDigits, arm_digits, float32_prints

    rnd = np.random.default_rng(3)
    x32 = (10.0 ** rnd.uniform(-20, 20, 5000)).astype(np.float32)
    printed = np.array([float(f"{x:.9g}") for x in x32] + [0.0, -0.0, math.nan, math.inf])
    assert float32_prints(printed, 9)
    wider = np.array([float(f"{x:.9g}") for x in rnd.uniform(1, 20, 50)])
    assert not float32_prints(wider, 9)
    digits = np.full(50, 9)
    assert isinstance(arm_digits(wider.reshape(50, 1), digits), WideDigits)
    assert not isinstance(arm_digits(printed[:50].reshape(50, 1), digits), WideDigits)
