"""Overrides of a comparison's rules: the values a command line or an API caller sets over the
configured comparison, in one record with every field optional, checked when applied by the
rules a config file's values meet (`ComparisonSpec.__post_init__`), so a bad override is
refused in one message wherever it came from.

The keyword bundles (`OverrideKeywords`, `RunKeywords`) are the API's keyword spellings of
these records, converted at the door (`Overrides.of`, `run_options`): inside the package the
records travel whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TypedDict

from difftest.config import ComparisonSpec, InvalidValue
from difftest.core.errors import UsageError
from difftest.core.kinds import DraftingKind, Expect
from difftest.flow.plan import RunOptions

OVERRIDES = "the overrides"  # command-line options and API arguments, checked alike


class OverrideKeywords(TypedDict, total=False):
    """`Overrides` as API keywords (tests/test_rules.py keeps the two alike)."""

    expect: Expect | str | None
    near_tie: float | None
    atol: float | None
    rtol: float | None
    min_differing: int | None
    drafting: DraftingKind | str | None
    noise_runs: int | None
    teacher_force: bool | None


class RunKeywords(TypedDict, total=False):
    """`RunOptions` as API keywords (`cache_dir` is its `cache`)."""

    run_root: Path | None
    progress: bool | None
    cache_dir: Path | None
    jobs: int | None
    until_decided: int | None


@dataclass(frozen=True)
class Overrides:
    """Values set over a comparison's configured ones; None leaves a value as configured."""

    expect: Expect | str | None = None
    near_tie: float | None = None
    atol: float | None = None
    rtol: float | None = None
    min_differing: int | None = None
    drafting: DraftingKind | str | None = None
    noise_runs: int | None = None
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

    def apply(self, spec: ComparisonSpec, where: str = OVERRIDES) -> ComparisonSpec:
        """The spec with these values set, checked by the rules a config file's values meet:
        the one check of an override (a string or a number of any size, never a bare
        ValueError)."""
        given = self.given()
        # the tolerance keys set here outrank a dtype table or a thresholds file (config)
        said = tuple(k for k in ("atol", "rtol", "near_tie") if k in given)
        try:
            return replace(spec, overridden=(*spec.overridden, *said),
                           **given)  # type: ignore[arg-type]  # checked by __post_init__
        except InvalidValue as exc:
            raise UsageError(f"{where}: comparison {exc.key}: {exc.why}") from None


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
