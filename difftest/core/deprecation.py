"""Old spellings kept for one release. Each says so once where it is used, in one sentence
naming the old spelling and the new one, so a user can move before the old one goes."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import TextIO

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


def forwarded(old: str, new: str) -> Callable[[str], object]:
    """A module `__getattr__` for a package kept under its old name: each name comes from the
    package `new` (imported on first use), with a warning at the caller's line."""
    def __getattr__(name: str) -> object:
        value = getattr(importlib.import_module(new), name)  # an unknown name fails as Python says
        warn_python(f"{old}.{name}", f"{new}.{name}")
        return value
    return __getattr__


def warn_cli(old: str, new: str) -> None:
    """One line on stderr (never stdout, which holds the report a script may parse)."""
    print(f"difftest: {sentence(old, new)}", file=sys.stderr)


class DeprecatedKey(FutureWarning):
    """A config key under its old spelling. A FutureWarning, which Python shows by default: the
    config's author, not a developer, is the one to act on it."""


def warn_config(path: object, table: str, old: str, new: str) -> None:
    """Names the file, the table and the key, as a config error does."""
    warnings.warn(f"{path}: [{table}]: key {sentence(old, new)}", DeprecatedKey, stacklevel=3)


def one_line_on_stderr() -> None:
    """Show difftest's own deprecation warnings as one `difftest: ...` line on stderr (the
    command line's form), leaving every other warning to Python's display."""
    shown = warnings.showwarning
    if getattr(shown, "__name__", "") == _ONE_LINE:
        return  # already in place (a display Python restores, after a test, is replaced again)

    def _show_ours(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, (DeprecatedKey, DeprecatedSpelling)):
            print(f"difftest: {message}", file=sys.stderr)
            return
        shown(message, category, filename, lineno, file, line)

    _show_ours.__name__ = _ONE_LINE
    warnings.showwarning = _show_ours


_ONE_LINE = "difftest_one_line_display"  # the name that marks the display installed above
