"""Where a comparison's thresholds come from: the per-dtype tolerance table and the thresholds
file `difftest calibrate` writes. Data only, importable from every stage: the derived near-tie
rule is in difftest.numerics.tolerance, the sentences that say which applied in
difftest.analysis.threshold_notes.

A comparison with `tolerance = "dtype"` takes atol/rtol from the table below for the draft-logit
dtype of the less precise arm. The table is torch.testing's default for `assert_close`
(`torch/testing/_comparison.py`, `_DTYPE_PRECISIONS`, {dtype: (rtol, atol)}): single-op
tolerances, a floor for what a reordering of floats may move, not a bound for whole forwards in
half precision (those are what `difftest calibrate` measures).

Unless `near_tie` is set, a flip is a near-tie when both arms' margins at that row are below
`2 * bound`, where bound is the row's tolerance at arm B's top-1 logit (`atol + rtol * |top-1|`,
raised to the noise floor): two values that each lie within the tolerance of the reference can
swap order only when the reference's top-1/top-2 gap is at most twice that tolerance. With every
tolerance zero (bitwise), no flip is a near-tie.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from difftest.core.proportion import RATE_ALPHA, rate_upper_bound


class Dtype(Enum):
    """A draft-logit dtype, ordered from the most precise to the least."""

    FLOAT64 = "float64"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


# torch.testing.assert_close defaults (torch/testing/_comparison.py, _DTYPE_PRECISIONS),
# as (atol, rtol). Checked against the installed torch by tests/test_thresholds.py.
DTYPE_TOLERANCES: dict[Dtype, tuple[float, float]] = {
    Dtype.FLOAT64: (1e-7, 1e-7),
    Dtype.FLOAT32: (1e-5, 1.3e-6),
    Dtype.FLOAT16: (1e-5, 1e-3),
    Dtype.BFLOAT16: (1e-5, 1.6e-2),
}

# Spellings a config or a runner may use, after lower-casing and dropping a "torch."/"np."
# prefix.
_SPELLINGS: dict[str, Dtype] = {
    "float64": Dtype.FLOAT64, "fp64": Dtype.FLOAT64, "f64": Dtype.FLOAT64, "double": Dtype.FLOAT64,
    "float32": Dtype.FLOAT32, "fp32": Dtype.FLOAT32, "f32": Dtype.FLOAT32, "float": Dtype.FLOAT32,
    "float16": Dtype.FLOAT16, "fp16": Dtype.FLOAT16, "f16": Dtype.FLOAT16, "half": Dtype.FLOAT16,
    "bfloat16": Dtype.BFLOAT16, "bf16": Dtype.BFLOAT16,
}

# `[spec-config]` keys that state the draft logits' dtype, the most specific first.
DTYPE_KEYS: tuple[str, ...] = ("dtype_logits", "dtype_draft", "dtype")


class ToleranceMode(Enum):
    """How a comparison's atol/rtol are set."""

    GIVEN = "given"  # atol/rtol as configured (both zero: bitwise, the default)
    DTYPE = "dtype"  # from DTYPE_TOLERANCES, for the less precise arm's dtype


def parse_dtype(text: str) -> Dtype:
    """A dtype from any usual spelling (`bf16`, `torch.bfloat16`, `float32`); ValueError names
    the accepted ones."""
    key = text.strip().lower().removeprefix("torch.").removeprefix("np.").removeprefix("numpy.")
    try:
        return _SPELLINGS[key]
    except KeyError:
        raise ValueError(f"unknown dtype {text!r} (known: {', '.join(d.value for d in Dtype)}, "
                         "or bf16/fp16/fp32/fp64)") from None


def tolerance_mode(text: object) -> ToleranceMode:
    """The `tolerance` key's value; ValueError for anything else."""
    for mode in ToleranceMode:
        if text == mode.value or text is mode:
            return mode
    raise ValueError(f"must be \"dtype\" (atol/rtol from the arms' dtypes) or \"given\", "
                     f"got {text!r}")


@dataclass(frozen=True)
class ArmDtype:
    """One arm's draft-logit dtype and who stated it."""

    arm: str
    dtype: Dtype
    source: str  # "config" or "[spec-config] KEY (file:line)"


