"""A pytest plugin: `pytest --difftest [--difftest-config FILE]` collects every configured
comparison (and its probe) as a test item whose outcome is its verdict, so an engine's own pytest
suite carries its difftest gates.

Installed with difftest (a `pytest11` entry point) and inert unless `--difftest` is given: without
it the plugin adds two options and nothing else, and imports nothing of difftest's analysis. The
selected comparisons run together, as `difftest check` runs them (arms shared between comparisons
run once), the first time one of their items runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from difftest.flow.judge import CheckResult


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("difftest", "differential tests of speculative-decoding arms")
    group.addoption("--difftest", action="store_true", default=False,
                    help="collect each configured difftest comparison (and its probe) as a test")
    group.addoption("--difftest-config", metavar="FILE", default=None,
                    help="difftest config (default: ./difftest.toml, else the packaged default)")
    group.addoption("--difftest-run-root", metavar="DIR", default=None,
                    help="where the run directories go (default: traces/runs)")


class DifftestFailure(Exception):
    """A comparison or probe that did not pass; its message is the verdict and its reasons."""


class _Gate:
    """One `check` run for every selected item, made when the first of them runs."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.result: CheckResult | None = None

    def run(self, session: pytest.Session) -> CheckResult:
        if self.result is None:
            from difftest.config import load_config
            from difftest.flow.judge import CheckResult, judged
            from difftest.flow.overrides import RunOptions
            from difftest.flow.plan import plan_check
            from difftest.flow.run import run

            items = [i for i in session.items if isinstance(i, DifftestItem)]
            names = list(dict.fromkeys(i.comparison for i in items))
            probes = any(i.probe for i in items)
            cfg = load_config(_config_path(self.config))
            root = self.config.getoption("difftest_run_root")
            plan = plan_check(cfg, names, probes=probes)
            ran = run(plan, RunOptions(run_root=Path(root) if root else None, progress=False))
            self.result = judged(plan, ran, CheckResult)
        return self.result


def _config_path(config: pytest.Config) -> Path | None:
    value = config.getoption("difftest_config")
    return Path(value) if value else None


class DifftestItem(pytest.Item):
    """One configured comparison, or its probe."""

    def __init__(self, *, comparison: str, probe: bool, gate: _Gate, **kw: Any) -> None:
        super().__init__(**kw)
        self.comparison = comparison
        self.probe = probe
        self.gate = gate

    def runtest(self) -> None:
        from difftest.report.gate_report import summary
        from difftest.report.text import strip_ansi

        result = self.gate.run(self.session)
        rep = next(r for r in result.reports if r.name == self.comparison)
        if not self.probe:
            v = rep.verdict
            if not v.passed:
                raise DifftestFailure(strip_ansi(
                    f"{rep.name}: {summary(rep)}\n" + "\n".join(f"  - {r}" for r in v.reasons)))
            return
        p = result.probes.get(self.comparison)
        if p is None:
            raise DifftestFailure(f"{self.comparison}: no probe ran")
        if int(p.exit_code) != 0:
            lines = [f"{self.comparison}/probe: mutation score {p.mutation_score:.2f}, exit "
                     f"{int(p.exit_code)}"]
            lines += [f"  - {m.name}: " + ("killed by " + str(m.killed_by) if m.killed else
                                         str(m.result) if not m.applied else
                                         f"{m.result}: " + "; ".join(m.report.verdict.reasons[-1:]))
                      for m in p.mutations]
            lines += [f"  - {n}" for n in p.notes]
            raise DifftestFailure(strip_ansi("\n".join(lines)))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, DifftestFailure):
            return str(excinfo.value)
        from difftest.core.errors import DifftestError

        if isinstance(excinfo.value, DifftestError):
            return f"difftest: error: {excinfo.value}"
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"difftest {self.name}"


class DifftestConfigFile(pytest.File):
    """The difftest config, collected as a file of comparisons."""

    def collect(self) -> list[pytest.Item]:
        from difftest.config import load_config

        cfg = load_config(_config_path(self.config))
        gate = _Gate(self.config)
        items: list[pytest.Item] = []
        for name, spec in cfg.comparisons.items():
            items.append(DifftestItem.from_parent(self, name=name, comparison=name, probe=False,
                                                  gate=gate))
            if spec.rules.mutations:
                items.append(DifftestItem.from_parent(self, name=f"{name}/probe",
                                                      comparison=name, probe=True, gate=gate))
        return items


@pytest.hookimpl(tryfirst=True)  # before pytest's own -k/-m selection, which then applies
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("difftest"):
        return
    from difftest.config import load_config
    from difftest.core.errors import DifftestError

    try:
        path = load_config(_config_path(config)).path
    except DifftestError as exc:
        raise pytest.UsageError(f"difftest: error: {exc}") from None
    items.extend(DifftestConfigFile.from_parent(session, path=Path(path)).collect())
