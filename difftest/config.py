"""Load and validate difftest's TOML config: which arms exist, how to run them, what each
comparison expects.

Validation is strict on purpose: a misspelt key that is silently ignored turns a gate into a
no-op (a `timout_s` that never fires, an `expect` that never applies), so every unknown table or
key, wrong type or bad value is a ConfigError naming the file, the table and the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.core.deprecation import warn_config
from difftest.core.errors import ConfigError, UsageError
from difftest.core.evidence import Rule, RuleError, parse_rule
from difftest.core.gitinfo import git_toplevel
from difftest.core.corpus import NAMES as CORPUS_NAMES
from difftest.core.limits import MAX_JOBS
from difftest.core.names import mutated_name
from difftest.core.names import name_problem as name_problem
from difftest.core.rules import ECHO_KEYS, RULE_KEYS, Rules, finite_number, integer, kind_of, name_string
# checked there, and read from here too
from difftest.core.rules import AcceptanceGate as AcceptanceGate
from difftest.core.rules import InvalidValue as InvalidValue
from difftest.core.thresholds import (Calibrated, Dtype, ThresholdError, ToleranceMode,
                                     canonical_input, parse_dtype, read_thresholds,
                                     tolerance_mode)

# What a probe runs by default; any name of the reference runner's bug corpus
# (`python -m difftest.runners.reference --list-mutations`) needs no [mutations] table either.
BUILTIN_MUTATIONS: tuple[str, ...] = ("causal-mask", "skip-kv-write", "stale-seq-lens")
KNOWN_MUTATIONS: tuple[str, ...] = CORPUS_NAMES
PYTHON_TOKEN = "{python}"
INPUT_TOKEN = "{seed}"  # replaced by the comparison's gate input, or a calibration input
CONFIG_FILE_NAME = "difftest.toml"

_TOP_TABLES = ("defaults", "arms", "comparisons", "mutations", "audit", "check")
_DEFAULTS_KEYS = ("launcher", "launched_jobs", "cache")
_CHECK_KEYS = ("sweep", "sweep_budget_s", "sweep_seeds")
_ARM_KEYS = ("command", "env", "cwd", "timeout_s", "git_ref", "build", "repo", "launcher",
             "max_capture_bytes", "evidence", "line_prefix", "dtype")
DEFAULT_LAUNCHED_JOBS = 8
MAX_SWEEP_SEEDS = 100  # each seed runs every generated input once more
# a comparison's arms, its rules (difftest.core.rules: one list of them), then its inputs
_COMPARISON_KEYS = ("arm_a", "arm_b", *RULE_KEYS, "thresholds", "calibration_inputs",
                    "gate_input", "localize_baseline")
# old spellings of comparison keys, read for one release with a warning: old -> new
_OLD_COMPARISON_KEYS = {"probe": "mutations"}
_MUTATION_KEYS = ("env", "args")


def _input(key: str, value: object) -> str:
    """An input for INPUT_TOKEN: an integer seed, a word or a prompt (one line of text; the
    argv element or env value it replaces receives it whole)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidValue(key, f"must be an integer or a string, got {kind_of(value)}")
    text = str(value)
    if not text.strip() or any(ord(c) < 32 or c == "\x7f" for c in text):
        raise InvalidValue(key, f"must be a word or one line of text without control "
                                f"characters, got {text!r}")
    return text


def checked_name(key: str, value: object) -> str:
    """A name read from a file (a config, a run's meta.json) that becomes a file name."""
    name = name_string(key, value)
    why = name_problem(name)
    if why is not None:
        raise InvalidValue(key, f"{name[:40]!r} {why}")
    return name


def line_prefix_pattern(pattern: str) -> re.Pattern[bytes]:
    """An arm's own `line_prefix` (a Python regular expression matched at a line's start), as
    the trace readers use it; a bad pattern is a ValueError naming why."""
    if not pattern:
        raise ValueError("must not be empty")
    try:
        return re.compile(pattern.encode("utf-8"))
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None


def _as_env(env: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in env.items()}