def trace_dtype(values: dict[str, str] | None) -> tuple[Dtype, str] | None:
    """The dtype a `[spec-config]` line states, and the key that stated it (None: none does,
    or the value is no dtype this table knows)."""
    for key in DTYPE_KEYS:
        if values and key in values:
            try:
                return parse_dtype(values[key]), key
            except ValueError:
                return None
    return None


def less_precise(a: ArmDtype, b: ArmDtype) -> ArmDtype:
    """The arm whose dtype has the looser tolerance (A on a tie)."""
    order = list(Dtype)
    return b if order.index(b.dtype) > order.index(a.dtype) else a


@dataclass(frozen=True)
class Source:
    """Where a comparison's atol/rtol came from, as the report says it."""

    atol: float
    rtol: float
    origin: str

    def describe(self) -> str:
        return f"thresholds: atol {self.atol:g}, rtol {self.rtol:g} from {self.origin}"


def credited(values: list[tuple[str, float, str]]) -> str:
    """The report's thresholds sentence, each value credited to where it came from:
    `thresholds: atol 0.6 from the overrides; rtol 0, near_tie 0.004 from FILE (...)`."""
    groups: dict[str, list[str]] = {}
    for key, value, origin in values:
        groups.setdefault(origin, []).append(f"{key} {value:g}")
    return "thresholds: " + "; ".join(f"{', '.join(v)} from {o}" for o, v in groups.items())


def dtype_tolerance(a: ArmDtype, b: ArmDtype) -> Source:
    """atol/rtol for two arms' dtypes: the table's entry for the less precise one."""
    loose = less_precise(a, b)
    atol, rtol = DTYPE_TOLERANCES[loose.dtype]
    return Source(atol, rtol, f"the dtype table ({loose.dtype.value}, arm {loose.arm}'s draft "
                              f"logits, stated by {loose.source}; torch.testing.assert_close "
                              "defaults)")


class ThresholdError(ValueError):
    """A comparison asks for thresholds its arms do not state enough to give."""


def arm_dtype(arm: str, declared: Dtype | None, spec_config: dict[str, str],
              lines: dict[str, int], path: str) -> ArmDtype | None:
    """An arm's draft-logit dtype: the config's statement over its trace's `[spec-config]`."""
    if declared is not None:
        return ArmDtype(arm, declared, f"arms.{arm}.dtype in the config")
    found = trace_dtype(spec_config)
    if found is None:
        return None
    dtype, key = found
    return ArmDtype(arm, dtype, f"[spec-config] {key} ({path}:{lines.get(key, 0)})")


def resolve_tolerance(mode: ToleranceMode, atol: float, rtol: float,
                      arms: tuple[ArmDtype | None, ArmDtype | None],
                      names: tuple[str, str]) -> Source | None:
    """The atol/rtol a comparison judges with and where they came from (None: as configured,
    nothing to say). ThresholdError when `tolerance = "dtype"` and an arm states no dtype:
    the less precise arm cannot be told, and guessing float32 would be bitwise-strict for a
    bfloat16 arm or loose for a float64 one."""
    if mode is ToleranceMode.GIVEN:
        return None
    missing = [n for n, d in zip(names, arms, strict=True) if d is None]
    if missing:
        raise ThresholdError(
            f"tolerance = \"dtype\" needs each arm's draft-logit dtype; {' and '.join(missing)} "
            f"states none (set dtype = \"bfloat16\" etc. on the arm, or print it in the "
            f"[spec-config] line as {DTYPE_KEYS[0]})")
    a, b = arms
    assert a is not None and b is not None
    return dtype_tolerance(a, b)


# -- a thresholds file, as `difftest calibrate` writes it and a comparison references it -------

THRESHOLDS_KEYS = ("atol", "rtol", "near_tie")
PROVENANCE_KEYS = ("comparison", "inputs", "n", "multiplier", "method", "coverage",
                   "confidence", "largest_benign", "largest_benign_margin", "separation",
                   "weakest_probe", "git_sha", "date")


