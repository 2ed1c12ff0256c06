"""What a command loads: comparing two small traces imports the analysis and the table, never
bisect, the arm supervisor, the HTML page or the heavy libraries (docs/performance.md holds
the start-up cost this keeps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "compare"
REPO = Path(__file__).resolve().parent.parent

# modules a compare of two traces printed as a table has no use for
NOT_FOR_A_TABLE = ("difftest.bisect", "difftest.execute.supervise", "difftest.flow.run",
                   "difftest.flow.localize", "difftest.report.html", "difftest.report.gate_report",
                   # what only sampled, rerun, --until-decided or arm runs use, and the plan
                   "difftest.analysis.distribution", "difftest.trace.sampled",
                   "difftest.analysis.sequential", "difftest.analysis.floor",
                   "difftest.execute.records", "difftest.core.machine", "difftest.flow.plan",
                   "torch", "matplotlib", "pandas", "transformers", "mlx",
                   # typer 0.29 coerces every parameter through pydantic: 0.06-0.09 s a start
                   # (docs/performance.md), so pyproject.toml keeps typer below it
                   "pydantic")

_LOADED = """
import json, sys
from difftest.cli import main
sys.argv = ["difftest", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded_by(*args: str) -> tuple[int, set[str]]:
    """The exit code of `difftest ARGS` in a fresh interpreter, and every module it imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)
    record = json.loads(done.stderr.strip().splitlines()[-1])
    return record["code"], set(record["modules"])


def top(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_a_compare_of_two_traces_loads_neither_bisect_nor_the_heavy_libraries() -> None:
    code, modules = loaded_by("compare", "--trace-a", str(DATA / "agree_a.log"),
                              "--trace-b", str(DATA / "agree_b.log"))
    assert code == 0
    assert "difftest.analysis.compare" in modules  # it did compare
    assert top(modules, NOT_FOR_A_TABLE) == []


def test_the_html_page_is_loaded_when_one_is_asked_for(tmp_path: Path) -> None:
    """The other side of the lazy import: asking for the page does load its module."""
    page = tmp_path / "page.html"
    code, modules = loaded_by("compare", "--trace-a", str(DATA / "agree_a.log"),
                              "--trace-b", str(DATA / "agree_b.log"), "--html", str(page))
    assert code == 0 and page.is_file()
    assert "difftest.report.html" in modules
    assert top(modules, ("difftest.bisect", "torch")) == []