@dataclass(frozen=True)
class ArmSpec:
    """One way of running the runner. Frozen so a mutated arm is a new value, never an edit."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    timeout_s: float | None = None
    git_ref: str | None = None
    build: tuple[str, ...] | None = None
    repo: Path | None = None
    launcher: tuple[str, ...] | None = None  # argv prefix, e.g. ("srun", "-Q", "--")
    max_capture_bytes: int | None = None  # stdout + stderr together; past it the arm fails
    # what the arm's output must show (difftest.core.evidence): its effective settings, counters,
    # or a line, proving that it ran what its name claims
    evidence: tuple[Rule, ...] = ()
    # a regular expression for a prefix this arm's lines carry besides the known ones
    # (difftest.trace.grammar.KNOWN_PREFIX), stripped before a tag or `vt:` is looked for
    line_prefix: str | None = None
    # the dtype of the arm's draft logits, as the config states it (None: not stated here; its
    # `[spec-config]` line may), for `tolerance = "dtype"`
    dtype: Dtype | None = None

    def __post_init__(self) -> None:
        # Callers build specs by hand (tests, mutated arms): normalise so lists and str paths
        # behave exactly like what the loader produces.
        object.__setattr__(self, "command", tuple(str(a) for a in self.command))
        object.__setattr__(self, "env", _as_env(self.env))
        if self.cwd is not None:
            object.__setattr__(self, "cwd", Path(self.cwd))
        if self.repo is not None:
            object.__setattr__(self, "repo", Path(self.repo))
        if self.build is not None:
            object.__setattr__(self, "build", tuple(str(a) for a in self.build))
        if self.launcher is not None:
            object.__setattr__(self, "launcher", tuple(str(a) for a in self.launcher) or None)

    def with_changes(self, **kw: Any) -> ArmSpec:
        """A copy with some fields replaced; how probes derive a mutated arm."""
        return dataclasses.replace(self, **kw)

    @property
    def takes_input(self) -> bool:
        """Whether INPUT_TOKEN appears in the argv or an env value."""
        return any(INPUT_TOKEN in a for a in (*self.command, *self.env.values()))

    def with_input(self, value: str) -> ArmSpec:
        """The arm run on one input: INPUT_TOKEN replaced in its argv and env values."""
        return self.with_changes(command=tuple(a.replace(INPUT_TOKEN, value) for a in self.command),
                                 env={k: v.replace(INPUT_TOKEN, value) for k, v in self.env.items()})


@dataclass(frozen=True)
class ComparisonSpec:
    """A pair of arms, the rules their drafts are judged by, and the inputs they run on. Every
    value is checked when the spec is made (and again by `dataclasses.replace`): a bad one
    raises InvalidValue naming its key."""

    name: str
    arm_a: str
    arm_b: str
    rules: Rules = Rules()
    # the arms' dtypes as their config tables state them (filled by the loader, not a key)
    arm_dtypes: tuple[Dtype | None, Dtype | None] = (None, None)
    # inputs for arms whose argv/env take INPUT_TOKEN: the one a gate runs on, and the held-out
    # ones `difftest calibrate` measures thresholds on
    gate_input: str | None = None
    calibration_inputs: tuple[str, ...] = ()
    # a thresholds file `difftest calibrate` wrote ("" when none), and where the spec's
    # atol/rtol/near_tie came from when it was read ("": not read, or no file)
    thresholds: str = ""
    threshold_origin: str = ""
    # what the thresholds file says beyond its values: benign rates, machine (None: no file)
    calibrated: Calibrated | None = None
    # `difftest localize`'s background: a known-good arm that differs from A only in the
    # harmless change (None: localise without one)
    localize_baseline: str | None = None

    @classmethod
    def of(cls, values: Mapping[str, object]) -> ComparisonSpec:
        """A spec from flat keys, its own and its rules' alike (a run record's echo, a config
        table's values): the rules' keys become its `Rules`."""
        rules = Rules.of({k: v for k, v in values.items() if k in ECHO_KEYS})
        own = {k: v for k, v in values.items() if k not in ECHO_KEYS}
        return cls(rules=rules, **own)  # type: ignore[arg-type]  # checked by __post_init__

    def with_rules(self, **changes: Any) -> ComparisonSpec:
        """The spec with some rules changed (checked as any rules are)."""
        return dataclasses.replace(self, rules=dataclasses.replace(self.rules, **changes))

    def echo(self) -> dict[str, object]:
        """The spec as JSON values, its rules flat among its own keys (meta.json's record)."""
        return {"name": self.name, "arm_a": self.arm_a, "arm_b": self.arm_b,
                **self.rules.echo(),
                "arm_dtypes": [d.value if d is not None else None for d in self.arm_dtypes],
                "gate_input": self.gate_input,
                "calibration_inputs": list(self.calibration_inputs),
                "thresholds": self.thresholds, "threshold_origin": self.threshold_origin,
                # only with a thresholds file: records without one keep their shape
                **({"calibrated": self.calibrated.to_json()} if self.calibrated is not None
                   else {}),
                # only when set: a record without it reads back as no baseline
                **({"localize_baseline": self.localize_baseline}
                   if self.localize_baseline is not None else {})}

    def __post_init__(self) -> None:
        for key in ("name", "arm_a", "arm_b"):
            name_string(key, getattr(self, key))
        if not isinstance(self.rules, Rules):
            raise InvalidValue("rules", f"must be a Rules record, got {self.rules!r}")
        self._set_dtypes_and_calibrated()
        if self.gate_input is not None:
            object.__setattr__(self, "gate_input", _input("gate_input", self.gate_input))
        if self.localize_baseline is not None:
            name_string("localize_baseline", self.localize_baseline)
            if self.localize_baseline in (self.arm_a, self.arm_b):
                raise InvalidValue("localize_baseline", f"names arm {self.localize_baseline!r} "
                                   "of the comparison itself; the baseline is a third, "
                                   "known-good arm that differs from A only in the harmless "
                                   "change")
        self._set_calibration_inputs()

    def _set_dtypes_and_calibrated(self) -> None:
        """arm_dtypes as two Dtypes (or None); calibrated as a record (a run record's echo
        holds it as a table)."""
        set_ = object.__setattr__
        dtypes: object = self.arm_dtypes
        if not isinstance(dtypes, (list, tuple)) or len(dtypes) != 2:
            raise InvalidValue("arm_dtypes", f"must be two dtypes (or null), got {dtypes!r}")
        try:
            set_(self, "arm_dtypes", tuple(d if d is None or isinstance(d, Dtype)
                                           else parse_dtype(str(d)) for d in dtypes))
        except ValueError as exc:
            raise InvalidValue("arm_dtypes", str(exc)) from None
        calibrated: object = self.calibrated
        if calibrated is not None and not isinstance(calibrated, Calibrated):
            try:
                set_(self, "calibrated", Calibrated.of(calibrated))
            except ThresholdError as exc:
                raise InvalidValue("calibrated", str(exc)) from None

    def _set_calibration_inputs(self) -> None:
        """calibration_inputs as a tuple of held-out inputs: none twice, none the gate input."""
        inputs: object = self.calibration_inputs
        if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)):
            raise InvalidValue("calibration_inputs", f"must be a list of inputs, got {inputs!r}")
        object.__setattr__(self, "calibration_inputs",
                           tuple(_input("calibration_inputs", v) for v in inputs))
        # inputs are compared as the runner reads them: "00" and 0 are one seed
        seen: dict[str, str] = {}
        for value in self.calibration_inputs:
            key = canonical_input(value)
            if self.gate_input is not None and key == canonical_input(self.gate_input):
                shown = "" if value == self.gate_input else f" (as {value!r})"
                raise InvalidValue("calibration_inputs", f"holds the gate input "
                                                         f"{self.gate_input!r}{shown}: thresholds "
                                                         "must be measured on held-out inputs, "
                                                         "not on the one they gate")
            if key in seen:
                raise InvalidValue("calibration_inputs", f"names an input twice ({seen[key]!r} "
                                                         f"and {value!r})")
            seen[key] = value


