"""`difftest localize --dumps A B`: the first draft-forward module whose output differs.

Reads two capture folders (difftest.core.activations) of one step, taken on one context (the
teacher-forced rerun makes it one), and names the first module in forward order whose output
differs beyond `atol`, with where the difference sits. The module before it agreed, so its
input did (in a chain of modules; a residual input is the stream an earlier module produced).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from difftest.core.activations import Localization, ModuleDiff, first_divergence, read_dumps
from difftest.core.errors import ExitCode
from difftest.core.kinds import ArmSide

LOCALIZE_DIR = "localize"  # RUN_DIR/localize/REQ-POS/
LOCALIZE_JSON = "localize.json"
LOCALIZE_MD = "localize.md"
LOCALIZE_FORMAT = "difftest-localize/1"


@dataclass(frozen=True)
class LocalizeReport:
    dumps: tuple[Path, Path]
    localization: Localization

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.localization.first is None else ExitCode.DIFFER

    def render(self) -> str:
        loc = self.localization
        lines = [loc.describe(), "", "| # | module | shape | max abs diff |", "|---|---|---|---|"]
        for i, m in enumerate(loc.modules):
            mark = " **first**" if m is loc.first else ""
            lines.append(f"| {i} | {m.module}{mark} | {'x'.join(map(str, m.shape))} | "
                         f"{m.max_abs_diff:.3g} |")
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


def localize_dumps(a: Path, b: Path, atol: float = 0.0) -> LocalizeReport:
    """Compare two capture folders module by module, in forward order."""
    atol = checked_atol(atol)
    return LocalizeReport((Path(a), Path(b)), first_divergence(read_dumps(Path(a)),
                                                               read_dumps(Path(b)), atol))


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

    @property
    def exit_code(self) -> ExitCode:
        return self.report.exit_code

    def render(self) -> str:
        req, pos = self.at
        return (f"## Localisation at {req}:{pos}\n\nRun {self.run_dir}; captures in "
                f"{self.folder}; both arms teacher-forced on A's stream.\n\n{self.report.render()}\n")

    def to_json(self) -> dict[str, object]:
        loc = self.report.localization
        first = loc.first
        return {"format": LOCALIZE_FORMAT, "comparison": self.comparison,
                "req": self.at[0], "pos": self.at[1],
                "atol": loc.atol, "rows": list(loc.rows),
                "first": None if first is None else first.module,
                "modules": [{"module": m.module, "shape": list(m.shape),
                             # inf (a value non-finite in one arm) is null in JSON, with
                             # `nonfinite` saying why
                             "max_abs_diff": m.max_abs_diff, "nonfinite": m.nonfinite,
                             "where": None if m.where is None else list(m.where)}
                            for m in loc.modules]}


@dataclass(frozen=True)
class SavedLocalization:
    """A localisation read back from its folder (for the run's reports)."""

    at: tuple[str, int]
    folder: Path
    localization: Localization


def _saved_diff(module: dict[str, object]) -> float:
    """A module's max |diff| as localize.json holds it: null is the infinite difference of a
    value non-finite in one arm (JSON has no inf), and only then."""
    value, odd = module["max_abs_diff"], module.get("nonfinite", 0)
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
                                    int(m.get("nonfinite", 0)))
                         for m in data["modules"])
            first = next((m for m in mods if m.module == data["first"]), None)
            loc = Localization(mods, first, float(data["atol"]),
                               tuple(int(r) for r in data["rows"]))
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


def first_differing_step(run_dir: Path, comparison: str | None = None) -> tuple[str, int]:
    """The first differing (request, position) of a judged run (of its comparison named, in a
    run of several): a token flip, else a logit difference beyond the comparison's
    tolerance."""
    from difftest.core.errors import UsageError
    from difftest.flow.rejudge import rejudge_run

    report = rejudge_run(Path(run_dir), comparison=comparison)
    c = report.comparison
    place = None if c is None else (c.first_difference or c.first_logit_difference)
    if place is None:
        raise UsageError(f"{run_dir}: no differing step to localise (verdict "
                         f"{report.verdict.kind.value}); name one with --at REQ:POS")
    return place.req, place.pos