THRESHOLDS_TABLES = ("thresholds", "provenance", "benign", "machine")
BENIGN_RATES = ("near_tie_flips", "above_level")
RATE_KEYS = ("events", "rows", "requests", "effective_rows")
# what a file must record to be checked against the comparison that reads it
REQUIRED_PROVENANCE = ("comparison", "inputs", "separation")
# the benign level: nine benign logit rows in ten stay within it (the 0.9 quantile, method
# "higher", of their differences: at most a tenth of them lie above it)
LEVEL_QUANTILE = 0.9
# A benign rate whose upper bound reaches this cannot be exceeded by a gate's rate in practice
# (its lower bound would have to pass it): such a rate is refused, not judged against. The
# shipped files' largest bound is about a quarter; the line is a choice, about twice it.
DISARMING_BOUND = 0.5


def canonical_input(text: str) -> str:
    """An input as a runner reads it: text that is an integer, by its value ("00", "+0" and "0"
    are one seed, as `int()` reads them), anything else as written."""
    try:
        return str(int(text))
    except ValueError:
        return text


@dataclass(frozen=True)
class BenignRate:
    """A rate the benign pairs showed at calibration: `events` of `rows`, over `requests`
    request clusters, which count as `effective_rows` independent rows (rows over the
    request-clustered design effect, `difftest.numerics.clustered`)."""

    events: int
    rows: int
    requests: int
    effective_rows: float

    @property
    def value(self) -> float:
        return self.events / self.rows if self.rows else 0.0

    @property
    def upper_bound(self) -> float:
        """What a gate's rate must exceed (difftest.analysis.benign)."""
        return rate_upper_bound(self.events, self.rows, self.effective_rows)

    @property
    def disarms(self) -> bool:
        """A benign rate whose upper bound reaches DISARMING_BOUND: a gate's rate test could
        not fail against it (only a rate whose lower bound is above it would)."""
        return self.upper_bound >= DISARMING_BOUND

    def to_json(self) -> dict[str, object]:
        return {"events": self.events, "rows": self.rows, "requests": self.requests,
                "effective_rows": self.effective_rows}

    @classmethod
    def of(cls, where: str, table: object, armed: bool = True) -> BenignRate:
        """From a file's table or a run record; ThresholdError naming `where` and the key
        (`armed`: also when the rate disarms the rate test; a file's reader checks that after
        its more particular rules)."""
        if not isinstance(table, dict):
            raise ThresholdError(f"{where}: must be a table of {', '.join(RATE_KEYS)}")
        out: dict[str, float] = {}
        for key in RATE_KEYS:
            v = table.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ThresholdError(f"{where}: key {key!r}: must be a finite number >= 0, got "
                                     f"{v!r}")
            if key != "effective_rows" and not isinstance(v, int):
                raise ThresholdError(f"{where}: key {key!r}: must be an integer, got {v!r}")
            out[key] = v
        for key in table:
            if key not in RATE_KEYS:
                raise ThresholdError(f"{where}: key {key!r}: unknown key (known: "
                                     f"{', '.join(RATE_KEYS)})")
        rate = cls._measurable(where, out)
        return rate.armed(where) if armed else rate

    @classmethod
    def _measurable(cls, where: str, out: dict[str, float]) -> BenignRate:
        """What calibrate can have measured, or ThresholdError."""
        # what calibrate cannot have measured: a rate over no row, or over no independent one,
        # has the interval [0, 1], which no gate's rate can exceed (it would disarm the test)
        rows = int(out["rows"])
        if rows < 1:
            raise ThresholdError(f"{where}: key 'rows': must be at least 1 (calibrate writes no "
                                 "rate over no row), got 0")
        if not 1 <= out["requests"] <= rows:
            raise ThresholdError(f"{where}: key 'requests': must be between 1 and rows ({rows}), "
                                 f"got {int(out['requests'])}")
        if out["effective_rows"] <= 0:
            raise ThresholdError(f"{where}: key 'effective_rows': must be above 0 (a rate over "
                                 "no independent row bounds nothing), got "
                                 f"{out['effective_rows']!r}")
        if out["events"] > out["rows"] or out["effective_rows"] > out["rows"]:
            raise ThresholdError(f"{where}: events and effective_rows must not exceed rows")
        return cls(int(out["events"]), rows, int(out["requests"]), float(out["effective_rows"]))

    def armed(self, where: str) -> BenignRate:
        """This rate, or ThresholdError naming `where` when it disarms the rate test."""
        if self.disarms:
            raise ThresholdError(f"{where}: {self.events} of {self.rows} rows over "
                                 f"{self.effective_rows:g} effective rows: the benign rate's "
                                 f"{1 - RATE_ALPHA:.0%} upper bound {self.upper_bound:.3g} "
                                 f"reaches {DISARMING_BOUND:g}, so a gate's rate could hardly "
                                 "exceed it (the rate test would be disarmed); recalibrate on "
                                 "more inputs")
        return self


