"""Each report module picks the renderer for the format a command asks for (`--format`): the
command line passes the format through and prints what comes back."""

from __future__ import annotations

import io
from types import ModuleType

import pytest

from difftest.report import (audit_report, bisect_report, comparison, events, gate_report,
                             noise_report)


def _named(monkeypatch: pytest.MonkeyPatch, module: ModuleType, *names: str) -> None:
    """Each renderer `name` of `module` replaced by one that returns its own name."""
    for name in names:
        monkeypatch.setattr(module, name, lambda *args, _name=name, **kw: _name)


@pytest.mark.parametrize("module, render, formats", [
    (comparison, comparison.render,
     {"table": "render_table", "json": "render_json", "markdown": "render_markdown"}),
    (bisect_report, bisect_report.render,
     {"table": "render_table", "json": "render_json", "markdown": "render_markdown"}),
    (noise_report, noise_report.render, {"table": "render_table", "json": "render_json"}),
    (gate_report, gate_report.render_check, {"table": "check_lines", "json": "render_check_json"}),
    (gate_report, gate_report.render_probe, {"table": "probe_table", "json": "dumps"}),
], ids=["comparison", "bisect", "noise", "check", "probe"])
def test_a_report_is_rendered_in_the_format_asked(monkeypatch: pytest.MonkeyPatch,
                                                  module: ModuleType, render: object,
                                                  formats: dict[str, str]) -> None:
    _named(monkeypatch, module, *formats.values())
    monkeypatch.setattr(gate_report, "probe_dict", lambda p: p)

    class Result:
        run_dir = None

    for fmt, name in formats.items():
        assert render(Result(), fmt) == name, fmt  # type: ignore[operator]


def test_an_audit_and_a_parsed_trace_in_the_format_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    _named(monkeypatch, audit_report, "render_table", "render_json")
    assert audit_report.render(None, None, "json") == "render_json"  # type: ignore[arg-type]
    assert audit_report.render(None, None, "table") == "render_table"  # type: ignore[arg-type]
    for fmt, name in {"table": "write_table", "json": "write_json", "csv": "write_csv"}.items():
        monkeypatch.setattr(events, name, lambda trace, out, *a, _n=name: out.write(_n))
        out = io.StringIO()
        events.write(None, out, fmt)  # type: ignore[arg-type]
        assert out.getvalue() == name
