"""Record the reference-runner traces that tests/flow/test_gate.py replays (tests/data/gate/).

The gate tests judge these captures through replay arms, so they run in a second instead of
starting torch a dozen times; a few tests keep real reference-runner arms end to end. Run this
again when the reference runner's output changes.
Usage: python scripts/capture_gate_traces.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from difftest.config import load_config, parse_config
from planned import run_check

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "gate"
CONFIGS = REPO / "difftest" / "configs"

# level 1 arms of the failing-gate test: a broken lane, and degenerate drafts
LEVEL1 = """
[arms.paged]
command = ["{python}", "-m", "difftest.runners.reference", "--lane", "paged", "--requests", "2"]
env = { VT_SPEC_TRACE = "1" }
[arms.broken]
command = ["{python}", "-m", "difftest.runners.reference", "--lane", "materialized", "--requests", "2",
           "--mutation", "skip-kv-write"]
env = { VT_SPEC_TRACE = "1" }
[arms.deg-paged]
command = ["{python}", "-m", "difftest.runners.reference", "--fixture", "degenerate", "--requests", "2"]
env = { VT_SPEC_TRACE = "1" }
[arms.deg-materialized]
command = ["{python}", "-m", "difftest.runners.reference", "--fixture", "degenerate", "--requests", "2",
           "--lane", "materialized"]
env = { VT_SPEC_TRACE = "1" }
[comparisons.bad]
arm_a = "paged"
arm_b = "broken"
[comparisons.blind]
arm_a = "deg-paged"
arm_b = "deg-materialized"
"""


def capture(config_text: str | None, config_path: Path, prefix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = (parse_config(config_text, Path(tmp) / config_path.name) if config_text
               else load_config(config_path))
        result = run_check(cfg, run_root=Path(tmp), progress=False)
        assert result.run_dir is not None
        for trace in sorted(result.run_dir.glob("*.stderr")):
            if trace.stem.startswith("scalars") and prefix != "default-":
                continue  # the tests replay scalars on/off of the default config only
            target = OUT / f"{prefix}{trace.stem}.log"
            shutil.copyfile(trace, target)
            print(target.relative_to(REPO))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    capture(None, CONFIGS / "default.toml", "default-")
    capture(None, CONFIGS / "degenerate.toml", "degenerate-")
    degenerate3 = (CONFIGS / "degenerate.toml").read_text().replace('VT_SPEC_TRACE = "1"',
                                                                    'VT_SPEC_TRACE = "3"')
    capture(degenerate3, CONFIGS / "degenerate3.toml", "degenerate3-")
    capture(LEVEL1, REPO / "level1.toml", "level1-")


if __name__ == "__main__":
    main()
