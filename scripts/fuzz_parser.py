"""A longer fuzz campaign of the trace parser than the test suite runs.

Three properties, each over --cases generated inputs (the suite's strategies, from
tests/trace_strategies.py, written from the format strings and independent of the parser):

- differential: the compiled scanner and the pure-Python reader give identical arrays,
  findings and errors on valid and mutated traces (skipped when the scanner is not built);
- robust: a mutated trace is read or refused with difftest's own TraceError, never another
  exception;
- round trip: a valid trace parses to exactly the values it was generated from.

Prints the number of cases each property ran and every failure found (hypothesis shrinks it).
Usage: python scripts/fuzz_parser.py [--cases 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.trace import test_trace_properties as props  # noqa: E402
from tests.trace_strategies import mutated_trace, valid_trace  # noqa: E402


def campaign(name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], None],
             cases: int, rng_seed: int) -> tuple[int, str | None]:
    count = 0

    @seed(rng_seed)
    @settings(max_examples=cases, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value: Any) -> None:
        nonlocal count
        count += 1
        check(value)

    t0 = time.perf_counter()
    try:
        run()
        failure = None
    except Exception:  # noqa: BLE001 - the campaign reports whatever broke
        failure = traceback.format_exc(limit=3)
    print(f"{name:<13} {count:>7} cases  {time.perf_counter() - t0:7.1f}s  "
          f"{'OK' if failure is None else 'FAILED'}", flush=True)
    return count, failure


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from difftest.trace import fast_path_available

    texts = st.one_of(mutated_trace(), valid_trace().map(lambda v: "\n".join(v[0]) + "\n"))

    def differential(text: str) -> None:
        data = text.encode("utf-8", "surrogateescape")
        assert props.outcome(data, pure=False) == props.outcome(data, pure=True), text

    def robust(text: str) -> None:
        for pure in (False, True):
            props.test_mutated_traces_only_raise_difftest_errors.hypothesis.inner_test(  # type: ignore[attr-defined]
                text, pure)

    def round_trip(generated: Any) -> None:
        for pure in (False, True):
            props.test_generated_traces_round_trip_exactly.hypothesis.inner_test(  # type: ignore[attr-defined]
                generated, pure)

    runs = [("robust", mutated_trace(), robust), ("round trip", valid_trace(), round_trip)]
    if fast_path_available():
        runs.insert(0, ("differential", texts, differential))
    else:
        print("the compiled scanner is not built: differential campaign skipped")
    failures = []
    total = 0
    for name, strategy, check in runs:
        count, failure = campaign(name, strategy, check, args.cases, args.seed)
        total += count
        if failure:
            failures.append((name, failure))
    print(f"total {total} cases, {len(failures)} failing properties")
    for name, failure in failures:
        print(f"\n--- {name} ---\n{failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
