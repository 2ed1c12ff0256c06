"""CPU seconds per stage of one `difftest compare` run, in process: each stage function
(parse, audit, align, compare and within it resolution, tolerance and statistics, the
verdict and each renderer) wrapped by a CPU timer, then the command line run as usual.

    python scripts/bench_stages.py --trace-a A --trace-b B [compare's other options]

Nested stages are counted in their callers too (compare holds resolution, the tolerance and
the statistics). A comparison takes both in one pass over the paired rows: the rows matched and
differenced once (`match_rows`), then judged (`judge_matched`) and added to the statistics
(`_accumulate_matched`, finished by `_finished`); `judge_rows` and `logit_stats`, which do each
whole, are what the noise floor calls. Pairs come from `bench_compare.py --keep DIR`.
"""

from __future__ import annotations

import functools
import importlib
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

STAGES = [("difftest.trace.parser", "parse_trace"), ("difftest.analysis.audit", "audit_trace"),
          ("difftest.trace.align", "align"), ("difftest.analysis.compare", "compare"),
          ("difftest.numerics.resolution", "resolution"),
          ("difftest.numerics.tolerance", "match_rows"),
          ("difftest.numerics.tolerance", "judge_matched"),
          ("difftest.numerics.stats", "_accumulate_matched"), ("difftest.numerics.stats", "_finished"),
          ("difftest.numerics.tolerance", "judge_rows"), ("difftest.numerics.stats", "logit_stats"),
          ("difftest.analysis.verdict", "judge"), ("difftest.analysis.bugclass", "classify"),
          ("difftest.analysis.bugclass", "acceptance_moved"),
          ("difftest.report.comparison", "render_table"),
          ("difftest.report.comparison", "render_markdown"),
          ("difftest.report.comparison", "write_csv"), ("difftest.report.html", "render_comparison")]
SECONDS: dict[str, float] = {}


def timed(label: str, f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            SECONDS[label] = SECONDS.get(label, 0.0) + time.process_time() - t
    return wrapper


def main() -> None:
    import difftest.api  # noqa: F401 - every stage's module loaded before wrapping
    import difftest.flow.evaluate  # noqa: F401
    import difftest.report.outputs  # noqa: F401

    for name, attr in STAGES:
        module = importlib.import_module(name)
        real = getattr(module, attr)
        wrapper = timed(f"{name.rsplit('.', 1)[-1]}.{attr}", real)
        # the module's own name and every `from module import attr` of it elsewhere
        for other in list(sys.modules.values()):
            if getattr(other, "__name__", "").startswith("difftest") and \
                    getattr(other, attr, None) is real:
                setattr(other, attr, wrapper)
    from difftest.cli import main as cli

    sys.argv = ["difftest", "compare", *sys.argv[1:]]
    start, code = time.process_time(), None
    try:
        cli()
    except SystemExit as exc:
        code = exc.code
    print(f"total {time.process_time() - start:.2f} s CPU, exit {code}", file=sys.stderr)
    for label, seconds in SECONDS.items():
        print(f"  {label:32s} {seconds:.2f}", file=sys.stderr)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
          file=sys.stderr)


if __name__ == "__main__":
    main()
