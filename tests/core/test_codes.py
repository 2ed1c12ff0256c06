"""Every code a report spells comes from an enum, and keeps the spelling the reports always
had: row statuses (int8 in the row table), where the drafting kind came from, how steps were
paired, what caught a mutation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from difftest.analysis.compare import STATUS_NAMES, DraftingSource, RowStatus, compare
from difftest.core.kinds import AlignMode, AuditVerdict, Instrument, KilledBy
from difftest.analysis.verdict import LOGITS, TOKENS
from tests.analysis.test_compare_logits import arm, block

CSV = ("same", "differ", "near-tie", "unmatched-a", "unmatched-b", "context-diverged",
       "noise-flip")


def test_row_statuses_are_small_ints_with_their_csv_names() -> None:
    assert [int(s) for s in RowStatus] == list(range(len(CSV)))
    assert tuple(s.csv for s in RowStatus) == STATUS_NAMES == CSV
    assert np.iinfo(np.int8).max >= max(RowStatus)


def test_a_comparison_stores_statuses_as_int8_and_names_its_codes() -> None:
    a = arm(block("r", 5, [1, 2, 3], [1, 2]), block("r", 6, [4], [4]))
    b = arm(block("r", 5, [1, 9, 3], [1, 2]), block("r", 6, [4], [4]))
    c = compare(a, b, drafting_source="flag")
    assert c.rows.status.dtype == np.int8
    assert [RowStatus(int(s)).csv for s in c.rows.status] == ["same", "differ", "same", "same"]
    assert c.drafting_source is DraftingSource.FLAG and c.mode is AlignMode.POSITION
    assert compare(a, b).drafting_source is DraftingSource.DEFAULT
    with pytest.raises(ValueError, match="'typed' is not a valid DraftingSource"):
        compare(a, b, drafting_source="typed")


def test_instrument_and_kill_spellings_are_the_reports() -> None:
    assert (TOKENS, LOGITS) == (Instrument.TOKENS, Instrument.LOGITS) == ("tokens", "logits")
    assert Instrument.ACCEPTANCE == "acceptance"
    assert [k.value for k in KilledBy] == ["tokens", "logits", "emitted", "acceptance",
                                           "expectation", "arm-failed"]
    assert f"killed by {KilledBy.ARM_FAILED}" == "killed by arm-failed"


def test_an_audit_says_its_verdict_with_an_enum_spelt_as_before() -> None:
    from pathlib import Path

    from difftest.analysis.audit import audit_trace
    from difftest.config import AuditThresholds
    from difftest.trace import parse_trace

    data = Path(__file__).parents[1] / "data" / "compare"
    audit = audit_trace(parse_trace(data / "agree_a.log"), AuditThresholds())
    assert audit.verdict is AuditVerdict.INFORMATIVE and audit.informative
    assert audit.to_dict()["verdict"] == "informative"


# -- the sides and the probe labels ------------------------------------------------------------

SIDES = ("a", "b")
PROBE_RESULTS = ("killed", "SURVIVED", "NOT-APPLIED")
PROBE_STATES = ("PASS", "NOT-APPLIED", "BLIND", "FAIL")


def test_sides_and_probe_labels_keep_the_reports_spellings() -> None:
    from difftest.core.kinds import ArmSide, ProbeResult, ProbeState
    from difftest.flow.plan import Role

    assert tuple(ArmSide) == SIDES and (Role.A, Role.B) == SIDES
    assert tuple(ProbeResult) == PROBE_RESULTS and tuple(ProbeState) == PROBE_STATES


def test_reports_take_sides_and_probe_labels_from_the_enums(tmp_path: Path) -> None:
    """The values a report spells are enum members (not strings that happen to match), and the
    rendered report spells them as before."""
    from difftest.core.kinds import ArmSide, ProbeResult
    from difftest.flow.scoring import MutationResult, ProbeReport
    from difftest.report import gate_report
    from difftest.report.comparison import to_dict
    from tests.report.test_report_outputs import report

    agree = report(tmp_path, "lanes", ("main", "agree_a.log"), ("branch", "agree_b.log"))
    differ = report(tmp_path, "shift", ("base", "agree_a.log"), ("shifted", "shift_b.log"))
    data = to_dict(differ)
    for key in ("unmatched", "steps_lost"):
        sides = [k for k in data[key] if k != "rows"]
        assert sides == list(ArmSide) and all(isinstance(k, ArmSide) for k in sides), key
    mutations = [MutationResult("skip-kv-write", True, "tokens", ("tokens",), 3, 0, differ),
                 MutationResult("stale-seq-lens", False, None, (), 0, 0, agree),
                 MutationResult("no-op", False, None, (), 0, 0, agree, applied=False)]
    assert [type(m.result) for m in mutations] == [ProbeResult] * 3
    assert [m.result for m in mutations] == list(PROBE_RESULTS)
    table = gate_report.probe_table(ProbeReport("lanes", "main", "branch", agree, mutations))
    assert [line.split()[1] for line in table.splitlines()
            if line.split()[:1] in (["skip-kv-write"], ["stale-seq-lens"], ["no-op"])] == \
        list(PROBE_RESULTS)


def test_one_sided_logits_name_their_side_by_the_enum() -> None:
    from difftest.analysis.compare import OneSided
    from difftest.core.kinds import ArmSide

    assert OneSided("b", 1, 3).traced_by is ArmSide.B
    with pytest.raises(ValueError, match="'c' is not a valid ArmSide"):
        OneSided("c", 1, 3)  # type: ignore[arg-type]


# Strings that spell a side or a probe label and are not that code: file modes, a JSON field
# named after a flag. Every other spelling lives in difftest/core/kinds.py.
NOT_CODES = {("bisect/journal.py", "a"): "append mode", ("report/outputs.py", "a"): "append mode",
             ("report/gate_report.py", "killed"): "the JSON field `killed` (a bool)"}


def test_no_module_spells_a_side_or_a_probe_label_itself() -> None:
    import ast

    package = Path(__file__).resolve().parents[2] / "difftest"
    assert (package / "core" / "kinds.py").is_file(), package  # a scan of nothing finds nothing
    codes = set(SIDES + PROBE_RESULTS + PROBE_STATES)
    labels = set(PROBE_RESULTS + PROBE_STATES)
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where == "core/kinds.py" or where.split("/")[0] in ("runners", "adapters"):
            continue  # the enums themselves; programs of their own, which speak the trace format
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            # a label opening a sentence ("SURVIVED: ...") is the label too
            if (node.value in codes or node.value.split(":")[0] in labels) and \
                    (where, node.value) not in NOT_CODES:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    assert found == []
