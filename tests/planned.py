"""The commands' library path without their report files: plan, run, judge (`difftest.api`
adds the writing). Tests call these where they check what was judged, not what was written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from difftest.config import ComparisonSpec, Config
from difftest.flow.evaluate import ComparisonReport
from difftest.flow.judge import CheckResult, judged
from difftest.flow.overrides import RunOptions
from difftest.flow.plan import plan_check, plan_compare, plan_probe
from difftest.flow.run import run
from difftest.flow.scoring import ProbeReport


def run_check(config: Config, only: Sequence[str] | None = None, *,
              run_root: Path | None = None, progress: bool | None = None,
              cache_dir: Path | None = None, probes: bool = True,
              jobs: int | None = None) -> CheckResult:
    plan = plan_check(config, only, probes=probes)
    return judged(plan, run(plan, RunOptions(run_root, progress, cache_dir, jobs)), CheckResult)


def run_probe(config: Config, spec: ComparisonSpec, mutations: Sequence[str] | None = None, *,
              run_root: Path | None = None, progress: bool | None = None,
              cache_dir: Path | None = None) -> ProbeReport:
    plan = plan_probe(config, spec, mutations)
    return judged(plan, run(plan, RunOptions(run_root, progress, cache_dir)), ProbeReport)


def run_comparison(config: Config, spec: ComparisonSpec, *, run_root: Path | None = None,
                   progress: bool | None = None,
                   cache_dir: Path | None = None) -> ComparisonReport:
    plan = plan_compare(config, spec)
    return judged(plan, run(plan, RunOptions(run_root, progress, cache_dir)), ComparisonReport)
