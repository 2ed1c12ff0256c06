"""Every report format against a golden file. `pytest --regen-golden` rewrites them; a mismatch
leaves `<name>.obtained` beside the golden file."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TESTS, Golden
from difftest import api
from difftest.flow.judge import CheckResult
from difftest.flow.evaluate import ComparisonReport
from difftest.report import audit_report, events, gate_report
from difftest.report import comparison as render

PAIRS = {"agree": ("agree_a.log", "agree_b.log", {}),
         "differ": ("agree_a.log", "differ_b.log", {}),
         "shift": ("agree_a.log", "shift_b.log", {"near_tie": 0.05, "atol": 0.02}),
         "uninformative": ("degenerate_a.log", "degenerate_b.log", {})}


@pytest.fixture(autouse=True)
def _relative_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TESTS)  # reports name traces by the path they were given


def _report(pair: str) -> ComparisonReport:
    a, b, overrides = PAIRS[pair]
    return api.compare_traces(Path("data/compare") / a, Path("data/compare") / b,
                              config=TESTS.parent / "difftest/configs/default.toml",
                              **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("pair", PAIRS)
def test_comparison_reports(pair: str, golden: Golden) -> None:
    rep = _report(pair)
    golden.check(f"{pair}.json", render.render_json(rep) + "\n")
    golden.check(f"{pair}.md", render.render_markdown(rep))
    golden.check(f"{pair}.table.txt", render.render_table(rep) + "\n")
    golden.check(f"{pair}.csv", render.csv_text(rep))
    golden.check(f"{pair}.csv", render.csv_text(rep, pure=True))  # the rows joined in Python


def test_check_reports(golden: Golden) -> None:
    result = CheckResult(Path("difftest.toml"), None, tuple(_report(p) for p in PAIRS), {},
                         started_at="2026-12-03T00:00:00+00:00", duration_s=1.5)
    golden.check("check.junit.xml", gate_report.junit_xml(result, hostname="ci-host"))
    golden.check("check.md", gate_report.check_markdown(result))
    golden.check("check.json", gate_report.render_check_json(result) + "\n")
    golden.check("check.txt", gate_report.check_lines(result) + "\n")


def test_trace_reports(golden: Golden) -> None:
    parsed = api.audit(Path("data/two_requests_level3.log"))
    golden.check("audit.json", audit_report.render_json(parsed.audit, parsed.trace) + "\n")
    golden.check("audit.table.txt", audit_report.render_table(parsed.audit, parsed.trace) + "\n")
    golden.check("events.json", events.render_json(parsed.trace) + "\n")
    golden.check("events.csv", "".join(events.iter_csv(parsed.trace)))
    golden.check("events.table.txt", events.render_table(parsed.trace) + "\n")
