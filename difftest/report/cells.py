"""Cell escaping shared by every CSV difftest writes."""

from __future__ import annotations

# A spreadsheet evaluates a cell that starts with one of these as a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def spreadsheet_safe(text: str) -> str:
    """Text that a spreadsheet shows as text: a formula-like cell gets a leading quote."""
    if text and text.startswith(FORMULA_START):
        return "'" + text
    return text
