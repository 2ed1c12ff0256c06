"""The run plan: which arms a command runs, each once, and what every arm is to each comparison
the run judges (arm A, arm B, a rerun of A for the noise floor, a mutated B).

`plan_compare`, `plan_check`, `plan_probe` and `plan_noise` make the arms a run adds to the
configured ones, named by `difftest.core.names` (the one module that names arms): the second
run of a self-pair (`p#2`), the reruns of arm A (`a#run2`), the mutated arms (`b+causal-mask`),
the rounds of `--until-decided` (`a#seq2`, `b#seq2`, ...; run while the sequential test has not
decided). Calibrate, localize and a bisect's round make plans of their own kinds, which their
command judges. A plan is written into the run's meta.json before any arm starts, as the run's
one record (`Plan.record`, under `plan`), and `read_run` reads it back, the two records of runs
written before it was one too, so any comparison a run judged can be judged again (`difftest
export RUN --comparison NAME`) without running anything.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.config import (BUILTIN_MUTATIONS, INPUT_TOKEN, ArmSpec, AuditThresholds,
                             ComparisonSpec, Config, InvalidValue)
from difftest.core.errors import InternalError, UsageError
from difftest.core.evidence import Rule, RuleError, parse_rule
from difftest.analysis.floor import reruns
from difftest.core.kinds import ArmSide, DecodingMode, Expect
from difftest.core.limits import MAX_SEQUENTIAL_RUNS
from difftest.core.names import judged_against, pair_name, rerun_name, round_name, second_run

if TYPE_CHECKING:
    from difftest.analysis.sequential import Design

# The version of the `plan` record in meta.json. 2: the run's one record (what the run judged
# beside each arm's role); 1: the kind and roles only, what the run judged under meta.json's
# `extra`; none: `extra` alone. `read_run` reads all three.
PLAN_FORMAT = 2

Evidence = tuple[tuple[Rule, ...], tuple[Rule, ...]]  # arm A's rules, arm B's
NO_EVIDENCE: Evidence = ((), ())


class PlanKind(StrEnum):
    """The command a run was planned for. Calibrate, localize and a bisect's round judge their
    arms on their own: their plans name no comparison, and record what they read back in the
    plan record (`Plan.extra`)."""

    COMPARE = "compare"
    CHECK = "check"
    PROBE = "probe"
    NOISE = "noise"
    CALIBRATE = "calibrate"
    LOCALIZE = "localize"
    BISECT = "bisect"


# the kinds whose command judges what ran itself (no `judge`, no comparison in the plan)
JUDGED_BY_THE_COMMAND = (PlanKind.CALIBRATE, PlanKind.LOCALIZE, PlanKind.BISECT)


class Role(StrEnum):
    """What an arm is to one comparison."""

    A = ArmSide.A.value  # spelt as the side it is
    B = ArmSide.B.value
    RERUN_OF_A = "rerun-of-a"  # runs 2..N of arm A: its A/A noise floor
    MUTATED_B = "mutated-b"  # arm B broken on purpose (a probe)


@dataclass(frozen=True)
class Judged:
    """One comparison a plan judges: its spec with the arms as they run, the rules each arm's
    output must show, the mutation arm B carries (a probe) and arm A's reruns."""

    spec: ComparisonSpec
    evidence: Evidence = NO_EVIDENCE
    mutation: str | None = None
    reruns: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    def roles(self) -> dict[str, Role]:
        out = {self.spec.arm_a: Role.A,
               self.spec.arm_b: Role.MUTATED_B if self.mutation is not None else Role.B}
        out.update({n: Role.RERUN_OF_A for n in self.reruns})
        return out


@dataclass(frozen=True)
class Rounds:
    """`--until-decided`: the sequential test's design, and the rounds that may follow the
    first run (round 2 first), each both arms again under their round's names; `inputs`:
    each round's input, the first run's included (empty: the arms take none, every round
    reruns the same requests). `difftest.flow.run` runs them while the test has not decided.
    `design` is None for a sampled comparison: its distribution instrument, anytime-valid at
    its own alpha, decides (difftest.flow.sequential_runs.SampledRounds)."""

    design: Design | None
    arms: tuple[tuple[ArmSpec, ArmSpec], ...]
    inputs: tuple[str, ...] = ()

    @property
    def max_runs(self) -> int:
        """The most runs of each arm, the first run's included."""
        return len(self.arms) + 1