@dataclass(frozen=True)
class Calibrated:
    """What a thresholds file says beyond its three values: the benign pairs' rates at them
    (what a gate's near-tie flips and logit rows are judged against), the per-row logit level
    nine benign rows in ten stayed within, the machine it was measured on, and whether every
    benign sample was zero (a bitwise file: true on that machine)."""

    path: str
    near_tie_flips: BenignRate | None = None
    logit_level: float | None = None
    above_level: BenignRate | None = None
    machine: tuple[tuple[str, str], ...] = ()
    bitwise: bool = False

    def to_json(self) -> dict[str, object]:
        return {"path": self.path,
                "near_tie_flips": (None if self.near_tie_flips is None
                                   else self.near_tie_flips.to_json()),
                "logit_level": self.logit_level,
                "above_level": None if self.above_level is None else self.above_level.to_json(),
                "machine": dict(self.machine), "bitwise": self.bitwise}

    @classmethod
    def of(cls, data: object) -> Calibrated:
        """From `to_json` (a run record); ThresholdError for anything else."""
        if not isinstance(data, dict):
            raise ThresholdError(f"calibrated: must be a table, got {data!r}")
        d: dict[str, Any] = data
        rates = {k: None if d.get(k) is None else BenignRate.of(f"calibrated.{k}", d[k])
                 for k in BENIGN_RATES}
        level = d.get("logit_level")
        if level is not None and (isinstance(level, bool) or not isinstance(level, (int, float))
                                  or not math.isfinite(level) or level < 0):
            raise ThresholdError(f"calibrated: key 'logit_level': must be a finite number >= 0, "
                                 f"got {level!r}")
        machine = d.get("machine") or {}
        if not isinstance(machine, dict):
            raise ThresholdError(f"calibrated: key 'machine': must be a table, got {machine!r}")
        return cls(str(d.get("path", "")), rates["near_tie_flips"],
                   None if level is None else float(level), rates["above_level"],
                   tuple((str(k), str(v)) for k, v in machine.items()), bool(d.get("bitwise")))


@dataclass(frozen=True)
class ThresholdsFile:
    """Calibrated atol/rtol/near_tie, the one-line provenance a report prints, and what the
    provenance says it was calibrated for."""

    atol: float
    rtol: float
    near_tie: float
    origin: str
    comparison: str = ""
    inputs: tuple[str, ...] = ()
    separation: float = math.inf
    calibrated: Calibrated | None = None

    def check_for(self, path: Path, comparison: str, gate_input: str | None) -> None:
        """ThresholdError, naming the file and key, when the file was not calibrated for this
        comparison as this comparison gates: another comparison's, measured on its gate input,
        or thresholds calibrate itself refused (separation below 1)."""
        where = f"{path}: [provenance]"
        if self.comparison != comparison:
            raise ThresholdError(f"{where}: key 'comparison': calibrated for comparison "
                                 f"{self.comparison!r}, not {comparison!r}")
        if gate_input is not None:
            gate = canonical_input(gate_input)
            same = [i for i in self.inputs if canonical_input(i) == gate]
            if same:
                raise ThresholdError(f"{where}: key 'inputs': holds the gate input {gate_input!r}"
                                     f" (as {same[0]!r}): thresholds must be measured on "
                                     "held-out inputs; recalibrate")
        if not self.separation >= 1.0:
            raise ThresholdError(f"{where}: key 'separation': {self.separation:g} < 1: these "
                                 "thresholds cannot tell benign from wrong; recalibrate")


