"""Overrides of a comparison's rules: the values a command line or an API caller sets over the
configured comparison, in one record with the fields of `Rules` (difftest.core.rules) an
override may set, all optional, checked when applied by the rules a config file's values meet
(`Rules.__post_init__`), so a bad override is refused in one message wherever it came from.
The rules it sets are recorded in `Rules.overridden`: where a rule came from travels with it
(a report credits the overrides, a drafting set so reads "flag").

The keyword bundles (`OverrideKeywords`, `RunKeywords`) are the API's keyword spellings of
these records, converted at the door (`Overrides.of`, `run_options`): inside the package the
records travel whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TypedDict

from difftest.config import ComparisonSpec
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind, Expect
from difftest.core.rules import InvalidValue, Rules

OVERRIDES = "the overrides"  # command-line options and API arguments, checked alike


class OverrideKeywords(TypedDict, total=False):
    """`Overrides` as API keywords (tests/flow/test_overrides.py keeps the two alike)."""

    expect: Expect | str | None
    min_differing: int | None
    near_tie: float | None
    atol: float | None
    rtol: float | None
    noise_runs: int | None
    drafting: DraftingKind | str | None
    teacher_force: bool | None


@dataclass(frozen=True)
class RunOptions:
    """How a plan's arms are run, whatever the plan: where the run directory goes, whether
    progress is drawn, the checkout cache (None: the config's [defaults] cache, else
    $DIFFTEST_CACHE, else ~/.cache/difftest), how many arms run at once (None: see
    `job_limits`), and for a compare, whether both arms run again until the sequential test
    decides (at most this many times each; difftest.analysis.sequential); `into`: a folder the
    command made (localize's step, a bisect's round), run into in place of a fresh run
    directory under `run_root`, a signal reaching the command as it came (KeyboardInterrupt)."""

    run_root: Path | None = None
    progress: bool | None = None
    cache: Path | None = None
    jobs: int | None = None
    until_decided: int | None = None
    into: Path | None = None


class RunKeywords(TypedDict, total=False):
    """`RunOptions` as API keywords (`cache_dir` is its `cache`)."""

    run_root: Path | None
    progress: bool | None
    cache_dir: Path | None
    jobs: int | None
    until_decided: int | None


@dataclass(frozen=True)
class Overrides:
    """Values set over a comparison's rules; None leaves a rule as configured. The fields are
    the rules an override may set (`OVERRIDE_KEYS`; tests/flow/test_overrides.py keeps the two alike)."""

    expect: Expect | str | None = None
    min_differing: int | None = None
    near_tie: float | None = None
    atol: float | None = None
    rtol: float | None = None
    noise_runs: int | None = None
    drafting: DraftingKind | str | None = None
    teacher_force: bool | None = None

    @classmethod
    def of(cls, keywords: Mapping[str, object], base: Overrides | None = None) -> Overrides:
        """The overrides `keywords` set (over `base`); a keyword that is no override is a
        caller's mistake, said as such."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise TypeError(f"not an override: {', '.join(unknown)}")
        given = {k: v for k, v in keywords.items() if v is not None}
        return replace(base or cls(), **given)  # type: ignore[arg-type]  # checked by apply

    def given(self) -> dict[str, object]:
        """The values set, by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def apply(self, rules: Rules, where: str = OVERRIDES) -> Rules:
        """The rules with these values set, checked by the rules a config file's values meet:
        the one check of an override (a string or a number of any size, never a bare
        ValueError). Each rule set is recorded as the overrides' (`Rules.overridden`)."""
        given = self.given()
        try:
            return replace(rules, overridden=(*rules.overridden, *given),
                           **given)  # type: ignore[arg-type]  # checked by __post_init__
        except InvalidValue as exc:
            raise UsageError(f"{where}: comparison {exc.key}: {exc.why}") from None

    def on(self, spec: ComparisonSpec, where: str = OVERRIDES) -> ComparisonSpec:
        """The spec with its rules overridden (`apply`)."""
        return spec if not self.given() else replace(spec, rules=self.apply(spec.rules, where))


def split_keywords(keywords: Mapping[str, object], overrides: Overrides | None = None,
                   options: RunOptions | None = None) -> tuple[Overrides, RunOptions]:
    """API keywords as the records they spell, over the records a caller passed."""
    override_names = set(OverrideKeywords.__annotations__)
    ours = {k: v for k, v in keywords.items() if k in override_names}
    return Overrides.of(ours, overrides), run_options(
        {k: v for k, v in keywords.items() if k not in override_names}, options)


def run_options(keywords: Mapping[str, object], base: RunOptions | None = None) -> RunOptions:
    """`RunKeywords` as a `RunOptions` (over `base`)."""
    unknown = sorted(set(keywords) - set(RunKeywords.__annotations__))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    named = {"cache" if k == "cache_dir" else k: v for k, v in keywords.items() if v is not None}
    return replace(base or RunOptions(), **named)  # type: ignore[arg-type]  # typed by RunKeywords
