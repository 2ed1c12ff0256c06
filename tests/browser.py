"""Headless Chromium for the HTML report tests: find it, load a page, read back what it saw.

The report itself carries no script. To see what the browser saw, a copy of the page gets one
probe script ahead of the report's Content-Security-Policy (so the policy still governs every
request the report makes); the probe records failed loads and policy violations, measures each
image once the page has loaded, and writes that as JSON into the DOM, which `--dump-dom` prints.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_PROBE = """<script>
(function () {
  var out = {errors: [], violations: []};
  addEventListener('error', function (e) {
    var t = e.target || {};
    out.errors.push(String(t.src || t.href || e.message || 'error'));
  }, true);
  document.addEventListener('securitypolicyviolation', function (e) {
    out.violations.push(e.violatedDirective + ' ' + e.blockedURI);
  });
  addEventListener('load', function () {
    out.images = Array.prototype.map.call(document.images, function (i) {
      var r = i.getBoundingClientRect();
      return {alt: i.alt, complete: i.complete, naturalWidth: i.naturalWidth,
              naturalHeight: i.naturalHeight, width: r.width, height: r.height};
    });
    out.resources = performance.getEntriesByType('resource').map(function (r) {
      return r.name.slice(0, 60);
    });
    out.scripts = document.scripts.length - 1;
    var pre = document.createElement('pre');
    pre.id = 'difftest-probe';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();
</script>"""


def chromium() -> str:
    """The browser's path; a plain failure under CI (which installs it), else a skip that says
    how to get it."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    why = ("headless Chromium is not installed (Debian: apt-get install chromium); the HTML "
           "report's browser test cannot run")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why + " -- CI must install it (.ci/run does)")
    pytest.skip(why)


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    exe = chromium()
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp / 'profile'}"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=180, check=False)


def probe(page: Path, tmp: Path) -> dict[str, Any]:
    """Load a copy of `page` with the probe script and return what the probe recorded."""
    text = page.read_text(encoding="utf-8")
    probed = tmp / ("probed-" + page.name)
    probed.write_text(re.sub(r"<head>", "<head>" + _PROBE, text, count=1), encoding="utf-8")
    done = _run(["--virtual-time-budget=10000", "--window-size=1200,900", "--dump-dom",
                 probed.as_uri()], tmp)
    found = re.search(r'<pre id="difftest-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page did not finish loading in Chromium:\n{done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def screenshot(page: Path, out: Path, tmp: Path, size: tuple[int, int] = (1200, 2600)) -> Path:
    """A PNG of the page as Chromium draws it."""
    done = _run([f"--screenshot={out}", f"--window-size={size[0]},{size[1]}", page.as_uri()], tmp)
    assert out.exists() and out.stat().st_size > 0, done.stderr[-2000:]
    return out
