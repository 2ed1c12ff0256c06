"""What a runner printed stays text in every markdown difftest writes (report.md, check.md, the
GitHub step summary, JUnit messages a CI renders): checked by rendering with a real CommonMark
renderer (markdown-it-py, GitHub's tables, strikethrough and autolinks on) and finding no link,
image or HTML element that came from the trace."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.analysis.audit import AuditThresholds
from difftest.config import ComparisonSpec
from difftest.execute import ArmResult
from difftest.flow.judge import CheckResult
from difftest.flow.evaluate import ComparisonReport, evaluate
from difftest.flow.evaluate import outcome as _outcome
from difftest.report import comparison, gate_report
from difftest.report.text import md_code, md_inline

markdown_it = pytest.importorskip("markdown_it")
pytest.importorskip("linkify_it")

COMPARE = Path(__file__).parents[1] / "data" / "compare"
# A request id cannot start with `[` (the trace grammar reads that as a list), so `x[a](b)`.
EVIL_IDS = ["&![x](http://e)", "<b>", "x[a](b)", "www.e.com", "a@b.co", "*em*", "~~s~~"]
EVIL_TEXT = " ".join(EVIL_IDS) + " <img src=x> https://e.example/x"
# Tags difftest itself writes into markdown; anything else came from somewhere else.
OWN_TAGS = {"code", "details", "summary"}


def _renderer() -> markdown_it.MarkdownIt:
    md = markdown_it.MarkdownIt("gfm-like", {"html": True})
    md.linkify.set({"fuzzy_link": False})  # GitHub links `www.`, `scheme://` and emails only
    return md


def _tokens(text: str) -> Iterator[object]:
    def walk(tokens: list[object]) -> Iterator[object]:
        for t in tokens:
            yield t
            yield from walk(getattr(t, "children", None) or [])
    yield from walk(list(_renderer().parse(text)))


def assert_inert(text: str, literal: list[str]) -> None:
    """No link, image or foreign HTML element in `text`; each of `literal` shown as itself."""
    for t in _tokens(text):
        kind = getattr(t, "type", "")
        assert kind not in ("link_open", "image"), (
            kind, getattr(t, "attrs", None), text)
        if kind in ("html_inline", "html_block"):
            tags = set(re.findall(r"</?\s*([A-Za-z][\w-]*)", getattr(t, "content", "")))
            assert tags <= OWN_TAGS, (tags, text)
    rendered = _renderer().render(text)
    plain = re.sub(r"<[^>]+>", "", rendered).replace("&lt;", "<").replace("&gt;", ">") \
        .replace("&quot;", '"').replace("&amp;", "&")
    for piece in literal:
        assert piece in plain, (piece, plain)


def _hostile(tmp: Path, evil: str) -> tuple[Path, Path]:
    a, b = tmp / f"a{len(evil)}.log", tmp / f"b{len(evil)}.log"
    a.write_text((COMPARE / "agree_a.log").read_text().replace("req=a ", f"req={evil} "))
    b.write_text((COMPARE / "shift_b.log").read_text().replace("req=a ", f"req={evil} "))
    return a, b


def _report(tmp: Path, evil: str, name: str) -> ComparisonReport:
    th = AuditThresholds()
    a, b = _hostile(tmp, evil)
    spec = ComparisonSpec(name=name, arm_a="<i>", arm_b="b")
    return evaluate(spec, _outcome("<i>", a, None, th), _outcome("b", b, None, th), th)


def _crashed(tmp: Path) -> ComparisonReport:
    th = AuditThresholds()
    err = tmp / "crash.stderr"
    err.write_text(f"loading\nvt: {EVIL_TEXT}\n")
    out = tmp / "crash.stdout"
    out.write_text("")
    res = ArmResult(name="crash", argv=["r"], cwd=".", env_overrides={}, stdout_path=out,
                    stderr_path=err, returncode=3, timed_out=False, interrupted=False,
                    started_at="2026-12-03T00:00:00Z", ended_at="2026-12-03T00:00:01Z",
                    duration_s=1.0, git_ref=None, git_sha=None, error=None)
    spec = ComparisonSpec(name="crashing", arm_a="base", arm_b="crash")
    return evaluate(spec, _outcome("base", COMPARE / "agree_a.log", None, th),
                    _outcome("crash", err, res, th), th)


@pytest.mark.parametrize("evil", EVIL_IDS)
def test_report_md_shows_hostile_request_ids_as_text(tmp_path: Path, evil: str) -> None:
    rep = _report(tmp_path, evil, "x")
    assert rep.verdict.kind == "differ"
    text = comparison.render_markdown(rep)
    assert_inert(text, [evil, "<i>"])


def test_report_md_shows_a_hostile_engine_error_as_text(tmp_path: Path) -> None:
    rep = _crashed(tmp_path)
    assert rep.verdict.kind == "arm-failed"
    assert_inert(comparison.render_markdown(rep), ["vt: &![x](http://e) <b> x[a](b)"])


def test_check_md_step_summary_and_junit_messages_are_inert(tmp_path: Path) -> None:
    reports = [_report(tmp_path, evil, f"c{i}") for i, evil in enumerate(EVIL_IDS)]
    reports.append(_crashed(tmp_path))
    result = CheckResult(Path("difftest.toml"), None, tuple(reports), {})
    assert_inert(gate_report.check_markdown(result), ["<i>"])  # also the step summary's text
    root = ET.fromstring(gate_report.junit_xml(result, hostname="h"))
    messages = [el.get("message", "") for el in root.iter() if el.tag in ("failure", "error")]
    assert len(messages) == len(reports)
    for message in messages:
        assert_inert(message, [])
    assert_inert(messages[0], ["&![x](http://e)", "<i>"])


@pytest.mark.parametrize("evil", [*EVIL_IDS, EVIL_TEXT, "x|y`z\\", "mailto:a@b.c"])
def test_inline_and_code_escapes_render_as_the_text(evil: str) -> None:
    assert_inert(md_inline(evil), [evil])
    table = f"| code | inline |\n|---|---|\n| {md_code(evil)} | {md_inline(evil)} |\n"
    assert_inert(table, [])
    cells = re.findall(r"<td>(.*?)</td>", _renderer().render(table))
    shown = [re.sub(r"<[^>]+>", "", c).replace("&lt;", "<").replace("&gt;", ">")
             .replace("&quot;", '"').replace("&amp;", "&") for c in cells]
    assert shown == [evil, evil], shown


def test_github_autolink_triggers_are_broken() -> None:
    """GitHub links `www.` text with no scheme (this renderer only with fuzzy links on): the
    escape puts a backslash before the dot, which renders as nothing."""
    assert md_inline("see www.e.com") == "see www\\.e.com"
    assert md_inline("http://e.x/y a@b") == "http\\://e.x/y a\\@b"


def test_the_checker_itself_sees_links_images_and_html() -> None:
    """The check above can fail: raw text from a trace does make links, images and HTML."""
    for raw in ("![x](http://e)", "[a](b)", "<b>x</b>", "a@b.co", "http://e.example/x"):
        with pytest.raises(AssertionError):
            assert_inert(raw, [])


MD_PIECES = ["http://", "https://", "www.", "e.com", "@", "mailto:", "<b>", "</b>", "<img ",
             "[", "](", ")", "![", "*", "_", "`", "~~", "&", "&amp;", "|", "\\", "a", " ", "\n",
             "x=", "#", "-", "1."]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(MD_PIECES), max_size=12).map("".join))
def test_fuzz_no_markup_survives_the_escapes(text: str) -> None:
    shown = " ".join(text.split())
    # as every output uses it: inside a sentence or a table cell, never a line of its own
    assert_inert(f"req {md_inline(text)} pos 3", [f"req {shown} pos 3"] if shown else [])
    table = f"| c | i |\n|---|---|\n| {md_code(text)} | {md_inline(text)} |\n"
    assert_inert(table, [])


def test_hostile_spec_config_values_in_an_inert_verdict_stay_text(tmp_path: Path) -> None:
    from difftest import api

    evil = "&![x](http://e)<b>"
    for name in ("a.log", "b.log"):
        # one line of program output apart: two byte-identical files are one capture (refused)
        (tmp_path / name).write_text(f"[spec-config] lane={evil}\nrun {name}\n"
                                     + (COMPARE / "agree_a.log").read_text())
    (tmp_path / "difftest.toml").write_text(
        '[arms.a]\ncommand = ["x"]\n[arms.b]\ncommand = ["x"]\n'
        '[comparisons.x]\narm_a = "a"\narm_b = "b"\ntoggle = ["lane"]\n')
    rep = api.compare_traces(tmp_path / "a.log", tmp_path / "b.log", comparison="x",
                             config=tmp_path / "difftest.toml")
    assert rep.verdict.kind == "inert"
    assert_inert(comparison.render_markdown(rep), [f"lane={evil}"])
    result = CheckResult(Path("difftest.toml"), None, (rep,), {})
    assert_inert(gate_report.check_markdown(result), [])
    root = ET.fromstring(gate_report.junit_xml(result, hostname="h"))
    for el in root.iter():
        if el.tag in ("failure", "error"):
            assert_inert(el.get("message", ""), [])