@dataclass(frozen=True)
class Plan:
    """Every arm a run starts (each once, under a name unique in the run) and every comparison
    it judges. `selected`: the comparisons a check was asked for, or the mutations a probe
    runs; `noise`: the arm and run count of a noise run; `probes`: whether a check judges the
    probes its comparisons require; `launched_jobs`: set on a check, whose arms run capped
    (see `difftest.flow.run.job_limits`), None where every arm starts at once; `jobs`: a
    fixed cap on the arms run at once (a bisect's round); `rounds`: a compare run until the
    sequential test decides; `extra`: what a plan judged by its command records in its
    record (`JUDGED_BY_THE_COMMAND`)."""

    kind: PlanKind
    label: str
    arms: tuple[ArmSpec, ...]
    judged: tuple[Judged, ...]
    audit: AuditThresholds
    config: Path | None = None
    cache: Path | None = None  # the config's [defaults] cache
    selected: tuple[str, ...] = ()
    noise: tuple[str, int] | None = None
    probes: bool = True
    launched_jobs: int | None = None
    rounds: Rounds | None = None
    jobs: int | None = None
    extra: Mapping[str, object] | None = None

    def comparison(self, name: str) -> Judged:
        for j in self.judged:
            if j.name == name:
                return j
        raise KeyError(name)

    def bases(self) -> tuple[Judged, ...]:
        """The comparisons as configured (no mutated arm), in the plan's order."""
        return tuple(j for j in self.judged if j.mutation is None)

    def mutations_of(self, base: Judged) -> tuple[Judged, ...]:
        """The comparisons of `base` against its mutated arms B."""
        return tuple(j for j in self.judged if j.mutation is not None
                     and j.name == judged_against(base.name, j.mutation))

    @property
    def teacher_force(self) -> bool:
        """A compare plan whose arm B runs on arm A's committed stream, after A."""
        return self.kind is PlanKind.COMPARE and self.judged[0].spec.rules.teacher_force

    def record(self) -> dict[str, object]:
        """meta.json's `plan`, the run's one record: its format, its kind, each arm's role per
        comparison, and what `read_run` reads back (`judged`)."""
        judged = self.judged_record()
        clash = sorted({"format", "kind", "roles"} & set(judged))
        if clash:
            raise InternalError(f"a {self.kind.value} plan records {clash} twice")
        return {"format": PLAN_FORMAT, "kind": self.kind.value,
                "roles": {j.name: {arm: role.value for arm, role in j.roles().items()}
                          for j in self.judged}, **judged}

    def judged_record(self) -> dict[str, object]:
        """What the run judged, as `read_run` reads it back: the comparisons (their rules and
        evidence), the audit thresholds, a check's selection and config, a noise run's arm, a
        probe's mutations; or what a command that judges its own arms records (`extra`). The
        shape runs had under `extra` before the plan record held it."""
        if self.kind in JUDGED_BY_THE_COMMAND:
            return dict(self.extra or {})
        audit = asdict(self.audit)
        if self.kind is PlanKind.CHECK:
            return {"check": list(self.selected), "config": str(self.config), "audit": audit,
                    "comparisons": self._comparisons()}
        if self.kind is PlanKind.NOISE:
            assert self.noise is not None
            return {"noise": {"arm": self.noise[0], "runs": self.noise[1]}, "audit": audit,
                    "comparisons": self._comparisons()}
        first = self.judged[0]
        out = spec_meta(first.spec, self.audit, first.evidence)
        if self.kind is PlanKind.PROBE:
            out["probe"] = list(self.selected)
            out["comparisons"] = self._comparisons()
        return out

    def _comparisons(self) -> dict[str, dict[str, object]]:
        out = {j.name: judged_meta(j.spec, j.evidence) for j in self.judged}
        if self.kind is PlanKind.PROBE:  # the baseline as probed: with the mutations run
            base = self.judged[0]
            out[base.name] = judged_meta(base.spec.with_rules(mutations=self.selected), base.evidence)
        return out


def evidence_of(config: Config, spec: ComparisonSpec) -> Evidence:
    """The configured arms' evidence rules (none for an arm the config does not define)."""
    def rules(name: str) -> tuple[Rule, ...]:
        arm = config.arms.get(name)
        return arm.evidence if arm is not None else ()
    return rules(spec.arm_a), rules(spec.arm_b)


