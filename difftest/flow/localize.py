"""`difftest localize --dumps A B`: the first draft-forward module whose output differs.

Reads two capture folders (difftest.core.activations) of one step, taken on one context (the
teacher-forced rerun makes it one), and names the first module in forward order whose output
differs beyond `atol`, with where the difference sits. The module before it agreed, so its
input did (in a chain of modules; a residual input is the stream an earlier module produced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.core.activations import (BACKGROUND_FACTOR, Localization, LocalizeOutcome,
                                       ModuleDiff, against_background, first_divergence,
                                       read_dumps)
from difftest.core.errors import ExitCode
from difftest.core.kinds import ArmSide, VerdictKind

if TYPE_CHECKING:
    from difftest.analysis.audit import AuditThresholds
    from difftest.config import ArmSpec, Config, ComparisonSpec
    from difftest.core.force import ForceStream
    from difftest.execute.records import ArmResult

LOCALIZE_DIR = "localize"  # RUN_DIR/localize/REQ-POS/
LOCALIZE_JSON = "localize.json"
LOCALIZE_MD = "localize.md"
LOCALIZE_SVG = "modules.svg"  # the per-module figure, beside the captures
LOCALIZE_FORMAT = "difftest-localize/1"


@dataclass(frozen=True)
class LocalizeReport:
    dumps: tuple[Path, Path]
    localization: Localization
    baseline: Path | None = None  # the baseline's capture folder (B0), when localised against one

    @property
    def exit_code(self) -> ExitCode:
        if self.localization.outcome is LocalizeOutcome.BASELINE_IS_B:
            return ExitCode.UNINFORMATIVE
        return ExitCode.DIFFER if self.localization.differs else ExitCode.OK

    def console(self) -> str:
        """What `difftest localize --dumps` prints: the markdown report."""
        return self.render()

    def render(self) -> str:
        loc = self.localization
        if loc.outcome is LocalizeOutcome.BASELINE_IS_B:
            return (f"baseline {self.baseline} and B {self.dumps[1]}: {loc.describe()}")
        if loc.factor is None:
            lines = [loc.describe(), "", "| # | module | shape | max abs diff |",
                     "|---|---|---|---|"]
        else:
            lines = [loc.describe(), "", "| # | module | shape | max abs diff | RMS \\|A - B\\| "
                     "| RMS \\|A - B0\\| | ratio |", "|---|---|---|---|---|---|---|"]
        for i, m in enumerate(loc.modules):
            mark = " **first**" if m is loc.first else ""
            row = (f"| {i} | {m.module}{mark} | {'x'.join(map(str, m.shape))} | "
                   f"{m.max_abs_diff:.3g} |")
            if loc.factor is not None:
                row += f" {m.rms:.3g} | {m.background or 0.0:.3g} | {m.ratio or 0.0:.4g} |"
            lines.append(row)
        return "\n".join(lines)


def checked_atol(atol: float) -> float:
    """A tolerance localize can judge with: a finite number >= 0 (nan or inf would call every
    module equal, a negative one every module different)."""
    import math

    from difftest.core.errors import UsageError

    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not math.isfinite(atol) \
            or atol < 0:
        raise UsageError(f"--atol must be a finite number >= 0, got {atol!r}")
    return float(atol)


def localize_dumps(a: Path, b: Path, atol: float = 0.0,
                   baseline: Path | None = None) -> LocalizeReport:
    """Compare two capture folders module by module, in forward order; with a baseline's
    capture (B0, a known-good arm), each module against its own background |A - B0|."""
    from difftest.core.errors import UsageError

    atol = checked_atol(atol)
    if baseline is not None and Path(baseline).resolve() == Path(b).resolve():
        raise UsageError(f"--baseline {baseline} is arm B's capture ({b}): a baseline must be a "
                         "run that differs from B only by benign numerics (e.g. another dtype), "
                         "not B itself, whose background would excuse every module")
    dumps_a, dumps_b = read_dumps(Path(a)), read_dumps(Path(b))
    if baseline is None:
        return LocalizeReport((Path(a), Path(b)), first_divergence(dumps_a, dumps_b, atol))
    return LocalizeReport((Path(a), Path(b)),
                          against_background(dumps_a, dumps_b, read_dumps(Path(baseline)),
                                             BACKGROUND_FACTOR, atol), Path(baseline))


@dataclass(frozen=True)
class RunLocalization:
    """`difftest localize RUN_DIR`: the step localised, where its captures are, and the answer."""

    run_dir: Path
    at: tuple[str, int]
    # run_dir/localize/REQ-POS (the comparison of the run's report.md), else
    # run_dir/localize/NAME/REQ-POS: capture-a, capture-b, meta.json, localize.md
    folder: Path
    report: LocalizeReport
    comparison: str = ""
    in_report: bool = True  # the comparison the run's report.md and report.html are of
    baseline: str | None = None  # the baseline arm B0 localised against
    verdict: VerdictKind | None = None  # the run's comparison, judged again
    differing: tuple[str, int] | None = None  # its first differing step, judged again

    @property
    def known_difference(self) -> bool:
        """Whether the run's comparison showed a difference for localize to find: DIFFER, or a
        differing step under a verdict other than AGREE (an INERT or uninformative run)."""
        return self.verdict is VerdictKind.DIFFER or (
            self.verdict not in (None, VerdictKind.AGREE) and self.differing is not None)

    @property
    def exit_code(self) -> ExitCode:
        """The localisation's, except that finding no module on a run known to differ has
        localised nothing: uninformative (exit 3), never a pass."""
        code = self.report.exit_code
        return ExitCode.UNINFORMATIVE if code is ExitCode.OK and self.known_difference else code

    @property
    def figure(self) -> Path:
        return self.folder / LOCALIZE_SVG

    def why_not(self) -> str | None:
        """Why every module agrees (or is within its background) although the run's comparison
        was DIFFER: the difference is below the tolerance used, or outside the captured modules
        (None when nothing needs saying)."""
        loc = self.report.localization
        if not self.known_difference or loc.differs \
                or loc.outcome is LocalizeOutcome.BASELINE_IS_B:  # its line says why
            return None
        top = max(loc.modules, key=lambda m: m.max_abs_diff)
        req, pos = self.at
        was = "the run's comparison was DIFFER"
        if self.verdict is not VerdictKind.DIFFER and self.differing is not None:
            assert self.verdict is not None  # known_difference
            was = (f"the run's comparison differed at {self.differing[0]}:{self.differing[1]} "
                   f"(its verdict {self.verdict.value})")
        outside = ("outside the captured modules: the draft forward at "
                   f"{req}:{pos} is not where the comparison's difference comes from (the "
                   "target's verify, another step, or what the runner does after the draft: "
                   "sampling, acceptance)")
        if top.max_abs_diff == 0:
            return (f"{was}, but both captures are bitwise equal at "
                    f"{req}:{pos}: the difference is {outside}")
        if loc.factor is None:
            return (f"{was}: the captured modules differ by at most "
                    f"{top.max_abs_diff:.3g} (at {top.module}), below the tolerance used "
                    f"({loc.atol:g}); rerun with a smaller --atol, or the difference is {outside}")
        return (f"{was}, and every captured module differs from A by "
                f"no more than the baseline {self.baseline} does: the difference is the "
                f"background's (the harmless change), or it is {outside}")

    def render(self) -> str:
        req, pos = self.at
        arms = "both arms" if self.baseline is None else f"A, B and the baseline {self.baseline}"
        why = self.why_not()
        note = f"**Nothing localised (exit 3). Why:** {why}\n\n" if why else ""
        return (f"## Localisation at {req}:{pos}\n\nRun {self.run_dir}; captures in "
                f"{self.folder}; {arms} teacher-forced on A's stream.\n\n{note}"
                f"{self.report.render()}\n")

    def console(self) -> str:
        """What `difftest localize RUN_DIR` prints: the markdown report (localize.md), then
        where the per-module figure is and whether the run's reports have the section."""
        return (f"{self.render()}\nfigure: {self.figure}"
                + ("; the run's report.md and report.html have the section" if self.in_report
                   else ""))

    def to_json(self) -> dict[str, object]:
        loc = self.report.localization
        first = loc.first
        assert loc.outcome is not None
        return {"format": LOCALIZE_FORMAT, "comparison": self.comparison,
                "req": self.at[0], "pos": self.at[1],
                "atol": loc.atol, "rows": list(loc.rows), "outcome": loc.outcome.value,
                "baseline": self.baseline, "factor": loc.factor, "why": self.why_not(),
                "first": None if first is None else first.module,
                "modules": [{"module": m.module, "shape": list(m.shape),
                             # inf (a value non-finite in one arm) is null in JSON, with
                             # `nonfinite` saying why
                             "max_abs_diff": m.max_abs_diff, "nonfinite": m.nonfinite,
                             "rms": m.rms, "background": m.background,
                             "where": None if m.where is None else list(m.where)}
                            for m in loc.modules]}


