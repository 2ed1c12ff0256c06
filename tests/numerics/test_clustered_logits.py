"""KL and top-k overlap errors clustered by request: rows of one request share a context, so
disagreement carried by one request is less evidence than the same disagreement spread over
many, and the interval says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import logits_line, verify_line
from difftest import api
from difftest.report.comparison import to_dict
from difftest.numerics.stats import PairedRows, logit_stats

REQUESTS, ROWS = 10, 20


def _pairs(shift_rows: np.ndarray) -> PairedRows:
    """REQUESTS x ROWS row pairs of a top-4 list; the rows in `shift_rows` see B's head
    reordered (a KL above zero) and one id replaced (overlap 3/4)."""
    n = REQUESTS * ROWS
    ids = np.tile(np.array([1, 2, 3, 4], np.int64), (n, 1))
    vals = np.tile(np.array([4.0, 3.0, 2.0, 1.0]), (n, 1))
    ids_b, vals_b = ids.copy(), vals.copy()
    vals_b[shift_rows] = [3.0, 4.0, 2.0, 1.0]
    ids_b[shift_rows, 3] = 9
    return PairedRows(ids, vals, ids_b, vals_b)


def test_disagreement_in_one_request_widens_kl_and_overlap_errors() -> None:
    cluster = np.repeat(np.arange(REQUESTS), ROWS)
    one = logit_stats(_pairs(np.arange(10)), cluster=cluster)  # 10 rows, all in request 0
    spread = logit_stats(_pairs(np.arange(REQUESTS) * ROWS), cluster=cluster)  # one per request
    assert one.kl_mean == pytest.approx(spread.kl_mean)
    assert one.topk_overlap == pytest.approx(spread.topk_overlap)
    assert one.requests == REQUESTS
    assert one.kl_mean_se is not None and one.kl_mean_se_rows is not None
    assert one.topk_overlap_se is not None and one.topk_overlap_se_rows is not None
    assert one.kl_mean_se > 2 * one.kl_mean_se_rows
    assert one.topk_overlap_se > 2 * one.topk_overlap_se_rows
    assert one.widened() == ["KL", "top-k overlap"]
    assert one.kl_mean_ci is not None and spread.kl_mean_ci is not None
    assert one.kl_mean_ci[1] - one.kl_mean_ci[0] > spread.kl_mean_ci[1] - spread.kl_mean_ci[0]
    note = one.clustering_note()
    assert note is not None and "moved together" in note and "10 requests" in note
    assert note in one.summary()
    # spread one row per request, the clustered error is no wider: nothing to say
    assert spread.widened() == [] and spread.clustering_note() is None
    # no requests known: the independent-rows error, as before
    plain = logit_stats(_pairs(np.arange(10)))
    assert plain.requests == 0 and plain.kl_mean_se == plain.kl_mean_se_rows
    assert plain.to_json()["se_method"] == (
        "sample standard deviation over sqrt(rows) (independent rows)")


def _trace(path: Path, shifted: list[int], extra: str = "") -> Path:
    lines = []
    for r in range(REQUESTS):
        for step in range(6):
            pos = 20 + step
            draft = [(7 * step + 3 * r + i) % 40 for i in range(3)]
            lines.append(verify_line(f"r{r}", pos, draft, [50 + step]))
            for row in range(3):
                top = [(draft[row], "4.0"), (60, "3.0"), (61, "2.0"), (62, "1.0")]
                if r in shifted:
                    top = [(draft[row], "4.0"), (60, "3.5"), (61, "2.0"), (63, "1.0")]
                lines.append(logits_line(f"r{r}", pos, row, top))
    path.write_text("\n".join(lines) + extra + "\n", encoding="utf-8")
    return path


def test_a_report_says_why_kl_in_one_request_is_less_certain(tmp_path: Path) -> None:
    a = _trace(tmp_path / "a.log", [])
    one = api.compare_traces(a, _trace(tmp_path / "one.log", [3]), atol=1.0)
    stats = one.comparison.logits.stats if one.comparison and one.comparison.logits else None
    assert stats is not None and stats.requests == REQUESTS
    assert stats.widened() == ["KL", "top-k overlap"]
    assert any("logit statistics clustered by request" in r and "moved together" in r
               for r in one.verdict.reasons)
    data = to_dict(one)
    assert isinstance(data, dict)
    text = str(data)
    assert "kl_mean_se_independent_rows" in text and "delete-one-request jackknife" in text
    # the same KL spread over every request: no widening, no sentence
    every = api.compare_traces(a, _trace(tmp_path / "all.log", list(range(REQUESTS))),
                               atol=1.0)
    assert not any("logit statistics clustered" in r for r in every.verdict.reasons)