def self_pair(spec: ComparisonSpec, taken: Collection[str] = ()) -> ComparisonSpec:
    """A comparison of an arm with itself (a determinism check) runs the arm twice, the second
    time under a name no configured arm has."""
    if spec.arm_a != spec.arm_b:
        return spec
    name, n = second_run(spec.arm_b), 2
    while name in taken:
        n += 1
        name = second_run(spec.arm_b, n)
    return replace(spec, arm_b=name)


def on_gate_input(spec: ComparisonSpec, arm: ArmSpec) -> ArmSpec:
    """The arm on the comparison's gate input (unchanged when it takes no input)."""
    if not arm.takes_input:
        return arm
    if spec.gate_input is None:
        raise UsageError(f"comparison {spec.name}: arm {arm.name} takes {INPUT_TOKEN} in its "
                         "command or env; set gate_input in the comparison")
    return arm.with_input(spec.gate_input)


def arm_pair(config: Config, spec: ComparisonSpec) -> tuple[ArmSpec, ArmSpec]:
    """The two arms a comparison runs, distinct even when it names one arm twice."""
    arm_a, arm_b = (on_gate_input(spec, config.arm(n)) for n in (spec.arm_a, spec.arm_b))
    return arm_a, arm_b.with_changes(name=self_pair(spec, config.arms).arm_b)


def _rerun_names(spec: ComparisonSpec, ran: Collection[str]) -> tuple[str, ...]:
    names = (rerun_name(spec.arm_a, i) for i in range(2, spec.rules.noise_runs + 1))
    return tuple(n for n in names if n in ran)


def mutated(config: Config, judged: Judged, mutation: str) -> Judged:
    """A comparison against arm B broken by `mutation`, named `NAME/MUTATION`; arm B's evidence
    is not asked of a mutated arm."""
    spec = judged.spec
    arm_b = config.mutation(mutation).arm_name(spec.arm_b)
    return Judged(replace(spec, name=judged_against(spec.name, mutation), arm_b=arm_b),
                  (judged.evidence[0], ()), mutation, judged.reruns)


def plan_compare(config: Config, spec: ComparisonSpec, until_decided: int | None = None) -> Plan:
    """Arms A and B of one comparison, and A's reruns when it measures a noise floor. With
    `until_decided` (the most runs of each arm), the rounds that may follow: the sequential
    test then takes the place of the fixed-sample acceptance gate."""
    rounds = None if until_decided is None else plan_rounds(config, spec, until_decided)
    if rounds is not None:
        spec = spec.with_rules(acceptance=None)
    arm_a, arm_b = arm_pair(config, spec)
    evidence = evidence_of(config, spec)
    spec = self_pair(spec, config.arms)
    more = reruns(arm_a, spec.rules.noise_runs, {*config.arms, arm_b.name})
    judged = Judged(spec, evidence, reruns=tuple(a.name for a in more))
    return Plan(PlanKind.COMPARE, spec.name, (arm_a, arm_b, *more), (judged,), config.audit,
                config.path, config.defaults.cache, rounds=rounds)


UNTIL_DECIDED = "--until-decided"
def design_of(spec: ComparisonSpec, max_runs: int) -> Design | None:
    """The sequential test's design from the comparison's acceptance gate (its margin and
    alpha), None for a sampled comparison (its distribution instrument decides); refused
    before anything runs where the comparison cannot be run until decided."""
    from difftest.analysis.sequential import MIN_RUNS, Design

    if spec.rules.teacher_force:
        raise UsageError(f"{UNTIL_DECIDED} reruns both arms on their own: it does not combine "
                         "with teacher forcing")
    sampled = spec.rules.decoding is DecodingMode.SAMPLED
    if not sampled and spec.rules.acceptance is None:
        raise UsageError(f"{UNTIL_DECIDED} tests B's acceptance against A's at a stated margin: "
                         f"give comparison {spec.name} an acceptance gate, e.g. acceptance = "
                         "{ max_drop = 0.05, alpha = 0.01 }")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or not (
            MIN_RUNS <= max_runs <= MAX_SEQUENTIAL_RUNS):
        raise UsageError(f"{UNTIL_DECIDED} must be an integer from {MIN_RUNS} to "
                         f"{MAX_SEQUENTIAL_RUNS} (the most runs of each arm), got {max_runs!r}")
    if sampled:
        return None
    assert spec.rules.acceptance is not None
    return Design(spec.rules.acceptance.max_drop, spec.rules.acceptance.alpha, max_runs)


