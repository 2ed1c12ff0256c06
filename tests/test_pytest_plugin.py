"""`pytest --difftest`: configured comparisons as test items, run by a real pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from difftest.config import load_config
from conftest import replay_arm

REPO = Path(__file__).resolve().parent.parent
COMPARE = Path(__file__).parent / "data" / "compare"
GATE = Path(__file__).parent / "data" / "gate"
MUTATIONS = ("causal-mask", "skip-kv-write", "stale-seq-lens")
REPLAY = "import sys; sys.stderr.write(open(sys.argv[1]).read())"


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A fresh pytest in `cwd` with this checkout's difftest; the plugin comes from the entry
    point where difftest is installed with it, else is named with -p."""
    installed = any(e.value == "difftest.pytest_plugin" for e in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "difftest.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin,
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def test_the_entry_point_is_declared() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["pytest11"] == {"difftest": "difftest.pytest_plugin"}


def test_inert_without_the_flag(tmp_path: Path) -> None:
    done = pytest_in(tmp_path, "-q")
    assert done.returncode == 5, done.stdout + done.stderr  # no tests collected
    assert "difftest" not in done.stdout.split("no tests ran")[0].lower()
    helped = pytest_in(tmp_path, "--help")
    assert "--difftest-config=FILE" in helped.stdout


def test_without_a_config_the_packaged_default_is_collected_item_by_item(
        tmp_path: Path) -> None:
    """Nothing in the folder: every comparison of the packaged config is an item, and a probe
    item each where it has mutations (collected only: `test_gate` runs that config's check)."""
    done = pytest_in(tmp_path, "--difftest", "--collect-only", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = load_config(None)
    assert shipped.path.parent.name == "configs"  # the packaged one, not a file found here
    expected = [n for name, spec in shipped.comparisons.items()
                for n in (name, f"{name}/probe")[:2 if spec.rules.mutations else 1]]
    assert [line.rsplit("::", 1)[1] for line in done.stdout.splitlines()
            if "::" in line] == expected
    assert {"lanes", "lanes/probe", "scalars"} <= set(expected)


def test_captured_comparisons_and_their_probes_pass_item_by_item(tmp_path: Path) -> None:
    """The shipped lanes and scalars comparisons over replays of the reference runner's
    captures (tests/data/gate): each comparison and each probe is an item that passes."""
    cfg = tmp_path / "difftest.toml"
    cfg.write_text("".join(replay_arm(a, GATE / f"default-{a}.log") for a in (
        "paged", "materialized", "scalars-on", "scalars-off"))
        + '[comparisons.lanes]\narm_a = "paged"\narm_b = "materialized"\n'
        + f"mutations = {json.dumps(list(MUTATIONS))}\n"
        + '[comparisons.scalars]\narm_a = "scalars-on"\narm_b = "scalars-off"\n'
        + 'expect = "differ"\n'
        + "".join(f"[mutations.{m}]\nargs = "
                  f"[{json.dumps(str(GATE / f'default-materialized+{m}.log'))}]\n"
                  for m in MUTATIONS))
    done = pytest_in(tmp_path, "--difftest", "--difftest-run-root", str(tmp_path / "runs"),
                     "-v")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for item in ("::lanes PASSED", "::lanes/probe PASSED", "::scalars PASSED"):
        assert item in out, out
    assert "3 passed" in out and "failed" not in out


def test_a_differing_comparison_fails_with_its_verdict_and_reasons(tmp_path: Path) -> None:
    cfg = tmp_path / "difftest.toml"
    cfg.write_text("".join(f'[arms.{n}]\ncommand = ["{{python}}", "-c", "{REPLAY}", '
                           f'"{COMPARE / t}"]\n' for n, t in (("a", "agree_a.log"),
                                                              ("b", "shift_b.log")))
                   + '[comparisons.shifted]\narm_a = "a"\narm_b = "b"\n'
                   + '[comparisons.same]\narm_a = "a"\narm_b = "a"\n')
    done = pytest_in(tmp_path, "--difftest", "--difftest-config", str(cfg),
                     "--difftest-run-root", str(tmp_path / "runs"), "-q")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "shifted: DIFFER (expect same): FAILED, exit 1; differed: tokens in 1/7 blocks" in out
    assert "  - first difference at req a pos 9 row 3: a drafted 53, b drafted 63" in out
    assert "Traceback" not in out


def test_a_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[arms.a]\ncommand = 3\n")
    done = pytest_in(tmp_path, "--difftest", "--difftest-config", str(bad), "-q")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage-error code
    assert "difftest: error:" in done.stderr and "bad.toml" in done.stderr
