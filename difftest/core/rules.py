"""A comparison's rules: what its arms' drafts must show and how they are judged, in one
record checked once when made (and again by `dataclasses.replace`), whoever made it: the TOML
loader, an override from the command line or the API, or a run record read back from meta.json.

The record's fields are the one list of its rules: the TOML keys a comparison accepts, the JSON
echo in meta.json and the fields an override may set all derive from it (`RULE_KEYS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from difftest.core.errors import UsageError
from difftest.core.evidence import RuleError, check_toggle_key
from difftest.core.kinds import DecodingMode, DraftingKind, Expect
from difftest.core.limits import MAX_MIN_DIFFERING, MAX_NOISE_RUNS
from difftest.core.thresholds import ToleranceMode, tolerance_mode

class InvalidValue(UsageError):
    """A value one of the rules below refuses. Each reader adds where the value came from."""

    def __init__(self, key: str, why: str) -> None:
        self.key = key
        self.why = why
        super().__init__(f"{key}: {why}")


def kind_of(value: Any) -> str:
    """A TOML value's kind as an error message names it."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
             list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__) + (f" ({value!r})" if isinstance(
        value, (bool, int, float, str)) else "")


def finite_number(key: str, value: object, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValue(key, f"must be a number, got {kind_of(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        raise InvalidValue(key, f"must be a finite number >= {minimum:g}, got an integer too "
                                "large for a float") from None
    if not math.isfinite(number):
        raise InvalidValue(key, f"must be a finite number >= {minimum:g}, got {number}")
    if number < minimum:
        raise InvalidValue(key, f"must be >= {minimum:g}, got {number:g}")
    return number


def integer(key: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(key, f"must be an integer, got {kind_of(value)}")
    if value < minimum:
        raise InvalidValue(key, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidValue(key, f"must be <= {maximum}, got {value}")
    return value


def _expectation(key: str, value: object) -> Expect:
    for expect in Expect:
        if value == expect.value:
            return expect
    raise InvalidValue(key, f"must be \"same\" or \"differ\", got {value!r}")


def _decoding(key: str, value: object) -> DecodingMode:
    for mode in DecodingMode:
        if value == mode.value:
            return mode
    raise InvalidValue(key, f"must be \"greedy\" or \"sampled\", got {value!r}")


def _drafting(key: str, value: object) -> DraftingKind | None:
    if value is None or isinstance(value, DraftingKind):
        return value
    for kind in DraftingKind:
        if value == kind.value:
            return kind
    raise InvalidValue(key, f"must be \"block\" or \"sequential\", got {value!r}")



def _toggle(key: str, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None  # not declared
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InvalidValue(key, f"must be a list of setting names, e.g. [\"lane\"], got {kind_of(value)}")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidValue(key, f"item {i} must be a string, got {kind_of(item)}")
        try:
            out.append(check_toggle_key(item))
        except RuleError as exc:
            raise InvalidValue(key, f"item {i}: {exc}") from None
        if item in out[:-1]:
            raise InvalidValue(key, f"item {i}: {item!r} is named twice")
    return tuple(out)



def name_string(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidValue(key, f"must be a string, got {kind_of(value)}")
    return value



_ACCEPTANCE_KEYS = ("max_drop", "alpha")


@dataclass(frozen=True)
class AcceptanceGate:
    """`acceptance = { max_drop = 0.02, alpha = 0.01 }`: B's acceptance at any draft position
    may fall below A's by at most `max_drop` (a fraction of verifies), judged at `alpha`."""

    max_drop: float
    alpha: float = 0.01

    def __post_init__(self) -> None:
        drop = finite_number("acceptance.max_drop", self.max_drop)
        if not 0.0 < drop < 1.0:
            raise InvalidValue("acceptance.max_drop", f"must be in (0, 1), got {drop:g}")
        alpha = finite_number("acceptance.alpha", self.alpha)
        if not 0.0 < alpha < 0.5:
            raise InvalidValue("acceptance.alpha", f"must be in (0, 0.5), got {alpha:g}")
        object.__setattr__(self, "max_drop", drop)
        object.__setattr__(self, "alpha", alpha)


def _acceptance(value: object) -> AcceptanceGate | None:
    if value is None or isinstance(value, AcceptanceGate):
        return value
    if not isinstance(value, dict):
        raise InvalidValue("acceptance", f"must be a table such as {{ max_drop = 0.02, alpha = "
                                         f"0.01 }}, got {kind_of(value)}")
    for key in value:
        if key not in _ACCEPTANCE_KEYS:
            raise InvalidValue("acceptance", f"unknown key {key!r} (known: "
                                             f"{', '.join(_ACCEPTANCE_KEYS)})")
    if "max_drop" not in value:
        raise InvalidValue("acceptance", "missing key 'max_drop' (the largest drop of B's "
                                         "acceptance allowed, e.g. 0.02)")
    return AcceptanceGate(**value)


# field metadata: a rule set in the config only (no command-line flag or API override sets
# it), and where rules came from (not a rule: meta.json records it, no config key sets it)
_CONFIGURED = {"configured": True}
_ORIGIN = {"origin": True}


@dataclass(frozen=True)
class Rules:
    """What a comparison's drafts must show and how they are judged. Every value is checked
    when the record is made: a bad one raises InvalidValue naming its key."""

    expect: Expect = Expect.SAME
    min_differing: int = 1
    # a flip is a near-tie below this margin; None derives it per row from the tolerance
    # (difftest.core.thresholds), which is no near-tie at all when the comparison is bitwise
    near_tie: float | None = None
    atol: float = 0.0
    # numpy's isclose: |a - b| <= atol + rtol * |b|, with arm B as the reference b
    rtol: float = 0.0
    # run arm A this many times and judge B against its A/A noise floor (0: no floor)
    noise_runs: int = 0
    # the known-wrong arms B a probe (and check) runs and must see fail
    # (difftest.config.BUILTIN_MUTATIONS, or the config's [mutations]); `difftest probe
    # --mutation` chooses its own, so no override
    mutations: tuple[str, ...] = field(default=(), metadata=_CONFIGURED)
    # How the engine drafts a block's rows; None: as the traces declare, else block.
    drafting: DraftingKind | None = None
    # The effective settings the two arms must differ in (`lane`): the switch the comparison
    # is about. Arms that report the same value for one of them make the verdict INERT. A claim
    # about the configured arms, so set with them. None: not declared (arms launched
    # differently that report one effective configuration are then INERT); (): declared to
    # have no trace-visible effect.
    toggle: tuple[str, ...] | None = field(default=None, metadata=_CONFIGURED)
    # Run arm B on arm A's committed stream (difftest.core.force): every position is compared.
    teacher_force: bool = False
    # Gate B's acceptance per draft position against A's (None: reported, not gated).
    acceptance: AcceptanceGate | None = field(default=None, metadata=_CONFIGURED)
    # GIVEN: atol/rtol as set; DTYPE: from the per-dtype table for the less precise arm (an
    # override sets atol/rtol themselves, which outrank the table)
    tolerance: ToleranceMode = field(default=ToleranceMode.GIVEN, metadata=_CONFIGURED)
    # "sampled": the arms sample (a temperature), and are compared in distribution over their
    # draws (difftest.analysis.distribution), not token for token. A claim about the configured
    # arms, so set with them.
    decoding: DecodingMode = field(default=DecodingMode.GREEDY, metadata=_CONFIGURED)
    # Not a rule but where rules came from: the rules an override (command line, API argument)
    # set. atol/rtol/near_tie set so win over the config, the dtype table and a thresholds
    # file, and the report credits the override; a drafting set so is reported as the flag's.
    overridden: tuple[str, ...] = field(default=(), metadata=_ORIGIN)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "expect", _expectation("expect", self.expect))
        set_(self, "min_differing", integer("min_differing", self.min_differing, 1,
                                             MAX_MIN_DIFFERING))
        if self.near_tie is not None:
            set_(self, "near_tie", finite_number("near_tie", self.near_tie))
        try:
            set_(self, "tolerance", tolerance_mode(self.tolerance))
        except ValueError as exc:
            raise InvalidValue("tolerance", str(exc)) from None
        set_(self, "atol", finite_number("atol", self.atol))
        set_(self, "rtol", finite_number("rtol", self.rtol))
        set_(self, "noise_runs", integer("noise_runs", self.noise_runs, 0, MAX_NOISE_RUNS))
        if self.noise_runs == 1:
            raise InvalidValue("noise_runs", "must be 0 (no floor) or at least 2: one run has "
                                             "nothing to differ from")
        names: object = self.mutations  # callers outside the loader may pass anything
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise InvalidValue("mutations", f"must be a list of mutation names, got {names!r}")
        set_(self, "mutations", tuple(name_string("mutations", m) for m in names))
        set_(self, "drafting", _drafting("drafting", self.drafting))
        set_(self, "toggle", _toggle("toggle", self.toggle))
        set_(self, "decoding", _decoding("decoding", self.decoding))
        if self.decoding is DecodingMode.SAMPLED and self.teacher_force:
            raise InvalidValue("decoding", "a sampled comparison draws its own tokens: it cannot "
                                       "be teacher-forced")
        if not isinstance(self.teacher_force, bool):
            raise InvalidValue("teacher_force", f"must be true or false, got {self.teacher_force!r}")
        set_(self, "acceptance", _acceptance(self.acceptance))
        if self.acceptance is not None and self.expect is not Expect.SAME:
            raise InvalidValue("acceptance", "gates a comparison that expects \"same\" (a drop "
                                             "is a failure there); this one expects "
                                             f"{self.expect.value!r}")
        given: object = self.overridden
        if isinstance(given, str) or not isinstance(given, (list, tuple)) or any(
                k not in OVERRIDE_KEYS for k in given):
            raise InvalidValue("overridden", f"must list keys among {', '.join(OVERRIDE_KEYS)}, "
                                             f"got {given!r}")
        set_(self, "overridden", tuple(k for k in OVERRIDE_KEYS if k in given))
        if self.tolerance is ToleranceMode.DTYPE and any(
                getattr(self, k) and k not in self.overridden for k in ("atol", "rtol")):
            raise InvalidValue("tolerance", "\"dtype\" takes atol and rtol from the dtype table: "
                                            "set either tolerance or atol/rtol, not both")

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Rules:
        """The rules `values` spell by key (a TOML table, a run record's echo), checked; the
        keys must be the record's own (a caller sorts out any others first)."""
        unknown = sorted(set(values) - set(ECHO_KEYS))
        if unknown:
            raise InvalidValue(unknown[0], "not a rule of a comparison")
        return cls(**values)  # type: ignore[arg-type]  # checked by __post_init__

    def echo(self) -> dict[str, object]:
        """The rules as JSON values, by key (meta.json's record of them, which `of` reads)."""
        data = asdict(self)
        data.update(expect=self.expect.value, mutations=list(self.mutations),
                    toggle=None if self.toggle is None else list(self.toggle),
                    drafting=self.drafting.value if self.drafting is not None else None,
                    tolerance=self.tolerance.value, overridden=list(self.overridden))
        if not self.teacher_force:  # recorded only when asked for: older records read the same
            del data["teacher_force"]
        if self.toggle is None:  # recorded only when declared (older records said [] for both)
            del data["toggle"]
        if self.decoding is DecodingMode.GREEDY:  # likewise
            del data["decoding"]
        else:
            data["decoding"] = self.decoding.value
        return data

    def set_by_override(self, key: str) -> bool:
        """Whether an override set this rule (over the config, a table or a file)."""
        return key in self.overridden


# The rules by name, in the record's order: the keys a comparison table takes besides its arms;
# of them, those an override may set (`Overrides`' fields); and with where they came from, the
# keys of meta.json's echo.
RULE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Rules) if not f.metadata.get("origin"))
OVERRIDE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Rules) if not f.metadata)
ECHO_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Rules))
# The rules of a bare comparison (no config): bitwise, and no flip a near-tie (a near_tie of 0
# admits none; None would derive it from the tolerance, which bitwise is also none).
BARE = Rules(near_tie=0.0)