def round_inputs(spec: ComparisonSpec, arms: tuple[ArmSpec, ArmSpec], rounds: int
                 ) -> list[str] | None:
    """The input of each round (None: the arms take none, every round reruns the same)."""
    if not any(a.takes_input for a in arms):
        return None
    start = spec.gate_input
    try:
        first = int(start) if start is not None else None
    except ValueError:
        first = None
    if first is None:
        raise UsageError(f"comparison {spec.name}: {UNTIL_DECIDED} runs each round on the next "
                         f"input after gate_input, which must then be an integer seed (got "
                         f"{start!r})")
    held = set(spec.calibration_inputs)
    out: list[str] = []
    n = first
    while len(out) < rounds:
        if str(n) not in held:
            out.append(str(n))
        n += 1
    return out


def plan_rounds(config: Config, spec: ComparisonSpec, max_runs: int) -> Rounds:
    """Rounds 2..`max_runs` of `--until-decided`: arms that take an input run each round on the
    next input after the comparison's gate_input (the calibration inputs skipped, held out);
    others rerun the same requests."""
    design = design_of(spec, max_runs)
    base = arm_pair(config, spec)
    raw = (config.arm(spec.arm_a), config.arm(spec.arm_b))
    inputs = round_inputs(spec, raw, max_runs)
    def in_round(b: ArmSpec, arm: ArmSpec, r: int) -> ArmSpec:
        run = arm.with_input(inputs[r - 1]) if inputs and arm.takes_input else b
        return run.with_changes(name=round_name(b.name, r))
    arms = tuple((in_round(base[0], raw[0], r), in_round(base[1], raw[1], r))
                 for r in range(2, max_runs + 1))
    for r, pair in enumerate(arms, start=2):
        for arm in pair:
            if arm.name in config.arms:
                raise UsageError(f"an arm is named {arm.name!r}, the name difftest gives round "
                                 f"{r} of {UNTIL_DECIDED}: rename it to run until decided")
    return Rounds(design, arms, tuple(inputs or ()))


def probe_mutations(spec: ComparisonSpec, mutations: Sequence[str] | None) -> tuple[str, ...]:
    """The mutations a probe runs: those named, else the comparison's `mutations` list, else the
    built-ins (a `differ` comparison has no built-in mutation, only the built-in probe)."""
    default = BUILTIN_MUTATIONS if spec.rules.expect is Expect.SAME else ()
    return tuple(mutations or spec.rules.mutations or default)


def plan_probe(config: Config, spec: ComparisonSpec,
               mutations: Sequence[str] | None = None) -> Plan:
    """A, B, one mutated B per mutation, and A's reruns: the baseline first, then one
    comparison per mutation."""
    names = probe_mutations(spec, mutations)
    arm_a, arm_b = arm_pair(config, spec)
    evidence = evidence_of(config, spec)
    spec = self_pair(spec, config.arms)
    arms = [arm_a, arm_b] + [config.mutation(m).apply(arm_b) for m in names]
    arms += reruns(arm_a, spec.rules.noise_runs, {a.name for a in arms} | set(config.arms))
    base = Judged(spec, evidence, reruns=_rerun_names(spec, {a.name for a in arms}))
    judged = (base, *(mutated(config, base, m) for m in names))
    return Plan(PlanKind.PROBE, f"probe-{spec.name}", tuple(arms), judged, config.audit,
                config.path, config.defaults.cache, selected=names)