@dataclass(frozen=True)
class MutationSpec:
    """A known-wrong variant of an arm: env merged over the arm's, args appended to its argv."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    def arm_name(self, arm: str) -> str:
        """`<arm>+<mutation>`: the mutated arm's capture files sit beside the base's."""
        return mutated_name(arm, self.name)

    def apply(self, arm: ArmSpec) -> ArmSpec:
        """The mutated arm, under `arm_name`."""
        return arm.with_changes(name=self.arm_name(arm.name),
                                env={**arm.env, **self.env},
                                command=tuple(arm.command) + tuple(self.args))


@dataclass(frozen=True)
class AuditThresholds:
    """When a trace counts as informative; see ARCHITECTURE.md, 'informative'."""

    # At least 1: a trace that drafted no id can never be informative, so 0 would mean nothing.
    min_distinct_ids: int = 2
    min_entropy_bits: float = 1.0
    # The token comparison counts as blind when even the smallest margin/2 exceeds this: no
    # perturbation below it could move any drafted token.
    max_blind_radius: float = 1.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "min_distinct_ids", integer("min_distinct_ids", self.min_distinct_ids, 1))
        set_(self, "min_entropy_bits", finite_number("min_entropy_bits", self.min_entropy_bits))
        set_(self, "max_blind_radius", finite_number("max_blind_radius", self.max_blind_radius))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> AuditThresholds:
        """Thresholds from a table (TOML [audit], a run record): defaults for what is absent."""
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise InvalidValue(key, f"unknown key (known: {', '.join(known)})")
        return cls(**values)  # type: ignore[arg-type]  # each value is checked by __post_init__


@dataclass(frozen=True)
class Defaults:
    """[defaults]: what applies to every arm, and where checkouts of git refs are kept."""

    launcher: tuple[str, ...] | None = None
    launched_jobs: int = DEFAULT_LAUNCHED_JOBS  # arms run through a launcher at once in check
    cache: Path | None = None  # worktree cache; on a shared filesystem when arms are launched


@dataclass(frozen=True)
class CheckSettings:
    """[check]: what `difftest check` runs besides the comparisons. With `sweep`, each checked
    comparison whose toggle is about a coverage class is also swept (difftest.flow.sweep: inputs
    generated to reach that state, `sweep_seeds` seeds each) until `sweep_budget_s` seconds of
    wall time are spent; an input not started by then is reported as not run."""

    sweep: bool = False
    sweep_budget_s: float = 300.0
    sweep_seeds: int = 1


@dataclass(frozen=True)
class Config:
    """A validated config file."""

    path: Path
    arms: Mapping[str, ArmSpec]
    comparisons: Mapping[str, ComparisonSpec]
    mutations: Mapping[str, MutationSpec]
    audit: AuditThresholds = AuditThresholds()
    defaults: Defaults = Defaults()
    check: CheckSettings = CheckSettings()

    def arm(self, name: str) -> ArmSpec:
        """The named arm; a typo on the command line gets the list of real names."""
        try:
            return self.arms[name]
        except KeyError:
            known = ", ".join(self.arms) or "none"
            raise UsageError(f"unknown arm {name!r} in {self.path} (known arms: {known})") from None

    def comparison(self, name: str) -> ComparisonSpec:
        """The named comparison; a typo gets the list of real names."""
        try:
            return self.comparisons[name]
        except KeyError:
            known = ", ".join(self.comparisons) or "none"
            raise UsageError(f"unknown comparison {name!r} in {self.path} "
                             f"(known: {known})") from None

    def mutation(self, name: str) -> MutationSpec:
        """A configured mutation, else a built-in one of the reference runner."""
        if name in self.mutations:
            return self.mutations[name]
        if name in KNOWN_MUTATIONS:
            return MutationSpec(name, env={"DIFFTEST_MUTATION": name}, args=())
        known = ", ".join(dict.fromkeys([*self.mutations, *KNOWN_MUTATIONS]))
        raise UsageError(f"unknown mutation {name!r} (known: {known})")


def default_config_path() -> Path:
    """The config shipped inside the package."""
    return Path(__file__).resolve().parent / "configs" / "default.toml"


def _packaged_dir() -> Path:
    return default_config_path().parent


def load_config(path: Path | None = None, *, cwd: Path | None = None,
                unread_thresholds: str | None = None) -> Config:
    """An explicit file, else ./difftest.toml when present, else the packaged default.
    `unread_thresholds`: a comparison whose thresholds file is not read (calibrate, about to
    write it: a stale or broken file must not stop the one command that replaces it)."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    if path is not None:
        path = Path(path)
        full = path if path.is_absolute() else base / path
        if not full.is_file():
            what = "is a directory" if full.is_dir() else "does not exist"
            raise ConfigError(path, f"config file {what}")
        return _load_file(path, full, base, unread_thresholds)
    local = base / CONFIG_FILE_NAME
    if local.is_file():
        return _load_file(local, local, base, unread_thresholds)
    default = default_config_path()
    return _load_file(default, default, base, unread_thresholds)


