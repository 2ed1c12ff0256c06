"""Old spellings kept for one release. Each says so once where it is used, in one sentence
naming the old spelling and the new one, so a user can move before the old one goes."""

from __future__ import annotations

import sys
import warnings

REMOVED_IN = "difftest 0.3"  # the release in which the old spellings go


class DeprecatedSpelling(DeprecationWarning):
    """A Python name of difftest used under its old spelling."""


def sentence(old: str, new: str) -> str:
    """The one line every old spelling gets: what it was, when it goes, what to use."""
    return f"`{old}` is deprecated and goes in {REMOVED_IN}; use `{new}`"


def warn_python(old: str, new: str, stacklevel: int = 3) -> None:
    """A DeprecationWarning at the caller's line (stacklevel 3: the caller of the property or
    function that calls this)."""
    warnings.warn(sentence(old, new), DeprecatedSpelling, stacklevel=stacklevel)


def warn_cli(old: str, new: str) -> None:
    """One line on stderr (never stdout, which holds the report a script may parse)."""
    print(f"difftest: {sentence(old, new)}", file=sys.stderr)