def localize_run(run_dir: Path, at: tuple[str, int] | None = None,
                 atol: float | None = None, comparison: str | None = None) -> RunLocalization:
    """Rerun both arms of a run's comparison with capture at one step, teacher-forced on A's
    recorded stream, and compare their draft forwards module by module (beyond `atol`, by
    default the comparison's own). A run of several comparisons (check, probe) needs
    `comparison`, as `export` does (`NAME/MUTATION` for a probed mutation)."""
    from difftest.core.atomic import write_json_atomic, write_text_atomic
    from difftest.core.activations import CAPTURE_DIR_ENV, CAPTURE_ENV
    from difftest.config import ArmSpec
    from difftest.core.errors import UsageError
    from difftest.execute import load_run, run_arms
    from difftest.core.force import FORCE_ENV, FORCE_NAME, committed_stream, write_force_file
    from difftest.flow.plan import read_run
    from difftest.trace import parse_trace

    run_dir = Path(run_dir)
    if atol is not None:
        atol = checked_atol(atol)
    results, meta = load_run(run_dir)
    recorded = read_run(run_dir, meta, list(results))
    spec, _ = recorded.pick(comparison)  # several comparisons: the one named, as export
    for name in (spec.arm_a, spec.arm_b):
        if name not in results:
            raise UsageError(f"{run_dir}: no arm {name!r} in meta.json")
    own = recorded.extra.get("comparison")
    in_report = isinstance(own, dict) and own.get("name") == spec.name
    req, pos = at if at is not None else first_differing_step(run_dir, spec.name)
    a, b = results[spec.arm_a], results[spec.arm_b]
    stream = committed_stream(parse_trace(a.stderr_path))
    steps = stream.requests.get(req)
    if not steps or pos not in {s.pos for s in steps}:
        known = (f"its steps of {req} are at positions {steps[0].pos}..{steps[-1].pos}"
                 if steps else f"it traced no request {req!r} (requests: "
                               f"{', '.join(list(stream.requests)[:8])})")
        raise UsageError(f"--at {req}:{pos}: arm {spec.arm_a} traced no verify step there; "
                         f"{known}")
    # a comparison the run's report.md is not of keeps its steps apart, under its name (names
    # are checked where the config is read: no separator, no `..`; NAME/MUTATION nests)
    base = run_dir / LOCALIZE_DIR if in_report else run_dir / LOCALIZE_DIR / spec.name
    folder = base / f"{req}-{pos}"
    force = run_dir / FORCE_NAME
    if not force.is_file():
        force = write_force_file(stream, folder / FORCE_NAME)
    where = {side: folder / f"capture-{side}" for side in ArmSide}
    arms = []
    for key, res in ((ArmSide.A, a), (ArmSide.B, b)):
        env = {k: v for k, v in res.env_overrides.items() if k != FORCE_ENV}
        env.update({CAPTURE_ENV: f"{req}:{pos}",
               CAPTURE_DIR_ENV: str(where[key].resolve()),
                    "VT_SPEC_TRACE": res.env_overrides.get("VT_SPEC_TRACE") or "1"})
        # both arms on A's stream: A's replay of its own stream is its free run, and a runner
        # whose forced steps compute on another schedule than its free ones (transformers: one
        # generate call per step) then captures both arms on the same schedule
        env[FORCE_ENV] = str(force.resolve())
        arms.append(ArmSpec(name=f"{key}-{res.name}", command=tuple(res.argv), env=env,
                            cwd=Path(res.cwd) if res.cwd else None))
    folder.mkdir(parents=True, exist_ok=True)
    done = run_arms(arms, folder, progress=False)
    for arm in arms:
        failed = done[arm.name].failure()
        if failed is not None:
            raise UsageError(f"localize: rerun of arm {arm.name}: {failed}")
    for key in ArmSide:
        if not where[key].is_dir():
            raise UsageError(f"localize: arm {key} wrote no capture in {where[key]}: does its "
                             f"runner implement {CAPTURE_ENV}? (the reference and hf runners do)")
    tol = spec.rules.atol if atol is None else atol
    out = RunLocalization(run_dir, (req, pos), folder,
                          localize_dumps(where[ArmSide.A], where[ArmSide.B], tol),
                          spec.name, in_report)
    write_text_atomic(folder / LOCALIZE_MD, out.render())
    write_json_atomic(folder / LOCALIZE_JSON, out.to_json())
    return out