@dataclass(frozen=True)
class SavedLocalization:
    """A localisation read back from its folder (for the run's reports)."""

    at: tuple[str, int]
    folder: Path
    localization: Localization


def _saved_diff(module: dict[str, object], key: str = "max_abs_diff") -> float:
    """A module's max |diff| (or RMS) as localize.json holds it: null is the infinite
    difference of a value non-finite in one arm (JSON has no inf), and only then."""
    value, odd = module.get(key, 0.0), module.get("nonfinite", 0)
    if value is None and isinstance(odd, int) and odd > 0:
        return float("inf")
    return float(value)  # type: ignore[arg-type]  # a bad value: ValueError/TypeError, skipped


def saved_localizations(run_dir: Path) -> list[SavedLocalization]:
    """Every `localize.json` under RUN_DIR/localize/, in step order; an unreadable one is
    skipped (a report is no place to fail over a side file)."""
    import json

    base = Path(run_dir) / LOCALIZE_DIR
    out: list[SavedLocalization] = []
    if not base.is_dir():
        return out
    for path in sorted(base.glob(f"*/{LOCALIZE_JSON}")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != LOCALIZE_FORMAT:
                continue
            mods = tuple(ModuleDiff(str(m["module"]), tuple(int(x) for x in m["shape"]),
                                    _saved_diff(m), None if m["where"] is None
                                    else tuple(int(x) for x in m["where"]),
                                    int(m.get("nonfinite", 0)), _saved_diff(m, "rms"),
                                    None if m.get("background") is None
                                    else float(m["background"]))
                         for m in data["modules"])
            first = next((m for m in mods if m.module == data["first"]), None)
            outcome = data.get("outcome")
            factor = data.get("factor")
            loc = Localization(mods, first, float(data["atol"]),
                               tuple(int(r) for r in data["rows"]),
                               None if outcome is None else LocalizeOutcome(outcome),
                               None if factor is None else float(factor))
            out.append(SavedLocalization((str(data["req"]), int(data["pos"])), path.parent,
                                         loc))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return sorted(out, key=lambda s: (s.at[0], s.at[1]))


def parse_at(text: str) -> tuple[str, int]:
    """`--at REQ:POS`, its errors naming the option."""
    from difftest.core.errors import UsageError

    req, sep, pos = text.strip().rpartition(":")
    if not sep or not req or not pos.isdigit():
        raise UsageError(f"--at {text!r}: expected REQ:POS, e.g. r0:13")
    return req, int(pos)


def _judged(run_dir: Path, comparison: str | None) -> tuple[VerdictKind, tuple[str, int] | None]:
    """The run's comparison judged again: its verdict, and its first differing (request,
    position): a token flip, else a logit difference beyond the comparison's tolerance."""
    from difftest.flow.rejudge import rejudge_run

    report = rejudge_run(Path(run_dir), comparison=comparison)
    c = report.comparison
    place = None if c is None else (c.first_difference or c.first_logit_difference)
    return report.verdict.kind, None if place is None else (place.req, place.pos)


def first_differing_step(run_dir: Path, comparison: str | None = None) -> tuple[str, int]:
    """The first differing (request, position) of a judged run (of its comparison named, in a
    run of several): a token flip, else a logit difference beyond the comparison's
    tolerance."""
    from difftest.core.errors import UsageError

    verdict, place = _judged(run_dir, comparison)
    if place is None:
        raise UsageError(f"{run_dir}: no differing step to localise (verdict "
                         f"{verdict.value}); name one with --at REQ:POS")
    return place


def baseline_arm(name: str, spec: ComparisonSpec, results: dict[str, ArmResult],
                 config: Config | Path | None) -> ArmSpec:
    """The baseline arm B0 as it is rerun: as the run recorded it when it ran there, else from
    the config (a path, or None: ./difftest.toml, else the packaged default), on the
    comparison's gate input as the run's arms were."""
    from difftest.config import ArmSpec, Config, load_config
    from difftest.core.errors import UsageError
    from difftest.flow.plan import on_gate_input

    if name in (spec.arm_a, spec.arm_b):
        raise UsageError(f"--baseline {name}: the baseline is a third arm, a known-good one that "
                         "differs from A only in the harmless change, not arm A or B")
    res = results.get(name)
    if res is not None:
        return ArmSpec(name=name, command=tuple(res.argv), env=dict(res.env_overrides),
                       cwd=Path(res.cwd) if res.cwd else None)
    cfg = config if isinstance(config, Config) else load_config(config)
    if name not in cfg.arms:
        raise UsageError(f"--baseline {name}: no such arm in this run, nor in {cfg.path} (arms: "
                         f"{', '.join(cfg.arms) or 'none'}); give the config that defines it "
                         "(--config)")
    return on_gate_input(spec, cfg.arm(name))


def _same_run(b: ArmSpec, b0: ArmSpec) -> bool:
    """Whether two reruns run the same thing: command, directory (unset: this one) and
    environment, the capture folder (one per arm) aside."""
    from difftest.core.activations import CAPTURE_DIR_ENV

    def definition(arm: ArmSpec) -> tuple[object, ...]:
        env = {k: v for k, v in arm.env.items() if k != CAPTURE_DIR_ENV}
        return arm.command, (arm.cwd or Path.cwd()).resolve(), env

    return definition(b) == definition(b0)


def foreign_settings(a: Mapping[str, str], b: Mapping[str, str],
                     b0: Mapping[str, str]) -> tuple[str, ...]:
    """The `[spec-config]` settings in which the baseline B0 differs from A where B does not
    carry B0's value: `key (A: x, B: y, B0: z)`. A background differs from A only in the harmless
    change, and B carries that change too (it differs from B0 only in the change under test);
    a setting of B0's own (another seed, model, input, thread count) makes it compute something
    B does not. A setting a trace does not print is absent (`-`)."""
    out = []
    for key in sorted({*a, *b, *b0}):
        x, y, z = a.get(key), b.get(key), b0.get(key)
        if z != x and y != z:
            out.append(f"{key} (A: {x or '-'}, B: {y or '-'}, baseline: {z or '-'})")
    return tuple(out)


def _check_settings(name: str, reruns: Sequence[ArmResult]) -> None:
    """Refuse a baseline whose rerun's `[spec-config]` has settings of its own
    (`foreign_settings`); arms whose traces print no settings (or cannot be read) say nothing
    here, and the captures decide (`difftest.core.activations.departure`)."""
    from difftest.core.errors import DifftestError, UsageError
    from difftest.trace import parse_trace

    try:
        configs = [dict(parse_trace(r.stderr_path).config.values) for r in reruns]
    except DifftestError:
        return
    if not all(configs):
        return
    foreign = foreign_settings(*configs)
    if foreign:
        raise UsageError(
            f"--baseline {name} is no background for B: its [spec-config] differs from A's where "
            f"B's does not: {'; '.join(foreign)} (in {reruns[2].stderr_path}). A background "
            "differs from A only in the harmless change, which B carries too (B differs from it "
            "only in the change under test); a baseline of another seed, model, input or "
            "setting computes something B does not, and would excuse or blame every module")


def _stream_at(a: ArmResult, name: str, step: tuple[str, int]) -> ForceStream:
    """Arm A's committed stream (A named `name`), which must hold a verify step at `step`
    (REQ, POS)."""
    from difftest.core.errors import UsageError
    from difftest.core.force import committed_stream
    from difftest.trace import parse_trace

    req, pos = step
    stream = committed_stream(parse_trace(a.stderr_path))
    steps = stream.requests.get(req)
    if not steps or pos not in {s.pos for s in steps}:
        known = (f"its steps of {req} are at positions {steps[0].pos}..{steps[-1].pos}"
                 if steps else f"it traced no request {req!r} (requests: "
                               f"{', '.join(list(stream.requests)[:8])})")
        raise UsageError(f"--at {req}:{pos}: arm {name} traced no verify step there; "
                         f"{known}")
    return stream


def _capturing(key: str, arm: ArmSpec, step: tuple[str, int], where: Path,
               force: Path) -> ArmSpec:
    """An arm rerun as `KEY-NAME`, capturing its draft forward at `step` into `where`."""
    from difftest.core.activations import CAPTURE_DIR_ENV, CAPTURE_ENV
    from difftest.core.force import FORCE_ENV
    from difftest.core.names import capturing

    req, pos = step
    env = {k: v for k, v in arm.env.items() if k != FORCE_ENV}
    env.update({CAPTURE_ENV: f"{req}:{pos}",
                CAPTURE_DIR_ENV: str(where.resolve()),
                "VT_SPEC_TRACE": arm.env.get("VT_SPEC_TRACE") or "1"})
    # every arm on A's stream: A's replay of its own stream is its free run, and a runner
    # whose forced steps compute on another schedule than its free ones (transformers: one
    # generate call per step) then captures every arm on the same schedule
    env[FORCE_ENV] = str(force.resolve())
    return arm.with_changes(name=capturing(key, arm.name), env=env)


def _captured(arms: list[ArmSpec], folder: Path, where: list[Path],
              audit: AuditThresholds) -> dict[str, ArmResult]:
    """The capturing arms run into `folder` (the one path: a localize plan run there): each
    must succeed and leave its capture (`where`, one per arm)."""
    from difftest.core.activations import CAPTURE_ENV
    from difftest.core.errors import UsageError
    from difftest.flow.overrides import RunOptions
    from difftest.flow.plan import Plan, PlanKind
    from difftest.flow.run import run

    plan = Plan(PlanKind.LOCALIZE, "", tuple(arms), (), audit)
    done = dict(run(plan, RunOptions(progress=False, into=folder)).arms)
    for arm in arms:
        failed = done[arm.name].failure()
        if failed is not None:
            raise UsageError(f"localize: rerun of arm {arm.name}: {failed}")
    for rerun, capture in zip(arms, where, strict=True):
        if not capture.is_dir():
            raise UsageError(f"localize: arm {rerun.name} wrote no capture in {capture}: does "
                             f"its runner implement {CAPTURE_ENV}? (the reference, hf and mlx "
                             "runners do)")
    return done


def localize_run(run_dir: Path, at: tuple[str, int] | None = None,
                 atol: float | None = None, comparison: str | None = None,
                 baseline: str | None = None,
                 config: Config | Path | None = None) -> RunLocalization:
    """Rerun both arms of a run's comparison with capture at one step, teacher-forced on A's
    recorded stream, and compare their draft forwards module by module (beyond `atol`, by
    default the comparison's own). A run of several comparisons (check, probe) needs
    `comparison`, as `export` does (`NAME/MUTATION` for a probed mutation). With a baseline
    (`baseline`, else the comparison's `localize_baseline`; its arm from the run, else from
    `config`, else the config a check run records, else the default one), it is rerun alike
    and each module is judged against its own background."""
    from difftest.core.atomic import write_json_atomic, write_text_atomic
    from difftest.config import ArmSpec
    from difftest.core.errors import UsageError
    from difftest.execute import load_run
    from difftest.core.force import FORCE_NAME, write_force_file
    from difftest.flow.plan import read_run

    run_dir = Path(run_dir)
    if atol is not None:
        atol = checked_atol(atol)
    results, meta = load_run(run_dir)
    recorded = read_run(run_dir, meta, list(results))
    spec, _ = recorded.pick(comparison)  # several comparisons: the one named, as export
    for name in (spec.arm_a, spec.arm_b):
        if name not in results:
            raise UsageError(f"{run_dir}: no arm {name!r} in meta.json")
    own = recorded.record.get("comparison")
    in_report = isinstance(own, dict) and own.get("name") == spec.name
    base_name = baseline or spec.localize_baseline
    if config is None and isinstance(recorded.record.get("config"), str):
        config = Path(str(recorded.record["config"]))  # a check run's config
    base_arm = None if base_name is None else baseline_arm(base_name, spec, results, config)
    verdict, first = _judged(run_dir, spec.name)
    if at is None and first is None:
        raise UsageError(f"{run_dir}: no differing step to localise (verdict "
                         f"{verdict.value}); name one with --at REQ:POS")
    req, pos = at if at is not None else first  # type: ignore[misc]  # one is set
    a, b = results[spec.arm_a], results[spec.arm_b]
    stream = _stream_at(a, spec.arm_a, (req, pos))
    # a comparison the run's report.md is not of keeps its steps apart, under its name (names
    # are checked where the config is read: no separator, no `..`; NAME/MUTATION nests)
    base = run_dir / LOCALIZE_DIR if in_report else run_dir / LOCALIZE_DIR / spec.name
    folder = base / f"{req}-{pos}"
    force = run_dir / FORCE_NAME
    if not force.is_file():
        force = write_force_file(stream, folder / FORCE_NAME)
    # the baseline's capture is capture-b0 (B0); ArmSide names only A and B
    where = {ArmSide.A.value: folder / "capture-a", ArmSide.B.value: folder / "capture-b",
             "b0": folder / "capture-b0"}
    reruns: list[tuple[str, ArmSpec]] = [
        (ArmSide.A.value, ArmSpec(name=a.name, command=tuple(a.argv), env=a.env_overrides,
                                  cwd=Path(a.cwd) if a.cwd else None)),
        (ArmSide.B.value, ArmSpec(name=b.name, command=tuple(b.argv), env=b.env_overrides,
                                  cwd=Path(b.cwd) if b.cwd else None))]
    if base_arm is not None:
        reruns.append(("b0", base_arm))
    arms = [_capturing(key, arm, (req, pos), where[key], force) for key, arm in reruns]
    if base_arm is not None and _same_run(arms[1], arms[2]):
        raise UsageError(f"--baseline {base_name}: it runs what arm B ({spec.arm_b}) runs (the "
                         "same command, environment and directory): a baseline must be a run "
                         "that differs from B only by benign numerics (e.g. another dtype), not "
                         "B under another name, whose background would excuse every module")
    folder.mkdir(parents=True, exist_ok=True)
    done = _captured(arms, folder, [where[key] for key, _ in reruns], recorded.audit)
    if base_arm is not None:
        _check_settings(str(base_name), [done[arm.name] for arm in arms])
    tol = spec.rules.atol if atol is None else atol
    out = RunLocalization(run_dir, (req, pos), folder,
                          localize_dumps(where[ArmSide.A.value], where[ArmSide.B.value], tol,
                                         where["b0"] if base_arm is not None else None),
                          spec.name, in_report, base_name, verdict, first)
    write_text_atomic(folder / LOCALIZE_MD, out.render())
    write_json_atomic(folder / LOCALIZE_JSON, out.to_json())
    return out