def plan_check(config: Config, only: Sequence[str] | None = None, *,
               probes: bool = True) -> Plan:
    """Every configured comparison (or `only` those), each arm run once however many
    comparisons share it, with the mutated arms of the probes they require."""
    names = list(only) if only else list(config.comparisons)
    if not names:
        raise UsageError(f"{config.path} configures no [comparisons.*]: nothing to check")
    arms: dict[str, ArmSpec] = {}
    bases: list[tuple[ComparisonSpec, Evidence]] = []
    for name in names:
        configured = config.comparison(name)
        s = self_pair(configured, config.arms)
        for arm in arm_pair(config, configured):
            arms.setdefault(arm.name, arm)
        if probes:
            for m in s.rules.mutations:
                arm = config.mutation(m).apply(arms[s.arm_b])
                arms.setdefault(arm.name, arm)
        for rerun in reruns(arms[s.arm_a], s.rules.noise_runs, config.arms):
            arms.setdefault(rerun.name, rerun)
        bases.append((s, evidence_of(config, configured)))
    judged: list[Judged] = []
    for s, evidence in bases:
        base = Judged(s, evidence, reruns=_rerun_names(s, arms))
        judged.append(base)
        judged += [mutated(config, base, m) for m in (s.rules.mutations if probes else ())]
    return Plan(PlanKind.CHECK, "check", tuple(arms.values()), tuple(judged), config.audit,
                config.path, config.defaults.cache, selected=tuple(names), probes=probes,
                launched_jobs=config.defaults.launched_jobs)


def plan_noise(config: Config, arm: str, runs: int) -> Plan:
    """One arm run `runs` times; each rerun is judged against the first run, `ARM-vs-ARM#runK`
    (expect same), so a noise run can be exported like any other."""
    from difftest.core.limits import MAX_NOISE_RUNS

    if isinstance(runs, bool) or not isinstance(runs, int) or not 2 <= runs <= MAX_NOISE_RUNS:
        raise UsageError(f"--noise-runs must be an integer from 2 to {MAX_NOISE_RUNS} (reruns "
                         f"compared pairwise), got {runs!r}")
    spec = config.arm(arm)
    if spec.takes_input:
        raise UsageError(f"arm {arm} takes {INPUT_TOKEN} in its command or env; measure its "
                         "floor through a comparison with gate_input and noise_runs")
    more = reruns(spec, runs, config.arms)
    rules = spec.evidence
    judged = tuple(Judged(ComparisonSpec(name=pair_name(arm, r.name), arm_a=arm, arm_b=r.name),
                          (rules, rules)) for r in more)
    return Plan(PlanKind.NOISE, f"noise-{arm}", (spec, *more), judged, config.audit,
                config.path, config.defaults.cache, noise=(arm, runs))


# -- reading a run's record back --------------------------------------------------------------


def comparison_meta(spec: ComparisonSpec) -> dict[str, object]:
    """A comparison as meta.json records it (what `export` reads back)."""
    # meta.json (format 1) records the mutations under their first key, `probe`, in place
    return {RECORDED_AS.get(k, k): v for k, v in spec.echo().items()}


def evidence_meta(evidence: Evidence) -> list[list[str]] | None:
    """Both arms' evidence rules as meta.json records them; None when there are none."""
    return [[r.text for r in rules] for rules in evidence] if any(evidence) else None


def spec_meta(spec: ComparisonSpec, thresholds: AuditThresholds,
              evidence: Evidence = NO_EVIDENCE) -> dict[str, object]:
    """What a run records of its comparison, so that `export` can judge it again alike."""
    meta: dict[str, object] = {"comparison": comparison_meta(spec), "audit": asdict(thresholds)}
    saved = evidence_meta(evidence)
    if saved is not None:
        meta["evidence"] = saved
    return meta


def judged_meta(spec: ComparisonSpec, evidence: Evidence) -> dict[str, object]:
    """One comparison of a run of several as meta.json records it under `comparisons`: its
    table (arms as they ran) and its arms' evidence."""
    entry: dict[str, object] = {"comparison": comparison_meta(spec)}
    saved = evidence_meta(evidence)
    if saved is not None:
        entry["evidence"] = saved
    return entry


# spec fields meta.json records under another key (its format 1 predates the field's name)
RECORDED_AS = {"mutations": "probe"}


def spec_from(raw: Mapping[str, object], where: str) -> ComparisonSpec:
    field = {v: k for k, v in RECORDED_AS.items()}
    given = {field.get(k, k): v for k, v in raw.items()}
    try:
        return ComparisonSpec.of(given)
    except InvalidValue as exc:
        key = RECORDED_AS.get(exc.key, exc.key)  # the key as the record spells it
        raise UsageError(f"{where}: comparison {key}: {exc.why}") from None
    except TypeError as exc:
        raise UsageError(f"{where}: comparison is not readable: {exc}") from None