def read_thresholds(path: Path) -> ThresholdsFile:
    """A thresholds file; ThresholdError naming the file and key for anything else."""
    data = _toml(path)
    values = _values(path, data)
    for name in data:
        if name not in THRESHOLDS_TABLES:
            raise ThresholdError(f"{path}: [{name}]: unknown table (known: "
                                 f"{', '.join(THRESHOLDS_TABLES)})")
    prov = _provenance(path, data)
    comparison, inputs, separation = prov["comparison"], prov["inputs"], prov["separation"]
    _check_atol(path, values["atol"], prov)
    said = ", ".join(f"{k} {prov[k]}" for k in ("inputs", "n", "multiplier", "separation",
                                                 "git_sha", "date") if k in prov)
    return ThresholdsFile(values["atol"], values["rtol"], values["near_tie"],
                          f"{path} (calibrated: {said})", comparison,
                          tuple(str(i) for i in inputs), float(separation),
                          _calibrated(path, data, values, prov))


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ThresholdError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdError(f"{path}: TOML syntax error: {exc}") from None


def _values(path: Path, data: dict[str, Any]) -> dict[str, float]:
    """The `[thresholds]` table: atol, rtol and near_tie, each a finite number >= 0."""
    table = data.get("thresholds")
    if not isinstance(table, dict):
        raise ThresholdError(f"{path}: [thresholds]: missing (atol, rtol, near_tie)")
    values: dict[str, float] = {}
    for key in THRESHOLDS_KEYS:
        v = table.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ThresholdError(f"{path}: [thresholds]: key {key!r}: must be a finite number "
                                 f">= 0, got {v!r}")
        values[key] = float(v)
    for key in table:
        if key not in THRESHOLDS_KEYS:
            raise ThresholdError(f"{path}: [thresholds]: key {key!r}: unknown key (known: "
                                 f"{', '.join(THRESHOLDS_KEYS)})")
    return values