def _load_file(shown: Path, full: Path, cwd: Path, unread: str | None = None) -> Config:
    try:
        text = full.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(shown, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(shown, f"cannot read: {exc.strerror or exc}") from None
    return _parse(text, shown, full.resolve().parent, cwd, unread)


def parse_config(text: str, path: Path) -> Config:
    """Validate config text as if it had been read from `path` (relative paths resolve there)."""
    path = Path(path)
    return _parse(text, path, path.resolve().parent, Path.cwd())


# --- validation helpers: each names file, table and key -------------------------------------


class _Checker:
    """Carries the file name so every check can say where the bad value is."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, table: str, message: str) -> ConfigError:
        return ConfigError(self.path, message, key=table)

    def renamed(self, table: str, data: Mapping[str, Any],
                old: Mapping[str, str]) -> dict[str, Any]:
        """The table with each old key under its new name (warning once per key); both
        spellings at once are refused, since which value was meant cannot be known."""
        out = dict(data)
        for was, now in old.items():
            if was not in out:
                continue
            if now in out:
                raise self.fail(table, f"keys {was!r} and {now!r} are one key; give {now!r} only")
            try:
                warn_config(self.path, table, was, now)
            except Warning:  # the warnings filter turns warnings into errors (-W error)
                raise self.fail(table, f"key {was!r} is the old spelling of {now!r} (its "
                                       "deprecation warning is an error under this warnings "
                                       f"filter): use {now!r}") from None
            out[now] = out.pop(was)
        return out

    def keys(self, table: str, data: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for key in data:
            if key not in known:
                raise self.fail(table, f"key {key!r}: unknown key (known: {', '.join(known)})")

    def table(self, table: str, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(table, f"key {key!r}: must be a table, got {kind_of(value)}")
        return value

    def string(self, table: str, key: str, value: Any, *, empty: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(table, f"key {key!r}: must be a string, got {kind_of(value)}")
        if not empty and not value.strip():
            raise self.fail(table, f"key {key!r}: must not be empty")
        return value

    def argv(self, table: str, key: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            raise self.fail(table, f"key {key!r}: must be an argv list of strings, not a shell "
                                   f"string (write {_argv_hint(value)})")
        if not isinstance(value, list):
            raise self.fail(table, f"key {key!r}: must be an argv list of strings, got {kind_of(value)}")
        if not value:
            raise self.fail(table, f"key {key!r}: must not be empty")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(table, f"key {key!r}: item {i} must be a string, got {kind_of(item)}")
            if "\0" in item:
                raise self.fail(table, f"key {key!r}: item {i} contains a NUL character")
        if not value[0].strip():
            raise self.fail(table, f"key {key!r}: the program (item 0) must not be empty")
        return tuple(value)

    def strings(self, table: str, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(table, f"key {key!r}: must be a list of strings, got {kind_of(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(table, f"key {key!r}: item {i} must be a string, got {kind_of(item)}")
        return tuple(value)

    def env(self, table: str, key: str, value: Any) -> dict[str, str]:
        data = self.table(table, key, value)
        out: dict[str, str] = {}
        for name, item in data.items():
            if not name or "=" in name or "\0" in name:
                raise self.fail(table, f"key {key!r}: {name!r} is not a valid variable name")
            # Integers are natural here (VT_SPEC_TRACE = 3); booleans and floats are ambiguous.
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise self.fail(table, f"key '{key}.{name}': must be a string or an integer, "
                                       f"got {kind_of(item)}")
            if isinstance(item, str) and "\0" in item:
                raise self.fail(table, f"key '{key}.{name}': contains a NUL character")
            out[name] = str(item)
        return out

    def integer(self, table: str, key: str, value: Any, *, minimum: int,
                maximum: int | None = None) -> int:
        try:
            return integer(key, value, minimum, maximum)
        except InvalidValue as exc:
            raise self.fail(table, f"key {key!r}: {exc.why}") from None

    def number(self, table: str, key: str, value: Any, *, minimum: float = 0.0,
               strict: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(table, f"key {key!r}: must be a number, got {kind_of(value)}")
        number = float(value)
        if not math.isfinite(number):
            raise self.fail(table, f"key {key!r}: must be a finite number, got {number}")
        if strict and number <= minimum:
            raise self.fail(table, f"key {key!r}: must be > {minimum:g}, got {number:g}")
        if not strict and number < minimum:
            raise self.fail(table, f"key {key!r}: must be >= {minimum:g}, got {number:g}")
        return number


def _argv_hint(text: str) -> str:
    return "[" + ", ".join(f'"{w}"' for w in text.split()) + "]" if text.split() else '["program"]'


def _substitute(argv: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a.replace(PYTHON_TOKEN, sys.executable) for a in argv)


def _parse(text: str, path: Path, base: Path, cwd: Path, unread: str | None = None) -> Config:
    check = _Checker(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"TOML syntax error: {exc}") from None
    except RecursionError:
        raise ConfigError(path, "TOML nested too deep to be a difftest config") from None
    for key in data:
        if key not in _TOP_TABLES:
            raise check.fail(key, f"unknown table (known: {', '.join(_TOP_TABLES)})")
        if not isinstance(data[key], dict):
            raise check.fail(key, f"must be a table ([{key}.NAME] sections), got {kind_of(data[key])}")

    packaged = base == _packaged_dir()
    repo_base = cwd if packaged else base
    run_defaults = _defaults(check, data.get("defaults", {}), base)
    arms: dict[str, ArmSpec] = {}
    for name, raw in data.get("arms", {}).items():
        arm = _arm(check, name, check.table("arms", name, raw), base, repo_base)
        if arm.launcher is None and run_defaults.launcher is not None:
            arm = arm.with_changes(launcher=run_defaults.launcher)
        arms[name] = arm

    mutations = {name: _mutation(check, name, raw)
                 for name, raw in data.get("mutations", {}).items()}

    comparisons: dict[str, ComparisonSpec] = {}
    for name, raw in data.get("comparisons", {}).items():
        comparisons[name] = _comparison(check, name, check.table("comparisons", name, raw),
                                        arms, mutations, base, read=name != unread)

    try:
        audit = AuditThresholds.from_mapping(data.get("audit", {}))
    except InvalidValue as exc:
        raise check.fail("audit", f"key {exc.key!r}: {exc.why}") from None
    return Config(path=path, arms=arms, comparisons=comparisons, mutations=mutations, audit=audit,
                  defaults=run_defaults, check=_check(check, data.get("check", {})))


def _mutation(check: _Checker, name: str, raw: object) -> MutationSpec:
    table = _table_of("mutations", name)
    why = name_problem(name)
    if why is not None:
        raise check.fail(table, f"a mutation name {why}")
    raw = check.table("mutations", name, raw)
    check.keys(table, raw, _MUTATION_KEYS)
    env = check.env(table, "env", raw["env"]) if "env" in raw else {}
    args = _substitute(check.strings(table, "args", raw["args"])) if "args" in raw else ()
    return MutationSpec(name, env=env, args=args)


def _check(check: _Checker, raw: dict[str, Any]) -> CheckSettings:
    check.keys("check", raw, _CHECK_KEYS)
    d = CheckSettings()
    sweep = raw.get("sweep", d.sweep)
    if not isinstance(sweep, bool):
        raise check.fail("check", f"key 'sweep': must be true or false, got {kind_of(sweep)}")
    budget = (check.number("check", "sweep_budget_s", raw["sweep_budget_s"], strict=True)
              if "sweep_budget_s" in raw else d.sweep_budget_s)
    seeds = (check.integer("check", "sweep_seeds", raw["sweep_seeds"], minimum=1,
                           maximum=MAX_SWEEP_SEEDS)
             if "sweep_seeds" in raw else d.sweep_seeds)
    return CheckSettings(sweep=sweep, sweep_budget_s=budget, sweep_seeds=seeds)


def _defaults(check: _Checker, raw: dict[str, Any], base: Path) -> Defaults:
    check.keys("defaults", raw, _DEFAULTS_KEYS)
    launcher = (_substitute(check.argv("defaults", "launcher", raw["launcher"]))
                if "launcher" in raw else None)
    jobs = (check.integer("defaults", "launched_jobs", raw["launched_jobs"], minimum=1,
                          maximum=MAX_JOBS)
            if "launched_jobs" in raw else DEFAULT_LAUNCHED_JOBS)
    cache = None
    if "cache" in raw:
        cache = Path(check.string("defaults", "cache", raw["cache"])).expanduser()
        cache = cache if cache.is_absolute() else (base / cache).resolve()
    return Defaults(launcher=launcher, launched_jobs=jobs, cache=cache)


def _table_of(kind: str, name: str) -> str:
    """How a message names a table: a long name cut, control characters shown escaped."""
    shown = name if len(name) <= 40 else name[:40] + "..."
    return f"{kind}.{shown.encode('unicode_escape').decode('ascii')}"


def _arm(check: _Checker, name: str, raw: dict[str, Any], base: Path, repo_base: Path) -> ArmSpec:
    table = _table_of("arms", name)
    why = name_problem(name)
    if why is not None:
        raise check.fail(table, f"an arm name {why}")
    check.keys(table, raw, _ARM_KEYS)
    if "command" not in raw:
        raise check.fail(table, "key 'command': missing (an argv list, e.g. "
                                '["{python}", "-m", "difftest.runners.reference"])')
    command = _substitute(check.argv(table, "command", raw["command"]))
    env = check.env(table, "env", raw["env"]) if "env" in raw else {}
    timeout = (check.number(table, "timeout_s", raw["timeout_s"], strict=True)
               if "timeout_s" in raw else None)
    git_ref = check.string(table, "git_ref", raw["git_ref"]) if "git_ref" in raw else None
    build, cwd, repo = _checkout(check, table, raw, git_ref, (base, repo_base))
    launcher = (_substitute(check.argv(table, "launcher", raw["launcher"]))
                if "launcher" in raw else None)
    cap = (check.integer(table, "max_capture_bytes", raw["max_capture_bytes"], minimum=1)
           if "max_capture_bytes" in raw else None)
    evidence, line_prefix, dtype = _reading(check, table, raw)
    return ArmSpec(name=name, command=command, env=env, cwd=cwd, timeout_s=timeout,
                   git_ref=git_ref, build=build, repo=repo, launcher=launcher,
                   max_capture_bytes=cap, evidence=evidence, line_prefix=line_prefix,
                   dtype=dtype)


def _checkout(check: _Checker, table: str, raw: dict[str, Any], git_ref: str | None,
              bases: tuple[Path, Path]) -> tuple[tuple[str, ...] | None, Path | None, Path | None]:
    """An arm's build, cwd and repo: where it runs (inside the checkout of a git_ref arm).
    `bases`: the config's folder, and the one a git_ref arm's repo is found from."""
    base, repo_base = bases
    build = None
    if "build" in raw:
        if git_ref is None:
            raise check.fail(table, "key 'build': only allowed together with 'git_ref' (a build "
                                    "runs inside the checkout of that ref)")
        build = _substitute(check.argv(table, "build", raw["build"]))
    cwd = None
    if "cwd" in raw:
        cwd = Path(check.string(table, "cwd", raw["cwd"]))
        if git_ref is not None:
            if cwd.is_absolute():
                raise check.fail(table, "key 'cwd': must be relative for a git_ref arm (it is "
                                        "resolved inside the checkout of that ref)")
        else:
            cwd = (base / cwd).resolve() if not cwd.is_absolute() else cwd
    repo = None
    if "repo" in raw:
        if git_ref is None:
            raise check.fail(table, "key 'repo': only allowed together with 'git_ref'")
        repo = Path(check.string(table, "repo", raw["repo"]))
        repo = repo if repo.is_absolute() else (base / repo).resolve()
    elif git_ref is not None:
        repo = git_toplevel(repo_base.resolve()) or repo_base.resolve()
    return build, cwd, repo


def _reading(check: _Checker, table: str, raw: dict[str, Any]
             ) -> tuple[tuple[Rule, ...], str | None, Dtype | None]:
    """How an arm's trace is read: its evidence rules, line prefix and dtype."""
    evidence: list[Rule] = []
    for i, text in enumerate(check.strings(table, "evidence", raw["evidence"])
                             if "evidence" in raw else ()):
        try:
            evidence.append(parse_rule(text))
        except RuleError as exc:
            raise check.fail(table, f"key 'evidence': item {i}: {exc}") from None
    line_prefix = None
    if "line_prefix" in raw:
        line_prefix = check.string(table, "line_prefix", raw["line_prefix"])
        try:
            line_prefix_pattern(line_prefix)
        except ValueError as exc:
            raise check.fail(table, f"key 'line_prefix': {exc}") from None
    dtype = None
    if "dtype" in raw:
        try:
            dtype = parse_dtype(check.string(table, "dtype", raw["dtype"]))
        except ValueError as exc:
            raise check.fail(table, f"key 'dtype': {exc}") from None
    return tuple(evidence), line_prefix, dtype


def _not_a_file(path: Path) -> str | None:
    """What a path that exists is when it is no regular file (a folder, a FIFO, a device),
    told apart from one that does not exist yet (calibrate writes it)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a device or other special file"


def _comparison(check: _Checker, name: str, raw: dict[str, Any], arms: Mapping[str, ArmSpec],
                mutations: Mapping[str, MutationSpec], base: Path, *,
                read: bool = True) -> ComparisonSpec:
    table = _table_of("comparisons", name)
    why = name_problem(name)
    if why is not None:
        raise check.fail(table, f"a comparison name {why}")
    # an error names the key as the user wrote it (the old spelling, when that is what they wrote)
    spelt = next((old for old in _OLD_COMPARISON_KEYS if old in raw), "mutations")
    raw = check.renamed(table, raw, _OLD_COMPARISON_KEYS)
    check.keys(table, raw, _COMPARISON_KEYS)
    sides = _sides(check, table, raw, arms)
    probe = check.strings(table, spelt, raw["mutations"]) if "mutations" in raw else ()
    for mutation in probe:
        if mutation not in mutations and mutation not in KNOWN_MUTATIONS:
            known = ", ".join(dict.fromkeys([*mutations, *KNOWN_MUTATIONS]))
            raise check.fail(table, f"key {spelt!r}: unknown mutation {mutation!r} (known: {known})")
    values: dict[str, Any] = {k: raw[k] for k in (*RULE_KEYS, "gate_input", "calibration_inputs",
                                                  "localize_baseline")
                              if k in raw and k != "mutations"}
    _tolerance_alone(check, table, raw)
    if "thresholds" in raw:
        values.update(_thresholds(check, table, raw, (name, base), read=read))
    try:
        return ComparisonSpec.of({"name": name, "arm_a": sides["arm_a"], "arm_b": sides["arm_b"],
                                  "mutations": probe, "arm_dtypes": (arms[sides["arm_a"]].dtype,
                                                                 arms[sides["arm_b"]].dtype),
                                  **values})
    except InvalidValue as exc:
        raise check.fail(table, f"key {exc.key!r}: {exc.why}") from None


def _sides(check: _Checker, table: str, raw: dict[str, Any], arms: Mapping[str, ArmSpec]
           ) -> dict[str, str]:
    """A comparison's arms (arm_a, arm_b), each one the config defines, as its
    localize_baseline must be."""
    sides: dict[str, str] = {}
    for key in ("arm_a", "arm_b"):
        if key not in raw:
            raise check.fail(table, f"key {key!r}: missing (the name of an arm)")
        arm = check.string(table, key, raw[key])
        if arm not in arms:
            known = ", ".join(arms) or "none defined"
            raise check.fail(table, f"key {key!r}: no arm named {arm!r} (arms: {known})")
        sides[key] = arm
    if "localize_baseline" in raw:
        arm = check.string(table, "localize_baseline", raw["localize_baseline"])
        if arm not in arms:
            known = ", ".join(arms) or "none defined"
            raise check.fail(table, f"key 'localize_baseline': no arm named {arm!r} (arms: "
                                    f"{known})")
    return sides


def _tolerance_alone(check: _Checker, table: str, raw: dict[str, Any]) -> None:
    """`tolerance = "dtype"` takes atol and rtol from the dtype table: neither may be set."""
    if "tolerance" in raw:
        try:
            dtype_mode = tolerance_mode(raw["tolerance"]) is ToleranceMode.DTYPE
        except ValueError:
            dtype_mode = False  # the spec names the bad value
        for key in ("atol", "rtol"):
            if dtype_mode and key in raw:  # 0 too: it would be silently replaced by the table
                raise check.fail(table, f"key 'tolerance': \"dtype\" takes atol and rtol from "
                                        "the dtype table: set either tolerance or atol/rtol, not "
                                        f"both (key {key!r} is set, to {raw[key]!r})")


def _thresholds(check: _Checker, table: str, raw: dict[str, Any], where: tuple[str, Path], *,
                read: bool) -> dict[str, Any]:
    """The values a comparison's thresholds file sets (only its path when it is not `read` or
    not there yet), none of them also set in the table. `where`: the comparison's name and
    the config's folder."""
    name, base = where
    values: dict[str, Any] = {}
    given = check.string(table, "thresholds", raw["thresholds"])
    for key in ("atol", "rtol", "near_tie", "tolerance"):
        if key in raw:
            raise check.fail(table, f"key {key!r}: set by the thresholds file {given!r}; "
                                    "remove one of them")
    file = Path(given) if Path(given).is_absolute() else base / given
    values["thresholds"] = str(file)
    kind = _not_a_file(file)
    if kind is not None:
        raise check.fail(table, f"key 'thresholds': {file} is {kind}, not a thresholds file")
    if read and file.is_file():
        try:
            found = read_thresholds(file)
            gate = raw.get("gate_input")
            found.check_for(file, name, None if gate is None else str(gate))
        except ThresholdError as exc:
            raise check.fail(table, f"key 'thresholds': {exc}") from None
        values.update(atol=found.atol, rtol=found.rtol, near_tie=found.near_tie,
                      threshold_origin=found.origin, calibrated=found.calibrated)
    return values
