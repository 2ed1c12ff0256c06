"""What an arm's output must show to prove it ran what it claims: `evidence` rules, and the
settings a comparison's `toggle` names. Plain text rules, no numpy: the config loader reads them.

A rule is one of
- `NAME OP VALUE`, OP one of `=`, `!=`, `>`, `>=`, `<`, `<=`: NAME is a setting of the arm's
  effective configuration (its `[spec-config]` line, plus what difftest derives: `lane` from
  the `[dflash-route]` counters, `commit` from the checkout it ran) or a `[dflash-route]`
  counter (summed over the trace's route lines). `=` and `!=` compare as integers when both
  sides are integers, else as text; the ordering operators need integers.
- `line ~ REGEX`: some line of the arm's captured output matches REGEX (Python `re.search`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

LINE_SUBJECT = "line"
_NAME = r"[A-Za-z_][\w/]*"
_RULE_RE = re.compile(rf"\s*({_NAME})\s*(!=|>=|<=|=|>|<|~)\s*(.*?)\s*\Z", re.ASCII | re.DOTALL)
_INT_RE = re.compile(r"[-+]?\d{1,30}\Z")


class Op(StrEnum):
    """How a rule's subject is compared with its value."""

    EQ = "="
    NE = "!="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    MATCH = "~"

    @property
    def ordering(self) -> bool:
        return self in (Op.GT, Op.GE, Op.LT, Op.LE)


class RuleError(ValueError):
    """A rule that does not parse; the config loader adds file, table and key."""


def as_int(text: str) -> int | None:
    """The integer a value spells, or None."""
    return int(text) if _INT_RE.match(text) else None


@dataclass(frozen=True)
class Rule:
    """One parsed evidence rule; `text` is how the config wrote it."""

    text: str
    name: str
    op: Op
    value: str

    def holds(self, seen: str) -> bool:
        """Whether a value the arm showed for `name` satisfies the rule (MATCH is decided by
        the caller, who reads the lines)."""
        a, b = as_int(seen), as_int(self.value)
        if self.op.ordering:
            if a is None or b is None:
                return False
            return {Op.GT: a > b, Op.GE: a >= b, Op.LT: a < b, Op.LE: a <= b}[self.op]
        same = a == b if a is not None and b is not None else seen == self.value
        return same if self.op is Op.EQ else not same

    @property
    def pattern(self) -> re.Pattern[bytes]:
        return re.compile(self.value.encode("utf-8"))


def parse_rule(text: str) -> Rule:
    """A rule from its text; RuleError says what is wrong with it."""
    m = _RULE_RE.match(text)
    if m is None:
        raise RuleError(f"{text!r} is not a rule: write `NAME OP VALUE` (OP one of =, !=, >, "
                        ">=, <, <=; e.g. \"combined > 0\") or `line ~ REGEX`")
    name, op, value = m.group(1), Op(m.group(2)), m.group(3)
    if not value:
        raise RuleError(f"{text!r}: no value after {op.value!r}")
    if op is Op.MATCH:
        if name != LINE_SUBJECT:
            raise RuleError(f"{text!r}: `~` matches output lines: write `line ~ REGEX`")
        try:
            re.compile(value.encode("utf-8"))
        except re.error as exc:
            raise RuleError(f"{text!r}: bad regular expression: {exc}") from None
    elif not re.match(r"[^\s=<>!~]\S*\Z", value):
        raise RuleError(f"{text!r}: the value must be one word, as a setting prints it "
                        f"(got {value!r})")
    elif op.ordering and as_int(value) is None:
        raise RuleError(f"{text!r}: {op.value!r} compares integers, and {value!r} is not one")
    return Rule(text.strip(), name, op, value)


def check_toggle_key(key: str) -> str:
    """A toggle names a setting: the same spelling as a `[spec-config]` key."""
    if not re.match(rf"{_NAME}\Z", key, re.ASCII):
        raise RuleError(f"{key!r} is not a setting name (letters, digits, _ and /, like 'lane')")
    return key