def _provenance(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The `[provenance]` table, its keys known, the required ones there and of their types."""
    prov = data.get("provenance")
    if prov is None:
        raise ThresholdError(f"{path}: [provenance]: missing: nothing says what these thresholds "
                             "were calibrated for; run `difftest calibrate` to write them")
    if not isinstance(prov, dict):
        raise ThresholdError(f"{path}: [provenance]: must be a table")
    for key in prov:
        if key not in PROVENANCE_KEYS:
            raise ThresholdError(f"{path}: [provenance]: key {key!r}: unknown key (known: "
                                 f"{', '.join(PROVENANCE_KEYS)})")
    for key in REQUIRED_PROVENANCE:
        if key not in prov:
            raise ThresholdError(f"{path}: [provenance]: key {key!r}: missing")
    _check_required(path, prov)
    return prov


def _check_required(path: Path, prov: dict[str, Any]) -> None:
    """comparison a string, inputs a non-empty list of inputs, separation a number."""
    comparison, inputs, separation = prov["comparison"], prov["inputs"], prov["separation"]
    if not isinstance(comparison, str):
        raise ThresholdError(f"{path}: [provenance]: key 'comparison': must be a string, got "
                             f"{comparison!r}")
    if not isinstance(inputs, list) or not all(
            isinstance(i, (int, str)) and not isinstance(i, bool) for i in inputs):
        raise ThresholdError(f"{path}: [provenance]: key 'inputs': must be a list of inputs, "
                             f"got {inputs!r}")
    if not inputs:
        raise ThresholdError(f"{path}: [provenance]: key 'inputs': empty: thresholds are "
                             "measured on held-out inputs, and nothing says which; run "
                             "`difftest calibrate` to write them")
    if isinstance(separation, bool) or not isinstance(separation, (int, float)) or math.isnan(
            separation):
        raise ThresholdError(f"{path}: [provenance]: key 'separation': must be a number, got "
                             f"{separation!r}")


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else None


def _check_atol(path: Path, atol: float, prov: dict[str, Any]) -> None:
    """atol as calibrate wrote it: its multiplier times the largest benign difference, both
    in [provenance] (a file that records neither is not checked). An atol raised by hand
    excuses what the measurement did not."""
    multiplier, largest = _number(prov.get("multiplier")), _number(prov.get("largest_benign"))
    if multiplier is None or largest is None:
        return
    bound = multiplier * largest
    if not math.isclose(atol, bound, rel_tol=1e-9, abs_tol=0.0):
        raise ThresholdError(f"{path}: [thresholds]: key 'atol': {atol:g} is not the bound "
                             f"calibrate wrote (multiplier {multiplier:g} x largest_benign "
                             f"{largest:g} = {bound:g}): thresholds come from the measurement, "
                             "not a hand edit; recalibrate")


def _logit_level(path: Path, level: object, values: dict[str, float],
                 prov: dict[str, Any]) -> float | None:
    """`[benign]`'s logit_level: a finite number >= 0, never above the largest benign
    difference nor atol (calibrate writes a quantile of the benign differences; a higher level
    would count no row of any arm above it)."""
    if level is None:
        return None
    if isinstance(level, bool) or not isinstance(level, (int, float)) \
            or not math.isfinite(level) or level < 0:
        raise ThresholdError(f"{path}: [benign]: key 'logit_level': must be a finite number >= 0, "
                             f"got {level!r}")
    largest = prov.get("largest_benign")
    cap, said = values["atol"], f"atol {values['atol']:g}"
    if isinstance(largest, (int, float)) and not isinstance(largest, bool) and largest < cap:
        cap, said = float(largest), f"the largest benign difference {largest:g}"
    if level > cap:
        raise ThresholdError(f"{path}: [benign]: key 'logit_level': {level:g} is above {said}"
                             " ([provenance]/[thresholds]): calibrate writes a quantile of "
                             "the benign differences; recalibrate")
    return float(level)


def _check_above(path: Path, above: BenignRate | None, level: float | None) -> None:
    """The rate above the level: only with the level stated, and at most the share of rows
    the level's quantile leaves above it."""
    if above is not None and level is None:
        raise ThresholdError(f"{path}: [benign.above_level]: a rate of rows above a level, and "
                             "[benign] has no key 'logit_level' to say which; recalibrate")
    if above is not None and above.events > (1.0 - LEVEL_QUANTILE) * above.rows:
        raise ThresholdError(f"{path}: [benign.above_level]: {above.events} of {above.rows} rows "
                             f"above the benign level: at most {1.0 - LEVEL_QUANTILE:.0%} are, "
                             f"the level being the benign rows' {LEVEL_QUANTILE:g} quantile; "
                             "recalibrate")


def _calibrated(path: Path, data: dict[str, Any], values: dict[str, float],
                prov: dict[str, Any]) -> Calibrated:
    """The `[benign]` and `[machine]` tables (absent from files written before them)."""
    benign = data.get("benign", {})
    if not isinstance(benign, dict):
        raise ThresholdError(f"{path}: [benign]: must be a table")
    for key in benign:
        if key not in (*BENIGN_RATES, "logit_level"):
            raise ThresholdError(f"{path}: [benign]: key {key!r}: unknown key (known: "
                                 f"{', '.join((*BENIGN_RATES, 'logit_level'))})")
    rates = {k: BenignRate.of(f"{path}: [benign.{k}]", benign[k], armed=False)
             if k in benign else None for k in BENIGN_RATES}
    level = _logit_level(path, benign.get("logit_level"), values, prov)
    _check_above(path, rates["above_level"], level)
    for key, rate in rates.items():
        if rate is not None:
            rate.armed(f"{path}: [benign.{key}]")
    machine = data.get("machine", {})
    if not isinstance(machine, dict) or not all(isinstance(v, str) for v in machine.values()):
        raise ThresholdError(f"{path}: [machine]: must be a table of strings")
    bitwise = (values["atol"] == 0.0 and values["rtol"] == 0.0
               and prov.get("largest_benign", None) == 0.0)
    return Calibrated(str(path), rates["near_tie_flips"], level, rates["above_level"],
                      tuple(machine.items()), bitwise)
