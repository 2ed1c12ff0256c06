"""The switch engaged: the `[spec-config]` line, toggles and evidence, the INERT verdict, and
the same-quantity checks that come before any judging."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from conftest import logits_line, verify_line

from difftest import api
from difftest.config import parse_config
from difftest.emit import Tracer, spec_config
from difftest.core.errors import ConfigError, ExitCode, TraceError
from difftest.core.evidence import RuleError, parse_rule
from difftest.core.kinds import VerdictKind
from difftest.flow.switch import Side, check_switch, effective, lane_of
from difftest.trace import parse_text
from difftest.trace import parser as trace_parser

DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "default.toml"


def steps(seed: int = 0, reqs: tuple[str, ...] = ("r0", "r1"), n: int = 12, k: int = 4,
          logits_width: int = 0) -> list[str]:
    """Varied drafted blocks (informative), one accepted draft per step; with `logits_width`,
    a `[spec-logits]` line per row."""
    rng = random.Random(seed)
    out: list[str] = []
    for req in reqs:
        pos = 10
        for _ in range(n):
            draft = [rng.randrange(1000) for _ in range(k)]
            emit = [draft[0], rng.randrange(1000)]
            out.append(f"[spec-propose] rows=1 nqpr={k + 1} drafts/row={k} "
                       f"first=[{' '.join(map(str, draft))} ]")
            for row in range(1, k + 1 if logits_width else 1):
                top = [(draft[row - 1], f"{9 - row * 0.25:.4f}")] + [
                    (2000 + j, f"{8 - row * 0.25 - j:.4f}") for j in range(logits_width - 1)]
                out.append(logits_line(req, pos, row, top))
            out.append(verify_line(req, pos, draft, emit))
            pos += 2
    return out


def trace_file(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


ROUTE_PAGED = "[dflash-route] paged_seam=24 block_kernel=0 combined=0"
ROUTE_MATERIALIZED = "[dflash-route] paged_seam=0 block_kernel=0 combined=24"


def lanes_config(tmp_path: Path, toggle: str = 'toggle = ["lane"]', evidence: bool = False,
                 expect: str = "same") -> Path:
    ev_a = 'evidence = ["lane = paged"]\n' if evidence else ""
    ev_b = 'evidence = ["lane = materialized", "combined > 0"]\n' if evidence else ""
    path = tmp_path / "difftest.toml"
    path.write_text(f'[arms.paged]\ncommand = ["true"]\n{ev_a}'
                    f'[arms.materialized]\ncommand = ["true"]\n{ev_b}'
                    f'[comparisons.lanes]\narm_a = "paged"\narm_b = "materialized"\n'
                    f'expect = "{expect}"\n{toggle}\n')
    return path


# -- the trace line -------------------------------------------------------------------------

def test_spec_config_line_is_read_by_both_readers(each_reader: str) -> None:
    t = parse_text("[spec-config] lane=paged attention=single dtype_target=float32\n"
                   + "\n".join(steps(n=2)) + "\n[spec-config] lane=paged threads=1\n")
    assert dict(t.config.values) == {"lane": "paged", "attention": "single",
                                     "dtype_target": "float32", "threads": "1"}
    assert t.config.lines["lane"] == 1 and t.config.lines["threads"] > 1
    assert len(t.verifies) == 4  # the other lines are read as before


@pytest.mark.parametrize(("text", "needle"), [
    ("[spec-config]", "expected settings"),
    ("[spec-config] lane=paged lane=paged", "given twice"),
    ("[spec-config] lane", "unexpected text"),
    ("[spec-config] lane=[paged materialized]", "one printable word"),
])
def test_a_bad_spec_config_line_names_file_and_line(each_reader: str, text: str,
                                                    needle: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_text(steps(n=1)[0] + "\n" + text + "\n", path="arm.log")
    assert info.value.line == 2 and needle in str(info.value), str(info.value)


def test_contradicting_spec_config_lines_are_an_error(each_reader: str) -> None:
    with pytest.raises(TraceError, match=r"lane=materialized contradicts lane=paged at line 1"):
        parse_text("[spec-config] lane=paged\n[spec-config] lane=materialized\n")


@pytest.mark.parametrize("missing", ["KNOWN_TAGS", "NOTED_TAGS"])
def test_a_scanner_built_without_the_tag_is_not_used(monkeypatch: pytest.MonkeyPatch,
                                                     missing: str) -> None:
    """A compiled scanner older than the grammar would skip `[spec-config]` lines as program
    output, or not note a `[spec-forced]` one: the parser must not use it."""
    if not trace_parser.fast_path_available():
        pytest.skip("the compiled scanner is not built")
    real = trace_parser._scan

    class Stale:
        N_COLS = real.N_COLS
        KNOWN_TAGS = tuple(t for t in real.KNOWN_TAGS
                           if missing != "KNOWN_TAGS" or t != b"[spec-config]")
        NOTED_TAGS = () if missing == "NOTED_TAGS" else real.NOTED_TAGS
        scan = real.scan

    monkeypatch.setattr(trace_parser, "_scan", Stale)
    assert not trace_parser.fast_path_available()
    t = parse_text("[spec-config] lane=paged\n[spec-forced] req=r0 pos=1 commit=[ 2 ]\n"
                   + steps(n=1)[0] + "\n", pure=False)
    assert t.config.values == {"lane": "paged"} and t.forced_lines


# -- printing it ----------------------------------------------------------------------------

def test_tracer_prints_the_config_once_before_the_first_step() -> None:
    out = io.StringIO()
    tracer = Tracer(level=1, file=out)
    tracer.config({"lane": "paged", "nondeterministic": False, "threads": 1})
    tracer.step("r0", 5, [1, 2], [1, 3])
    lines = out.getvalue().splitlines()
    assert lines[0] == "[spec-config] lane=paged nondeterministic=0 threads=1"
    assert parse_text(out.getvalue()).config.values["threads"] == "1"
    with pytest.raises(ValueError, match="once, before the first step"):
        tracer.config({"lane": "paged"})


def test_tracer_refuses_a_value_the_line_cannot_carry() -> None:
    for bad in ({"lane": "two words"}, {"lane": "[x]"}, {"bad key": "x"}, {}):
        with pytest.raises(ValueError):
            spec_config(bad)
    quiet = io.StringIO()
    Tracer(level=0, file=quiet).config({"lane": "paged"})
    assert quiet.getvalue() == ""


def test_reference_runner_prints_what_it_applied() -> None:
    pytest.importorskip("torch")
    from difftest.runners.reference.options import RunnerOptions, lane_from_env
    from difftest.runners.reference.runner import run

    # a misspelt variable selects nothing: the runner stays on the paged lane and says so
    options = RunnerOptions(lane=lane_from_env({"VT_DFLASH_PAGE": "0"}), steps=1, requests=1,
                            attention_kernel="split")
    t = parse_text("\n".join(run(options, 1).lines) + "\n")
    assert t.config.values["lane"] == "paged"
    assert t.config.values["attention"] == "split"
    assert t.config.values["dtype_draft"] == "float32"
    assert effective("a", t).values["lane"] == "paged"  # and the route counters agree


# -- the effective configuration ------------------------------------------------------------

def test_lane_is_derived_from_the_route_counters() -> None:
    assert lane_of({"paged_seam": 30, "combined": 0}) == "paged"
    assert lane_of({"paged_seam": 0, "block_kernel": 3, "combined": 0}) == "paged"
    assert lane_of({"paged_seam": 0, "combined": 30}) == "materialized"
    assert lane_of({"paged_seam": 2, "combined": 30}) == "mixed"
    assert lane_of({"paged_seam": 0, "combined": 0}) is None
    said = parse_text("[spec-config] lane=materialized\n" + ROUTE_PAGED + "\n")
    eff = effective("arm", said)
    assert eff.values["lane"] == "paged"  # the counters are what ran
    assert eff.notes and "says lane=materialized" in eff.notes[0]


# -- toggles and evidence -------------------------------------------------------------------

def _side(name: str, lines: list[str], **kw: object) -> Side:
    return Side(name, parse_text("".join(x + "\n" for x in lines)), **kw)  # type: ignore[arg-type]


def test_same_toggle_value_is_inert_naming_key_values_and_arms() -> None:
    a = _side("paged", ["[spec-config] lane=paged"])
    b = _side("materialized", ["[spec-config] lane=paged"])
    got = check_switch(["lane"], a, b)
    assert got.kind is VerdictKind.INERT
    assert "toggle 'lane'" in got.reasons[0] and "lane=paged" in got.reasons[0]
    assert "paged" in got.reasons[0] and "materialized" in got.reasons[0]


def test_different_toggle_values_engage() -> None:
    got = check_switch(["lane"], _side("a", [ROUTE_PAGED]), _side("b", [ROUTE_MATERIALIZED]))
    assert got.kind is None
    assert any("engaged: lane paged (a) -> materialized (b)" in r for r in got.reasons)


def test_toggle_reported_by_one_arm_only_is_inert() -> None:
    got = check_switch(["lane"], _side("a", [ROUTE_PAGED]), _side("b", ["other output"]))
    assert got.kind is VerdictKind.INERT and "b reports no lane" in got.reasons[0]


def test_toggle_reported_by_neither_arm_is_uninformative() -> None:
    got = check_switch(["lane"], _side("a", ["x"]), _side("b", ["y"]))
    assert got.kind is VerdictKind.UNINFORMATIVE
    assert "cannot show that the switch engaged" in got.reasons[0]


def test_evidence_missing_or_contradicted_is_inert_naming_the_arm(tmp_path: Path) -> None:
    rules = (parse_rule("lane = materialized"), parse_rule("combined > 0"),
             parse_rule("attention = split"))
    b = _side("materialized", [ROUTE_PAGED], evidence=rules)
    got = check_switch([], _side("paged", [ROUTE_PAGED]), b)
    assert got.kind is VerdictKind.INERT
    assert got.reasons[0].startswith("materialized: evidence `lane = materialized` is "
                                     "contradicted: it reports lane=paged")
    assert "`combined > 0` is contradicted: it reports combined=0" in got.reasons[1]
    assert "`attention = split` is missing" in got.reasons[2]
    ok = _side("materialized", [ROUTE_MATERIALIZED], evidence=rules[:2])
    assert check_switch([], _side("paged", [ROUTE_PAGED]), ok).kind is None


def test_a_line_pattern_is_evidence(tmp_path: Path) -> None:
    path = trace_file(tmp_path, "b.log", ["vt: backend cuda-graph on", *steps(n=1)])
    rule = parse_rule(r"line ~ backend \S+-graph on")
    trace = trace_parser.parse_trace(path)
    good = Side("b", trace, path, evidence=(rule,))
    assert check_switch([], _side("a", ["x"]), good).kind is None
    bad = Side("b", trace, path, evidence=(parse_rule("line ~ fell back"),))
    got = check_switch([], _side("a", ["x"]), bad)
    assert got.kind is VerdictKind.INERT and "no line of its output matches" in got.reasons[0]


@pytest.mark.parametrize("text", ["lane", "lane == paged x", "combined > many", "line ~ (",
                                  "lane ~ paged", "lane ="])
def test_a_bad_rule_is_refused(text: str) -> None:
    with pytest.raises(RuleError):
        parse_rule(text)


@pytest.mark.parametrize(("table", "needle"), [
    ('[arms.a]\ncommand = ["true"]\nevidence = ["combined >> 0"]\n',
     "[arms.a]: key 'evidence': item 0:"),
    ('[arms.a]\ncommand = ["true"]\nevidence = "lane = paged"\n',
     "[arms.a]: key 'evidence': must be a list of strings"),
    ('[arms.a]\ncommand = ["true"]\n[comparisons.c]\narm_a = "a"\narm_b = "a"\ntoggle = "lane"\n',
     "[comparisons.c]: key 'toggle': must be a list"),
    ('[arms.a]\ncommand = ["true"]\n[comparisons.c]\narm_a = "a"\narm_b = "a"\n'
     'toggle = ["lane", "lane"]\n', "[comparisons.c]: key 'toggle': item 1: 'lane' is named twice"),
])
def test_bad_toggle_or_evidence_names_file_table_and_key(table: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(table, Path("cfg.toml"))
    assert str(info.value).startswith("cfg.toml: ") and needle in str(info.value), str(info.value)


# -- through compare, in trace mode -----------------------------------------------------------

OTHER_RUN = "[spec-config] build=second"  # B is a capture of another build

# what a paged arm counts of the page states `lane` is about (docs/trace-format.md)
PAGES_COVERED = "[spec-coverage] blocks=24 page_size=16 page_cross=3 page_end=1 page_order=2"


def test_vllm_cpp_style_traces_on_one_lane_are_inert(tmp_path: Path) -> None:
    """Traces that carry only `[dflash-route]` (no `[spec-config]`): both ran the paged lane."""
    cfg = lanes_config(tmp_path, evidence=True)
    a = trace_file(tmp_path, "a.log", [*steps(), ROUTE_PAGED])
    # a second capture (one line of other output): a byte-identical copy would be refused
    b = trace_file(tmp_path, "b.log", [*steps(), ROUTE_PAGED, OTHER_RUN])
    rep = api.compare_traces(a, b, comparison="lanes", config=cfg)
    assert rep.verdict.kind is VerdictKind.INERT and rep.exit_code == ExitCode.UNINFORMATIVE
    assert rep.verdict.label == "INERT"
    first = rep.verdict.reasons[0]
    assert "lane" in first and "paged" in first and "materialized" in first
    # with the lanes really switched, a toggle about page state needs the state counted: an
    # engine that prints no [spec-coverage] line cannot show its inputs reached it
    b2 = trace_file(tmp_path, "b2.log", [*steps(), ROUTE_MATERIALIZED])
    unknown = api.compare_traces(a, b2, comparison="lanes", config=cfg)
    assert unknown.verdict.kind is VerdictKind.UNINFORMATIVE
    assert any(r.startswith("coverage unknown: toggle 'lane'") for r in unknown.verdict.reasons)
    # counted and reached, it is judged as it was without a toggle
    a = trace_file(tmp_path, "a2.log", [*steps(), ROUTE_PAGED, PAGES_COVERED])
    judged = api.compare_traces(a, b2, comparison="lanes", config=cfg)
    plain = api.compare_traces(a, b2, config=lanes_config(tmp_path, toggle=""),
                               comparison="lanes")
    assert judged.verdict.kind is plain.verdict.kind is VerdictKind.AGREE
    assert judged.exit_code == ExitCode.OK


def test_identical_spec_config_lines_under_a_toggle_are_inert(tmp_path: Path) -> None:
    cfg = lanes_config(tmp_path)
    head = "[spec-config] lane=paged attention=single"
    a = trace_file(tmp_path, "a.log", [head, *steps()])
    b = trace_file(tmp_path, "b.log", [head, *steps(), OTHER_RUN])
    assert api.compare_traces(a, b, comparison="lanes", config=cfg).verdict.kind is \
        VerdictKind.INERT
    c = trace_file(tmp_path, "c.log", ["[spec-config] lane=materialized attention=single",
                                       *steps()])
    a = trace_file(tmp_path, "a2.log", [head, *steps(), PAGES_COVERED])
    rep = api.compare_traces(a, c, comparison="lanes", config=cfg)
    assert rep.verdict.kind is VerdictKind.AGREE and rep.exit_code == ExitCode.OK


def test_a_declared_toggle_without_any_evidence_does_not_pass(tmp_path: Path) -> None:
    cfg = lanes_config(tmp_path, expect="differ")
    a = trace_file(tmp_path, "a.log", steps(seed=1))
    b = trace_file(tmp_path, "b.log", steps(seed=2))
    rep = api.compare_traces(a, b, comparison="lanes", config=cfg)
    assert rep.verdict.kind is VerdictKind.UNINFORMATIVE and not rep.verdict.passed
    assert "cannot show that the switch engaged" in rep.verdict.reasons[0]


# -- same quantity on both sides --------------------------------------------------------------

@pytest.mark.parametrize(("b_lines", "needle"), [
    (steps(reqs=("r0",)), "not the same request set: 1 only in a.log (r1)"),
    (steps(logits_width=3), "not the same trace level: a.log traced level 1, b.log level 3"),
    (steps(k=3), "not the same rows per block"),
    (["[spec-drafting] kind=block", *steps()], "not the same drafting declaration"),
])
def test_a_quantity_mismatch_is_named_and_never_agrees(tmp_path: Path, b_lines: list[str],
                                                       needle: str) -> None:
    a = trace_file(tmp_path, "a.log", steps())
    b = trace_file(tmp_path, "b.log", b_lines)
    rep = api.compare_traces(a, b, config=DEFAULT)
    assert any(needle in r for r in rep.verdict.reasons), rep.verdict.reasons
    assert rep.verdict.kind is not VerdictKind.AGREE
    assert not rep.verdict.passed


def test_a_different_top_k_width_is_named(tmp_path: Path) -> None:
    a = trace_file(tmp_path, "a.log", steps(logits_width=4))
    b = trace_file(tmp_path, "b.log", steps(logits_width=3))
    rep = api.compare_traces(a, b, config=DEFAULT)
    assert any("not the same top-k width: a.log lists 4 logits per row, b.log 3" in r
               for r in rep.verdict.reasons), rep.verdict.reasons
    assert rep.verdict.kind is not VerdictKind.AGREE


def test_disjoint_id_ranges_are_named(tmp_path: Path) -> None:
    a = trace_file(tmp_path, "a.log", steps())
    shifted = [line.replace("=[", "=[9000").replace("[ ", "[ 9") for line in steps()]
    b_lines = [verify_line("r0", 10, [90001, 90002], [90001, 90003])]
    b = trace_file(tmp_path, "b.log", b_lines)
    assert shifted  # the request set differs too; the id range is named on its own
    rep = api.compare_traces(a, b, config=DEFAULT)
    assert any("not the same id range" in r for r in rep.verdict.reasons), rep.verdict.reasons


def test_the_same_quantity_agrees_as_before(tmp_path: Path) -> None:
    a = trace_file(tmp_path, "a.log", steps())
    b = trace_file(tmp_path, "b.log", [*steps(), OTHER_RUN])
    rep = api.compare_traces(a, b, config=DEFAULT)
    assert rep.verdict.kind is VerdictKind.AGREE
    assert not any(r.startswith("not the same") for r in rep.verdict.reasons)


def test_inert_replaces_a_difference_between_arms_on_one_lane(tmp_path: Path) -> None:
    """Drafts that differ between two runs of the paged lane say nothing about the lanes."""
    cfg = lanes_config(tmp_path)
    a = trace_file(tmp_path, "a.log", [*steps(seed=1), ROUTE_PAGED])
    b = trace_file(tmp_path, "b.log", [*steps(seed=2), ROUTE_PAGED])
    rep = api.compare_traces(a, b, comparison="lanes", config=cfg)
    assert rep.comparison is not None and rep.comparison.blocks_differing > 0
    assert rep.verdict.kind is VerdictKind.INERT and rep.exit_code == ExitCode.UNINFORMATIVE
    assert rep.verdict.reasons[-1].startswith("verdict inert, not differ")


def test_the_transformers_runner_prints_what_transformers_resolved() -> None:
    pytest.importorskip("transformers")
    from difftest.runners.hf.options import HFOptions
    from difftest.runners.hf.runner import run

    buf = io.StringIO()
    run(HFOptions(attn="eager", assistant_dtype="bfloat16", requests=1, max_new_tokens=4),
        Tracer(level=1, file=buf))
    t = parse_text(buf.getvalue())
    assert buf.getvalue().startswith("[spec-config] ")
    assert {k: t.config.values[k] for k in ("attention_target", "attention_draft",
                                           "dtype_target", "dtype_draft", "drafter")} == {
        "attention_target": "eager", "attention_draft": "eager", "dtype_target": "float32",
        "dtype_draft": "bfloat16", "drafter": "assisted"}


def test_reports_carry_what_the_runner_said_it_applied(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    a = trace_file(tmp_path, "a.log", ["[spec-config] lane=paged threads=1", *steps()])
    b = trace_file(tmp_path, "b.log", steps())
    rep = api.compare_traces(a, b, config=DEFAULT)
    from difftest.report.comparison import to_dict

    arms = to_dict(rep)["arms"]
    assert arms[0]["spec_config"] == {"lane": "paged", "threads": "1"}  # type: ignore[index]
    assert "spec_config" not in arms[1]  # type: ignore[index]
    out = subprocess.run([sys.executable, "-m", "difftest", "parse", "-f", "json", str(a)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["summary"]["config"] == {"lane": "paged", "threads": "1"}