def thresholds_from(saved: object, where: str, key: str) -> AuditThresholds:
    if saved is None:
        return AuditThresholds()  # a run recorded before it kept its audit thresholds
    if not isinstance(saved, dict):
        raise UsageError(f"{where}: key '{key}.audit' must be a table of audit thresholds, "
                         f"got {saved!r}")
    try:
        return AuditThresholds.from_mapping(saved)
    except InvalidValue as exc:
        raise UsageError(f"{where}: audit threshold {exc.key}: {exc.why}") from None


def evidence_from(saved: object, where: str, key: str) -> Evidence:
    """A recorded comparison's evidence rules (arm A's, arm B's), found under `key`."""
    if saved is None:
        return NO_EVIDENCE
    if (not isinstance(saved, list) or len(saved) != 2
            or not all(isinstance(x, list) and all(isinstance(t, str) for t in x) for x in saved)):
        raise UsageError(f"{where}: key '{key}' must be two lists of rules (arm A's, arm "
                         f"B's), got {saved!r}")
    try:
        return tuple(parse_rule(t) for t in saved[0]), tuple(parse_rule(t) for t in saved[1])
    except RuleError as exc:
        raise UsageError(f"{where}: key '{key}': {exc}") from None


_ABSENT = object()  # a key a record does not hold, told from one it holds as null


@dataclass(frozen=True)
class RecordedRun:
    """What a run's meta.json says it judged: its kind (read from `plan`, or from the shape
    of `extra` in a run recorded before the plan had a format), its audit thresholds, and the
    comparisons by name (raw: each is read, and checked, when it is picked). `record`: what it
    judged (`Plan.judged_record`), found under `key` in meta.json (`plan`, or `extra` in a run
    recorded before the plan record held it)."""

    run_dir: Path
    kind: PlanKind
    audit: AuditThresholds
    record: Mapping[str, object]
    arms: tuple[str, ...]
    where: str
    roles: Mapping[str, Mapping[str, Role]] = field(default_factory=dict)  # the plan's
    key: str = "plan"

    def names(self) -> list[str]:
        recorded = self._recorded()
        if recorded:
            return list(recorded)
        checked = self.record.get("check")
        if checked is None:
            return []
        if not isinstance(checked, list) or not all(isinstance(n, str) for n in checked):
            raise UsageError(f"{self.where}: key '{self.key}.check' must be a list of comparison "
                             f"names, got {checked!r}")
        return list(checked)

    def _recorded(self) -> dict[str, object]:
        """The recorded comparisons by name. A record that is there but unreadable is an error,
        never a reason to judge the run under a default comparison in its place."""
        judged = self.record.get("comparisons")
        if judged is not None and not isinstance(judged, dict):
            raise UsageError(f"{self.where}: key '{self.key}.comparisons' must be a table of "
                             f"comparisons, got {judged!r}")
        recorded: dict[str, object] = dict(judged) if isinstance(judged, dict) else {}
        single = self.record.get("comparison", _ABSENT)
        if isinstance(single, dict) and isinstance(single.get("name"), str):
            recorded.setdefault(str(single["name"]), {"comparison": single,
                                                      "evidence": self.record.get("evidence")})
        elif single is not _ABSENT:
            raise UsageError(f"{self.where}: key '{self.key}.comparison' must be a comparison table "
                             f"with a name, got {single!r}")
        if not recorded and self.kind is PlanKind.NOISE:
            recorded = _noise_comparisons(self.record.get("noise"), self.where)
        return recorded

    def pick(self, comparison: str | None) -> tuple[ComparisonSpec, Evidence]:
        """The comparison the run judged (or, for a run of several, the one named) and its
        arms' evidence; for a check run written before it recorded its comparisons, from the
        config file it names."""
        where, judged, key = self.where, self.record, self.key
        recorded = self._recorded()
        names = self.names()
        single = judged.get("comparison")
        if comparison is None:
            if isinstance(single, dict) and len(names) <= 1:
                return (self._as_planned(spec_from(single, where)),
                        evidence_from(judged.get("evidence"), where, f"{key}.evidence"))
            if len(names) > 1:
                raise UsageError(f"{self.run_dir}: a run of {len(names)} comparisons; name one "
                                 f"with --comparison ({', '.join(names)})")
            if len(names) != 1 and self.kind in JUDGED_BY_THE_COMMAND:
                raise UsageError(f"{self.run_dir}: a {self.kind.value} run: `difftest "
                                 f"{self.kind.value}` judged its arms itself, and it records no "
                                 "comparison to judge again")
            if len(names) != 1:
                # every run difftest judged records its comparison (`export` came with that
                # record): judging the arms under a default comparison in its place could pass
                # a run whose own comparison said otherwise
                raise UsageError(f"{where}: key '{key}.comparison' is missing: the run records "
                                 "no comparison to judge it by (a run of arms difftest did not "
                                 "judge, or a damaged record)")
            comparison = names[0]
        if comparison in recorded:
            entry = recorded[comparison]
            if not isinstance(entry, dict) or not isinstance(entry.get("comparison"), dict):
                raise UsageError(f"{where}: comparison {comparison!r} is not a table")
            spec = self._as_planned(spec_from(entry["comparison"], where))
            table = judged.get("comparisons")  # else the run's one `comparison`, beside it
            in_table = isinstance(table, dict) and comparison in table
            return spec, evidence_from(entry.get("evidence"), where,
                                       f"{key}.comparisons.{comparison}.evidence" if in_table
                                       else f"{key}.evidence")
        if comparison in self.roles or (key == "plan" and comparison in names):
            # a run with a plan record recorded every comparison the plan names
            raise UsageError(f"{where}: key '{key}.comparisons' has no comparison {comparison!r} "
                             "although the run's plan names it: the record is damaged")
        if comparison in names and key == "extra" and isinstance(judged.get("config"), str):
            # a check run written before it recorded its comparisons
            return _spec_from_config(Path(str(judged["config"])), comparison, where)
        known = (f"its comparisons: {', '.join(names)}" if names
                 else "it records no comparison by name")
        raise UsageError(f"{self.run_dir}: no comparison {comparison!r} in this run ({known})")

    def judged(self, spec: ComparisonSpec, evidence: Evidence) -> Judged:
        """The comparison `pick` gave, as the run judged it: a probed mutation's arm B is
        mutated in its role (so a mutation its trace shows is not held against its launch,
        as the run did not)."""
        if self.roles.get(spec.name, {}).get(spec.arm_b) is Role.MUTATED_B:
            # a probed mutation's comparison is named NAME/MUTATION (`mutated`)
            return Judged(spec, evidence, mutation=spec.name.partition("/")[2])
        return Judged(spec, evidence)

    def _as_planned(self, spec: ComparisonSpec) -> ComparisonSpec:
        """`spec`, when the plan's roles name its arms as its arms A and B (a run recorded
        before the plan had roles has none to contradict)."""
        roles = self.roles.get(spec.name)
        if roles is None or spec.arm_a == spec.arm_b:
            return spec  # one arm named twice: refused where it is judged, saying why
        for arm, wanted in ((spec.arm_a, (Role.A,)), (spec.arm_b, (Role.B, Role.MUTATED_B))):
            if roles.get(arm) not in wanted:
                raise UsageError(
                    f"{self.where}: key 'plan.roles.{spec.name}' does not match the comparison "
                    f"it records (arm A {spec.arm_a!r}, arm B {spec.arm_b!r}): "
                    f"{ {a: r.value for a, r in roles.items()} }")
        return spec


