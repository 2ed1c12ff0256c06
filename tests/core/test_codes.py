"""Every code a report spells comes from an enum, and keeps the spelling the reports always
had: row statuses (int8 in the row table), where the drafting kind came from, how steps were
paired, what caught a mutation."""

from __future__ import annotations

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
    assert [k.value for k in KilledBy] == ["tokens", "logits", "emitted", "expectation",
                                           "arm-failed"]
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
