"""Each arm in its role: an arm runs forced, faulted or mutated only where that is its role.

difftest gives an arm its own variables (`DIFFTEST_FORCE`, `DIFFTEST_FAULT`,
`DIFFTEST_MUTATION`, ...) only through the arm's definition or its role in the plan, and removes
any it inherited from difftest's environment (`difftest.execute.supervise.arm_environment`,
recorded in meta.json as `env_removed`). What the arm's trace shows is checked against that: an
arm whose trace shows forcing (`[spec-forced]` lines, `forced` in `[spec-config]`), a planted
fault or a mutation that nothing in its launch asked for did not run the configuration the
comparison is about, so the comparison is INERT and says which arm showed what.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from difftest.config import ArmSpec
from difftest.core.corpus import MUTATION_ENV
from difftest.core.force import FORCE_ENV, FORCED_TAG
from difftest.core.kinds import VerdictKind
from difftest.flow.switch import CONFIG_SOURCE, Side

FAULT_ENV = "DIFFTEST_FAULT"
_NO_MUTATION = ("", "none")


@dataclass(frozen=True)
class Roles:
    """The arms of one comparison that run in a role: teacher-forced, and mutated (a probe's
    arm B). Every other arm runs free."""

    forced: str | None = None
    mutated: str | None = None


@dataclass(frozen=True)
class RoleCheck:
    """A verdict kind the arms' roles demand (None: judged as usual) and the reasons."""

    kind: VerdictKind | None
    reasons: tuple[str, ...]


def _asked(env: Mapping[str, str], argv: Sequence[str], variable: str, flag: str) -> bool:
    """The arm's launch asks for it: its own environment sets the variable (to something), or
    its argv passes the runner's flag."""
    value = str(env.get(variable, "")).strip()
    if value and not (variable == MUTATION_ENV and value in _NO_MUTATION):
        return True
    return bool(flag) and any(arg == flag or str(arg).startswith(flag + "=") for arg in argv)


def _launch_asks(side: Side, defined: ArmSpec | None, variable: str, flag: str) -> bool:
    """Whether what launched the arm asks for it: the run record of an arm difftest ran, else
    (a capture) the config's definition of the arm by that name. A capture no config arm
    defines asks for nothing: nothing records how it was launched."""
    if side.result is not None:
        return _asked(side.result.env_overrides, side.result.argv, variable, flag)
    if defined is not None:
        return _asked(defined.env, defined.command, variable, flag)
    return False


def _shown(side: Side) -> list[tuple[str, str, str]]:
    """(what, variable, flag) for each role the arm's trace shows."""
    values = side.trace.config.values
    lines = side.trace.config.lines
    out: list[tuple[str, str, str]] = []
    if side.trace.forced_lines:
        out.append((f"{FORCED_TAG} lines (teacher forcing)", FORCE_ENV, ""))
    elif values.get("forced", "") not in ("", "0", "false", "False"):
        out.append((f"forced={values['forced']} ({CONFIG_SOURCE} line {lines.get('forced')})",
                    FORCE_ENV, ""))
    if values.get("fault", "").strip():
        out.append((f"fault={values['fault']} ({CONFIG_SOURCE} line {lines.get('fault')})",
                    FAULT_ENV, "--fault"))
    mutation = values.get("mutation", "").strip()
    if mutation not in _NO_MUTATION:
        out.append((f"mutation={mutation} ({CONFIG_SOURCE} line {lines.get('mutation')})",
                    MUTATION_ENV, "--mutation"))
    return out


def check_roles(sides: Sequence[Side], roles: Roles,
                defined: Mapping[str, ArmSpec] | None = None) -> RoleCheck:
    """INERT when an arm's trace shows forcing, a fault or a mutation that neither its role nor
    its launch asked for; a warning for each arm variable removed from an arm's environment. An
    arm given as a capture (no run record) is held to the config's arm of that name in
    `defined`; a capture no config arm defines asks for no fault nor mutation (a trace showing
    one was not the configuration a plain comparison is about)."""
    inert: list[str] = []
    notes: list[str] = []
    for side in sides:
        result = side.result
        if result is not None and result.env_removed:
            names = ", ".join(str(n) for n in result.env_removed)
            notes.append(f"warning: {side.name}: {names} set in difftest's environment was "
                         "removed from the arm's (an arm gets difftest's variables only from its "
                         "config or its role in the run)")
        for what, variable, flag in _shown(side):
            if variable == FORCE_ENV:
                # only teacher forcing forces an arm: a forced arm judged as a free one is
                # compared on contexts it never drafted from (whatever its env or a run
                # record's teacher_force say)
                asked = side.name == roles.forced
            elif side.name == roles.mutated:
                asked = True  # a mutation is its role, however it was made (env, args, a fault)
            else:
                asked = _launch_asks(side, (defined or {}).get(side.name), variable, flag)
            if not asked:
                how = ("the comparison is not teacher-forced" if variable == FORCE_ENV else
                       f"its launch sets no {variable} nor {flag}" if result is not None else
                       f"it is a capture, and no config arm {side.name!r} sets {variable} "
                       f"nor {flag}")
                inert.append(f"{side.name}: its trace shows {what}, but its role in this "
                             f"comparison runs it free ({how}): it did not run the "
                             "configuration the comparison is about")
    if inert:
        return RoleCheck(VerdictKind.INERT, (*inert, *notes))
    return RoleCheck(None, tuple(notes))
