"""A bitwise thresholds file on another machine: judged with the engine's dtype floor (a
harmless float reordering passes, a real difference still fails), or refused with the command
to recalibrate when no arm states a dtype; on its own machine it stays bitwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import logits_line, verify_line
from difftest.config import ComparisonSpec
from difftest.core.errors import UsageError
from difftest.core.kinds import VerdictKind
from difftest.core.machine import this_machine
from difftest.core.rules import Rules
from difftest.core.thresholds import Calibrated, Dtype
from difftest.flow.evaluate import judge_traces


def _write(path: Path, bump: float) -> Path:
    lines = []
    for r in range(4):
        for pos in range(6):
            rows = [[(100 + 7 * j + pos, 5.0 + 0.5 * j + r + bump), (300 + j, 2.0 + 0.1 * pos),
                     (400 + j, 1.0)] for j in range(3)]
            lines.append(verify_line(f"r{r}", pos, [row[0][0] for row in rows], [7]))
            lines += [logits_line(f"r{r}", pos, j, [(i, f"{v:.7f}") for i, v in row])
                      for j, row in enumerate(rows, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spec(machine: dict[str, str], dtypes: tuple[Dtype | None, Dtype | None]) -> ComparisonSpec:
    cal = Calibrated("t.toml", machine=tuple(machine.items()), bitwise=True)
    return ComparisonSpec("threads", "a", "b", Rules(atol=0.0, rtol=0.0, near_tie=0.0),
                          arm_dtypes=dtypes, thresholds="t.toml",
                          threshold_origin="t.toml (calibrated: ...)", calibrated=cal)


F32 = (Dtype.FLOAT32, Dtype.FLOAT32)


def test_a_bitwise_file_on_another_machine_is_judged_with_the_dtype_floor(tmp_path: Path) -> None:
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)
    other = {**this_machine(), "numpy_simd": "SSE2"}
    rep = judge_traces(a, b, _spec(other, F32))
    assert rep.verdict.kind is VerdictKind.AGREE, rep.verdict.reasons
    said = [r for r in rep.verdict.reasons if r.startswith("bitwise on another machine")]
    assert len(said) == 1 and "calibrated on another machine (numpy_simd (adds" in said[0]
    assert "judged with the engine's dtype floor instead (atol 1e-05, rtol 1.3e-06" in said[0]
    assert "`difftest calibrate -c threads`" in said[0]
    assert rep.rules.atol == 1e-5 and rep.rules.near_tie is None
    # a real difference still fails under the floor
    wrong = judge_traces(a, _write(tmp_path / "w.log", 0.01), _spec(other, F32))
    assert wrong.verdict.kind is VerdictKind.DIFFER


def test_on_its_own_machine_a_bitwise_file_stays_bitwise(tmp_path: Path) -> None:
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)
    rep = judge_traces(a, b, _spec(this_machine(), F32))
    assert rep.verdict.kind is VerdictKind.DIFFER
    assert not any("another machine" in r for r in rep.verdict.reasons)


def test_a_file_without_its_machine_is_not_trusted_bitwise(tmp_path: Path) -> None:
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)
    rep = judge_traces(a, b, _spec({}, F32))
    assert rep.verdict.kind is VerdictKind.AGREE
    assert any("its file does not record the machine it was calibrated on" in r
               for r in rep.verdict.reasons)


def test_without_a_dtype_the_floor_cannot_be_had_and_the_command_is_named(
        tmp_path: Path) -> None:
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)
    other = {**this_machine(), "torch": "0.0"}
    with pytest.raises(UsageError, match="recalibrate here with `difftest calibrate -c threads` "
                                         r"\(or set dtype on the arms\)"):
        judge_traces(a, b, _spec(other, (None, None)))


def test_a_file_with_tolerances_is_kept_elsewhere_with_a_word(tmp_path: Path) -> None:
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)

    def spec(machine: dict[str, str]) -> ComparisonSpec:
        cal = Calibrated("t.toml", machine=tuple(machine.items()), bitwise=False)
        return ComparisonSpec("attn", "a", "b", Rules(atol=1e-4, rtol=0.0, near_tie=2e-4),
                              thresholds="t.toml", threshold_origin="t.toml (calibrated: ...)",
                              calibrated=cal)

    rep = judge_traces(a, b, spec({**this_machine(), "blas": "other"}))
    assert rep.verdict.kind is VerdictKind.AGREE and rep.rules.atol == 1e-4
    assert any("calibrated on another machine (blas (file: other" in r
               and "they may not hold here" in r for r in rep.verdict.reasons)
    quiet = judge_traces(a, b, spec({}))
    assert not any("machine" in r for r in quiet.verdict.reasons)


def test_a_run_record_keeps_what_the_file_said() -> None:
    spec = _spec({"cpu": "X"}, F32)
    back = ComparisonSpec.of(spec.echo())
    assert back == spec and back.calibrated is not None and back.calibrated.bitwise
    assert "calibrated" not in ComparisonSpec("c", "a", "b").echo()


@pytest.mark.parametrize(("pinned", "expected"), [(True, VerdictKind.DIFFER),
                                                  (False, VerdictKind.AGREE)])
def test_a_variable_every_arm_sets_itself_does_not_make_another_machine(
        tmp_path: Path, pinned: bool, expected: VerdictKind) -> None:
    # the file was calibrated from a shell that exported OMP_NUM_THREADS=7; here it is not.
    # Arms that each set OMP_NUM_THREADS ran alike in both shells: the bitwise gate holds and
    # a real difference fails. Arms that inherit it did run otherwise: the dtype floor judges.
    from difftest import api
    from difftest.core.machine import _ENV_VARS
    import os
    a, b = _write(tmp_path / "a.log", 0.0), _write(tmp_path / "b.log", 2e-6)
    env = ", ".join(f"{v}={'7' if v == 'OMP_NUM_THREADS' else os.environ[v]}"
                    for v in _ENV_VARS if v in os.environ or v == "OMP_NUM_THREADS")
    machine = {**this_machine(), "env": env}
    (tmp_path / "t.toml").write_text(
        "[thresholds]\natol = 0.0\nrtol = 0.0\nnear_tie = 0.0\n[provenance]\ncomparison = "
        '"c"\ninputs = [1]\nseparation = 5.0\nlargest_benign = 0.0\n[machine]\n'
        + "".join(f'{k} = "{v}"\n' for k, v in machine.items()))
    own = 'env = { OMP_NUM_THREADS = "1" }\n' if pinned else ""
    (tmp_path / "d.toml").write_text(
        "".join(f'[arms.{n}]\ncommand = ["sh", "-c", "cat {p} >&2"]\n{own}dtype = "float32"\n'
                for n, p in (("a", a), ("b", b)))
        + '[comparisons.c]\narm_a = "a"\narm_b = "b"\ngate_input = 0\nthresholds = "t.toml"\n')
    report = api.compare(comparison="c", config=tmp_path / "d.toml",
                         options=api.RunOptions(run_root=tmp_path / "runs", progress=False))
    assert report.verdict.kind is expected, report.verdict.reasons
    floor = any(r.startswith("bitwise on another machine") for r in report.verdict.reasons)
    assert floor is not pinned
