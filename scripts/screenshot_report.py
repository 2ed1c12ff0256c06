"""Regenerate docs/report.png: the report.html of the README's main job, as headless Chromium
draws it.

Usage: python scripts/screenshot_report.py [--out docs/report.png] [--height 2400]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "report.png")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=2400)
    args = ap.parse_args()
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    if browser is None:
        sys.exit("headless Chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        subprocess.run([sys.executable, "-m", "difftest", "compare", "--arm-a", "paged",
                        "--arm-b", "materialized", "--run-root", str(root), "--no-progress"],
                       cwd=REPO, check=True)
        (run_dir,) = root.iterdir()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={tmp}/profile",
                        f"--window-size={args.width},{args.height}",
                        f"--screenshot={args.out.resolve()}", (run_dir / "report.html").as_uri()],
                       check=True, capture_output=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