def _roles(record: Mapping[str, object], where: str) -> dict[str, dict[str, Role]]:
    """The plan's `roles`, each comparison's checked: arm names to roles it knows, with one
    arm A and one arm B (plain or mutated)."""
    saved = record.get("roles", {})
    if not isinstance(saved, dict):
        raise UsageError(f"{where}: key 'plan.roles' must be a table of comparisons, got "
                         f"{saved!r}")
    out: dict[str, dict[str, Role]] = {}
    for name, table in saved.items():
        key = f"plan.roles.{name}"
        if not isinstance(table, dict):
            raise UsageError(f"{where}: key '{key}' must be a table of arm names to roles, "
                             f"got {table!r}")
        try:
            roles = {str(arm): Role(str(role)) for arm, role in table.items()}
        except ValueError:
            raise UsageError(f"{where}: key '{key}': a role is one of "
                             f"{', '.join(r.value for r in Role)}, got {table!r}") from None
        a = sum(r is Role.A for r in roles.values())
        b = sum(r in (Role.B, Role.MUTATED_B) for r in roles.values())
        if (a, b) != (1, 1):
            raise UsageError(f"{where}: key '{key}': a comparison has one arm A and one arm B "
                             f"(or mutated B), got {table!r}")
        out[str(name)] = roles
    return out


