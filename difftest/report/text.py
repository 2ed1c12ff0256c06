"""Text from untrusted places (arm stderr, request ids, `vt:` lines) made inert for each output.

An arm's stderr can hold terminal escapes (colours, cursor moves, window titles), control
characters XML 1.0 forbids, and HTML; a request id is whatever the runner printed. Every report
passes such text through one of these before it is written.
"""

from __future__ import annotations

import html
import re

# CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or ST), and the two-byte
# escapes; then what is left of C0/C1 controls.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
                      r"|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; what
# it forbids is named below (the same set as the complement of those ranges, checked over every
# code point, and 10x cheaper to compile at import than the negated ranges)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])")  # links, images, code, emphasis, cells
# `_` opens or closes emphasis only at a word's edge (`agree_a.log` stays as it is)
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What GitHub's markdown turns into a link without any brackets: `scheme://`, `www.`, an email.
# A backslash before the trigger character keeps the text and loses the link.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z])(:)(?=//)|(?<=www)(\.)|(@)")
# Inside an HTML element markdown still parses its text: characters named by reference there.
_MD_ENTITIES = {"[": "&#91;", "]": "&#93;", "*": "&#42;", "_": "&#95;", "\\": "&#92;",
                "`": "&#96;", "|": "&#124;", "~": "&#126;", ":": "&#58;", "@": "&#64;",
                "!": "&#33;"}


def strip_ansi(text: str) -> str:
    """Text without terminal escapes or control characters (newlines and tabs kept)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def xml_safe(text: str) -> str:
    """Text that XML 1.0 can hold: escapes removed, then every character it forbids."""
    return _NOT_XML.sub("", strip_ansi(text))


def md_inline(text: str) -> str:
    """One line of markdown that renders as the text itself: no HTML, no links, no table cells
    split, no emphasis."""
    flat = " ".join(strip_ansi(text).split())
    escaped = _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))
    escaped = _MD_UNDERSCORE.sub(r"\\_", escaped)
    return _AUTOLINK.sub(lambda m: "\\" + m.group(0), escaped)


def md_code(text: str) -> str:
    """An identifier as a markdown code span: nothing inside a code span is markup (no HTML,
    no links); the fence outgrows any backticks inside, and a pipe cannot split a table cell."""
    flat = " ".join(strip_ansi(text).split())
    if any(ch in flat for ch in "<>&"):
        # safe in a GitHub code span, but not in every renderer a CI summary meets
        inner = "".join(_MD_ENTITIES.get(ch, ch) for ch in html.escape(flat))
        return f"<code>{inner}</code>"
    flat = flat.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def md_fence(text: str) -> str:
    """A fenced block that its content cannot close early, whatever backticks it holds."""
    body = strip_ansi(text).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"