def _noise_comparisons(saved: object, where: str) -> dict[str, object]:
    """A noise run recorded before its comparisons were: each rerun against the first run,
    as `plan_noise` names them."""
    if not isinstance(saved, dict):
        return {}
    arm, runs = saved.get("arm"), saved.get("runs")
    if not isinstance(arm, str) or isinstance(runs, bool) or not isinstance(runs, int):
        raise UsageError(f"{where}: noise must name an arm and a run count, got {saved!r}")
    out: dict[str, object] = {}
    for i in range(2, runs + 1):
        name = pair_name(arm, rerun_name(arm, i))
        out[name] = {"comparison": {"name": name, "arm_a": arm, "arm_b": rerun_name(arm, i)}}
    return out


def _plan_record(meta: Mapping[str, object], where: str) -> dict[str, object] | None:
    """meta.json's `plan`, checked as far as its format (None: a run written before it)."""
    record = meta.get("plan")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise UsageError(f"{where}: key 'plan' must be a table (format, kind, roles), got "
                         f"{record!r}")
    if "format" not in record:
        raise UsageError(f"{where}: key 'plan.format' is missing")
    version = record["format"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UsageError(f"{where}: key 'plan.format' must be a plan format (an integer from "
                         f"1), got {version!r}")
    if version > PLAN_FORMAT:
        raise UsageError(f"{where}: plan format {version} is newer than this difftest reads "
                         f"({PLAN_FORMAT}); upgrade difftest to judge this run")
    return record


def _kind(record: dict[str, object] | None, judged: Mapping[str, object],
          where: str) -> PlanKind:
    if record is not None:
        try:
            return PlanKind(str(record.get("kind")))
        except ValueError:
            raise UsageError(f"{where}: plan kind must be one of "
                             f"{', '.join(k.value for k in PlanKind)}, got "
                             f"{record.get('kind')!r}") from None
    if "check" in judged:
        return PlanKind.CHECK
    if "noise" in judged:
        return PlanKind.NOISE
    if "probe" in judged:
        return PlanKind.PROBE
    return PlanKind.COMPARE


def judged_record(meta: Mapping[str, object],
                  where: str) -> tuple[Mapping[str, object], str]:
    """What a run's meta.json (`where`) says it judged (`Plan.judged_record`), and the key it
    is under: the plan record itself, or `extra` in a run recorded before the plan record held
    it (the oldest runs: meta.json's own top level). A plan record of a format this difftest
    does not read is refused here, for every reader."""
    return _judged(_plan_record(meta, where), meta)


def _judged(record: dict[str, object] | None,
            meta: Mapping[str, object]) -> tuple[Mapping[str, object], str]:
    """`judged_record` of a plan record already checked (`_plan_record`)."""
    if record is not None and isinstance(record["format"], int) and record["format"] >= 2:
        return record, "plan"
    extra = meta.get("extra", meta)
    return (extra if isinstance(extra, dict) else {}), "extra"


def read_run(run_dir: Path, meta: Mapping[str, object], arms: Sequence[str]) -> RecordedRun:
    """A run's record, from its meta.json (as `execute.load_run` read it)."""
    where = str(Path(run_dir) / "meta.json")
    record = _plan_record(meta, where)
    judged, key = _judged(record, meta)
    kind = _kind(record, judged, where)
    roles = _roles(record, where) if record is not None else {}
    if key == "plan" and kind not in JUDGED_BY_THE_COMMAND and "audit" not in judged:
        # a current record always holds its thresholds; the default is for older runs
        raise UsageError(f"{where}: key 'plan.audit' is missing")
    audit = thresholds_from(judged.get("audit"), where, key)
    return RecordedRun(Path(run_dir), kind, audit, judged, tuple(arms), where, roles, key)


def _spec_from_config(path: Path, comparison: str,
                      where: str) -> tuple[ComparisonSpec, Evidence]:
    """A check run's comparison from the config it ran, when meta.json did not record it."""
    from difftest.config import load_config

    if not path.is_file():
        raise UsageError(f"{where}: the run records no comparison table and its config {path} "
                         "is gone: nothing says which arms to compare")
    config = load_config(path)
    configured = config.comparison(comparison)
    return self_pair(configured, config.arms), evidence_of(config, configured)
