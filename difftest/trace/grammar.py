"""The VT_SPEC_TRACE line grammar: which tags exist, which fields each carries, and a careful
field-by-field reader that says exactly which field of a malformed line is wrong.

The parser's fast paths (whole-line regexes) accept only what this reader accepts; when a fast
path rejects a line, this reader is run on it to produce the message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from difftest.core.force import FORCED_TAG
from difftest.core.model import DraftingKind

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

TAG_PHASE = b"[spec-phase]"
TAG_PHASE_DEV = b"[spec-phase-dev]"
TAG_PROPOSE = b"[spec-propose]"
TAG_VERIFY = b"[SPECTRACE]"
TAG_LOGITS = b"[spec-logits]"
TAG_ROUTE = b"[dflash-route]"
TAG_DRAFTING = b"[spec-drafting]"
TAG_CONFIG = b"[spec-config]"
TAG_COVERAGE = b"[spec-coverage]"
KNOWN_TAGS = (TAG_PHASE, TAG_PHASE_DEV, TAG_PROPOSE, TAG_VERIFY, TAG_LOGITS, TAG_ROUTE,
              TAG_DRAFTING, TAG_CONFIG, TAG_COVERAGE)
# Other output to the parser, but noted: whether any line holds one, wherever in the line
# (ArmTrace.forced_lines; the lines themselves are read by difftest.core.force, which checks a
# forced arm's commits). The scanner notes the lines it skips; the field reader every line it is
# handed and every request name it interns (the only text of a line the scanner reads itself
# that could hold a tag); the pure reader each block it reads
TAG_FORCED = FORCED_TAG.encode()
NOTED_TAGS = (TAG_FORCED,)


def holds_noted(line: bytes) -> bool:
    """Whether a line holds a noted tag anywhere (NOTED_TAGS)."""
    return any(tag in line for tag in NOTED_TAGS)

NOTICE_PREFIX = b"vllm.cpp: request "
NOTICE_MARK = b"has outgrown the draft speculative context"
ENGINE_ERROR_PREFIX = b"vt: "

# A float as printf's %g / %.2f print it, plus the non-finite spellings.
FLOAT = rb"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
_FLOAT_RE = re.compile(FLOAT + rb"\Z", re.IGNORECASE)
_INT_RE = re.compile(rb"[-+]?\d+\Z")

# Fast path for the bulk of a level-3 trace. Pairs are separated by spaces; the list may or may
# not have the producer's leading and trailing space.
LOGITS_RE = re.compile(
    rb"\[spec-logits\] req=([^\s\x00-\x1f\x7f]+) pos=(\+?\d{1,13}) row=(\+?\d{1,10}) top=\[ *((?:[-+]?\d+:"
    rb"[-+.\deEnaifNAIF]+(?: +|(?=\])))*)\]\s*\Z")
# The value class above admits number-like spellings only; the number reader rejects the ones
# that are not numbers, and the field reader (FLOAT) then names the item.

# One `name=value` field; a value is a bracketed list or a run of non-space characters.
_FIELD_RE = re.compile(rb"\s*([A-Za-z_][\w/]*)=(\[[^\]]*\]|[^\s\[]\S*)")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="backslashreplace")


class FieldError(ValueError):
    """A field that does not parse; the parser adds file and line."""


POS_LIMIT = 2**40  # positions are token counts; alignment keys reserve 40 bits for them
INT64_MAX = 2**63 - 1


MAX_INT_DIGITS = 100  # far past int64; longer digit runs are refused without being read


def _bounded_int(raw: bytes) -> int | None:
    """int(raw) for an integer spelling of at most MAX_INT_DIGITS digits, else None (so that
    no digit run, however long, reaches int())."""
    digits = len(raw) - (raw[:1] in (b"-", b"+"))
    return int(raw) if digits <= MAX_INT_DIGITS else None


def _shown(raw: bytes) -> str:
    return repr(_text(raw)) if len(raw) <= 40 else f"{_text(raw[:20])!r}... ({len(raw)} characters)"


def read_int(name: str, raw: bytes, *, int32: bool = False, minimum: int | None = None,
             maximum: int | None = None) -> int:
    if not _INT_RE.match(raw):
        raise FieldError(f"field {name}: expected an integer, got {_shown(raw)}")
    value = _bounded_int(raw)
    if value is None:
        raise FieldError(f"field {name}: an integer of {len(raw)} characters is out of range")
    if int32 and not INT32_MIN <= value <= INT32_MAX:
        raise FieldError(f"field {name}: {value} is outside int32")
    if minimum is not None and value < minimum:
        raise FieldError(f"field {name}: expected at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise FieldError(f"field {name}: expected at most {maximum}, got {value}")
    return value


def read_ms(name: str, raw: bytes) -> float:
    body = raw[:-2] if raw.endswith(b"ms") else None
    if body is None or not _FLOAT_RE.match(body):
        raise FieldError(f"field {name}: expected milliseconds like '0.17ms', got {_text(raw)!r}")
    return float(body)


_ID_LIST_RE = re.compile(rb"\[\s*(?:[-+]?\d{1,20}(?:\s+|(?=\])))*\]\Z")


def read_id_list(name: str, raw: bytes) -> list[int]:
    if _ID_LIST_RE.match(raw):  # the common case, checked in one regex call
        ids = list(map(int, raw[1:-1].split()))
        if not ids or (INT32_MIN <= min(ids) and max(ids) <= INT32_MAX):
            return ids
    if not (raw.startswith(b"[") and raw.endswith(b"]")):
        raise FieldError(f"field {name}: expected a bracketed id list, got {_shown(raw)}")
    for n, item in enumerate(raw[1:-1].split(), start=1):
        if not _INT_RE.match(item):
            raise FieldError(f"field {name}: item {n}: expected an integer id, got {_shown(item)}")
        value = _bounded_int(item)
        if value is None:
            raise FieldError(f"field {name}: item {n}: an id of {len(item)} characters is "
                             "outside int32")
        if not INT32_MIN <= value <= INT32_MAX:
            raise FieldError(f"field {name}: item {n}: {value} is outside int32")
    raise FieldError(f"field {name}: expected a list of int32 ids, got {_text(raw)!r}")


def read_top_list(name: str, raw: bytes) -> list[tuple[int, float]]:
    if not (raw.startswith(b"[") and raw.endswith(b"]")):
        raise FieldError(f"field {name}: expected a bracketed id:logit list, got {_text(raw)!r}")
    pairs: list[tuple[int, float]] = []
    for n, item in enumerate(raw[1:-1].split(), start=1):
        tid, sep, val = item.partition(b":")
        if not sep or not _INT_RE.match(tid) or not _FLOAT_RE.match(val):
            raise FieldError(
                f"field {name}: item {n}: expected 'id:logit', got {_shown(item)}")
        value = _bounded_int(tid)
        if value is None or not INT32_MIN <= value <= INT32_MAX:
            shown = value if value is not None else f"of {len(tid)} characters"
            raise FieldError(f"field {name}: item {n}: id {shown} is outside int32")
        pairs.append((value, float(val)))
    return pairs


def float_item(raw: bytes) -> float | None:
    """A top-list value as the field reader reads it (`float()` of the text), or None when the
    text is not a number it accepts."""
    return float(raw) if _FLOAT_RE.match(raw) else None


def sig_digits(text: bytes) -> int:
    """Significant mantissa digits of one printed number: its mantissa's digits from the first
    non-zero one (`12.3457` and `1.23457e+01` -> 6, `0.0025` -> 2, `120` -> 3); an all-zero
    mantissa counts 1 and a non-finite spelling 0. The reference for the vectorised counters."""
    mantissa = text.lower().split(b"e", 1)[0].lstrip(b"+-").replace(b".", b"")
    if not mantissa.isdigit():
        return 0  # nan, inf
    return max(len(mantissa.lstrip(b"0")), 1)


_CONTROL_RE = re.compile(rb"[\x00-\x1f\x7f]")


def read_str(name: str, raw: bytes) -> str:
    if _CONTROL_RE.search(raw):
        raise FieldError(f"field {name}: control character in {_text(raw)!r}")
    return _text(raw)


def read_drafting_kind(name: str, raw: bytes) -> DraftingKind:
    try:
        return DraftingKind(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        kinds = ", ".join(k.value for k in DraftingKind)
        raise FieldError(f"field {name}: expected one of {kinds}, got {_text(raw)!r}") from None


Reader = Callable[[str, bytes], object]


def _pos(name: str, raw: bytes) -> int:
    return read_int(name, raw, minimum=0, maximum=POS_LIMIT - 1)


def _int32(name: str, raw: bytes) -> int:
    return read_int(name, raw, int32=True)


def _count(name: str, raw: bytes) -> int:
    return read_int(name, raw, int32=True, minimum=0)


def _count64(name: str, raw: bytes) -> int:
    return read_int(name, raw, minimum=0, maximum=INT64_MAX)


SCHEMAS: dict[bytes, tuple[tuple[str, Reader], ...]] = {
    TAG_VERIFY: (("req", read_str), ("pos", _pos), ("k", _count), ("ns", _count),
                 ("acc", _count), ("draft", read_id_list), ("emit", read_id_list)),
    TAG_PROPOSE: (("rows", _count), ("nqpr", _count), ("drafts/row", _count),
                  ("first", read_id_list)),
    TAG_PHASE: (("pre", read_ms), ("backbone", read_ms), ("sample", read_ms), ("logits", _count64)),
    TAG_PHASE_DEV: (("pre", read_ms), ("fwd", read_ms), ("select", read_ms), ("walk", read_ms)),
    TAG_LOGITS: (("req", read_str), ("pos", _pos), ("row", _count), ("top", read_top_list)),
    TAG_DRAFTING: (("kind", read_drafting_kind),),
}

_NO_PROPOSE_RE = re.compile(rb"NO proposing rows this step \(num_reqs=([^)\s]*)\)\Z")


@dataclass
class NoPropose:
    num_reqs: int


def split_fields(tag: bytes, body: bytes) -> list[tuple[str, bytes]]:
    """`name=value` pairs of a line body, in order; anything between or after them is an error."""
    fields: list[tuple[str, bytes]] = []
    at = 0
    while at < len(body):
        m = _FIELD_RE.match(body, at)
        if m is None:
            rest = body[at:].strip()
            if not rest:
                break
            raise FieldError(f"{_text(tag)} unexpected text {_text(rest[:40])!r}")
        fields.append((_text(m.group(1)), m.group(2)))
        at = m.end()
    return fields


# The producer's own spelling of the common lines, read with one regex each; a body in any
# other spelling (or with a value these do not bound) goes through the schema below, which
# gives the same values or names the fault. Integers here are short enough to be in range.
_NAME = rb"([^\s\[\x00-\x1f\x7f][^\s\x00-\x1f\x7f]*)"
_MS = rb"(\d{1,15}\.\d{1,15})ms"
_CANONICAL: dict[bytes, re.Pattern[bytes]] = {
    TAG_VERIFY: re.compile(rb" req=" + _NAME + rb" pos=(\d{1,12}) k=(\d{1,9}) ns=(\d{1,9}) "
                           rb"acc=(\d{1,9}) draft=(\[[\d ]*\]) emit=(\[[\d ]*\])\Z"),
    TAG_PROPOSE: re.compile(rb" rows=(\d{1,9}) nqpr=(\d{1,9}) drafts/row=(\d{1,9}) "
                            rb"first=(\[[\d ]*\])\Z"),
    TAG_PHASE: re.compile(rb" pre=" + _MS + rb" backbone=" + _MS + rb" sample=" + _MS
                          + rb" logits=(\d{1,18})\Z"),
    TAG_PHASE_DEV: re.compile(rb" pre=" + _MS + rb" fwd=" + _MS + rb" select=" + _MS
                              + rb" walk=" + _MS + rb"\Z"),
}


def _plain_ids(raw: bytes) -> list[int]:
    """A bracketed list of unsigned digit runs (the canonical pattern checked that) as int32
    ids; FieldError for an id out of range, which the schema then names."""
    items = raw[1:-1].split()
    if items and max(map(len, items)) > 10:
        raise FieldError("long id")
    ids = list(map(int, items))
    if ids and max(ids) > INT32_MAX:
        raise FieldError("id out of range")
    return ids


_CANONICAL_READ: dict[bytes, tuple[Callable[[bytes], object], ...]] = {
    TAG_VERIFY: (_text, int, int, int, int, _plain_ids, _plain_ids),
    TAG_PROPOSE: (int, int, int, _plain_ids),
    TAG_PHASE: (float, float, float, int),
    TAG_PHASE_DEV: (float, float, float, float),
}


def _read_canonical(tag: bytes, body: bytes) -> dict[str, object] | None:
    pattern = _CANONICAL.get(tag)
    m = pattern.match(body) if pattern is not None else None
    if m is None:
        return None
    try:
        return {name: read(raw) for (name, _), read, raw in
                zip(SCHEMAS[tag], _CANONICAL_READ[tag], m.groups(), strict=True)}
    except FieldError:  # an id out of int32: the schema names it
        return None


def read_fields(tag: bytes, body: bytes) -> dict[str, object] | NoPropose:
    """Read a tagged line's body by its schema, or raise FieldError saying what is wrong."""
    canonical = _read_canonical(tag, body)
    if canonical is not None:
        return canonical
    if tag == TAG_PROPOSE and body.lstrip().startswith(b"NO "):
        return _read_no_propose(body)
    if tag == TAG_ROUTE:
        return read_route(body)
    if tag == TAG_CONFIG:
        return read_config(body)
    if tag == TAG_COVERAGE:
        return read_coverage(body)
    return _read_by_schema(tag, body)


def _read_no_propose(body: bytes) -> NoPropose:
    """`[spec-propose] NO proposing rows this step (num_reqs=N)`: a step that drafted nothing
    has a sentence of its own, not the propose schema's fields."""
    m = _NO_PROPOSE_RE.match(body.strip())
    if m is None:
        raise FieldError("[spec-propose] expected 'NO proposing rows this step (num_reqs=N)'")
    try:
        return NoPropose(_count("num_reqs", m.group(1)))
    except FieldError as exc:
        raise FieldError(f"[spec-propose] {exc}") from None


def _read_by_schema(tag: bytes, body: bytes) -> dict[str, object]:
    """A body the canonical pattern refused, read field by field against the tag's schema, so
    the error names the first field that is missing, misnamed, unreadable or extra."""
    schema = SCHEMAS[tag]
    fields = split_fields(tag, body)
    out: dict[str, object] = {}
    for i, (name, reader) in enumerate(schema):
        if i >= len(fields):
            raise FieldError(f"{_text(tag)} missing field {name!r}")
        got, raw = fields[i]
        if got != name:
            raise FieldError(f"{_text(tag)} expected field {name!r}, got {got!r}")
        try:
            out[name] = reader(name, raw)
        except FieldError as exc:
            raise FieldError(f"{_text(tag)} {exc}") from None
    if len(fields) > len(schema):
        extra = fields[len(schema)][0]
        raise FieldError(f"{_text(tag)} unexpected field {extra!r}")
    return out


def read_route(body: bytes) -> dict[str, object]:
    """`[dflash-route]` carries counters whose set may grow; every value must be an integer."""
    counters: dict[str, int] = {}
    for name, raw in split_fields(TAG_ROUTE, body):
        try:
            counters[name] = read_int(name, raw)
        except FieldError as exc:
            raise FieldError(f"[dflash-route] {exc}") from None
    if not counters:
        raise FieldError("[dflash-route] expected counters like 'paged_seam=N'")
    return {"counters": counters}


_CONFIG_VALUE_RE = re.compile(rb"[^\s\x00-\x1f\x7f]+\Z")


def read_config(body: bytes) -> dict[str, object]:
    """`[spec-config]`: the runner's effective configuration, `key=value` pairs whose set is the
    runner's to choose. A value is one printable word; a key given twice is an error (which one
    did the runner apply?)."""
    values: dict[str, str] = {}
    for name, raw in split_fields(TAG_CONFIG, body):
        if not _CONFIG_VALUE_RE.match(raw):
            raise FieldError(f"[spec-config] field {name}: expected one printable word, got "
                             f"{_shown(raw)}")
        if name in values:
            raise FieldError(f"[spec-config] field {name}: given twice in one line")
        values[name] = _text(raw)
    if not values:
        raise FieldError("[spec-config] expected settings like 'lane=paged'")
    return {"values": values}


_WIDTH_RE = re.compile(rb"(\d{1,9}):(\d{1,18})\Z")


def read_coverage(body: bytes) -> dict[str, object]:
    """`[spec-coverage]`: what state a run exercised, counters whose set may grow. Every value
    is an integer >= 0 except `widths`, `W:N,...` (verify width: steps) or `-` for none."""
    counts: dict[str, int] = {}
    widths: dict[int, int] = {}
    seen: set[str] = set()
    for name, raw in split_fields(TAG_COVERAGE, body):
        if name in seen:
            raise FieldError(f"[spec-coverage] field {name}: given twice in one line")
        seen.add(name)
        if name == "widths":
            for item in ([] if raw == b"-" else raw.split(b",")):
                m = _WIDTH_RE.match(item)
                if m is None:
                    raise FieldError(f"[spec-coverage] field widths: expected W:N,... or -, "
                                     f"got {_shown(raw)}")
                if int(m.group(1)) < 1:
                    raise FieldError("[spec-coverage] field widths: a verify's width is at least "
                                     f"1 (its anchor), got {_shown(item)}")
                widths[int(m.group(1))] = widths.get(int(m.group(1)), 0) + int(m.group(2))
            continue
        try:
            counts[name] = _count(name, raw)
        except FieldError as exc:
            raise FieldError(f"[spec-coverage] {exc}") from None
    if not seen:
        raise FieldError("[spec-coverage] expected counters like 'page_cross=N'")
    return {"counts": counts, "widths": tuple(sorted(widths.items()))}


# What may stand before a misplaced notice or engine-error prefix: indentation, and the task
# label `srun -l` puts on every line (`0: `).
_LEADER_RE = re.compile(rb"[ \t]*(?:\d+:[ \t]*)?")
LEADER_START = (b" ", b"\t", *(bytes([c]) for c in b"0123456789"))

# The line prefixes launchers and loggers put before what a runner prints, recognised and
# stripped (any number, in any order) before a tag or an engine error is looked for:
#   `0: `, ` 12: `                 srun -l (the task number)
#   `[rank0]: `                    torchrun / torch.distributed
#   `2026-12-03 16:20:01 `         an ISO 8601 timestamp (`T` or space, fractions, zone)
#   `[2026-12-03 16:20:01] `       the same in brackets
#   `INFO vllm: `, `ERROR:root:`   a logger's level and name
#   `ERROR 12-03 16:20:01 [engine.py:42] `   vLLM's logger (level, date, time, source line)
# Anything else before a tag or `vt: ` is unknown: a finding (MISPLACED_TAG), never noise.
_LEVELS = rb"(?:DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_ISO = rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
KNOWN_PREFIX = re.compile(
    rb"(?:[ \t]*\d{1,6}:[ \t]?"
    rb"|\[rank\d{1,6}\]:[ \t]?"
    rb"|" + _ISO + rb"[ \t]+|\[" + _ISO + rb"\][ \t]*"
    rb"|" + _LEVELS + rb" \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})? \[[\w./-]{1,200}:\d{1,9}\] ?"
    rb"|" + _LEVELS + rb"(?: [\w.-]{1,100}: ?|:[\w.-]{1,100}: ?))")
MAX_PREFIXES = 8  # stripped one after another at most; a line is not a puzzle


def strip_prefixes(line: bytes, extra: re.Pattern[bytes] | None = None) -> bytes:
    """`line` without the known prefixes (and the arm's own `extra`) at its start."""
    for _ in range(MAX_PREFIXES):
        m = extra.match(line) if extra is not None else None
        if m is None or m.end() == 0:
            m = KNOWN_PREFIX.match(line)
        if m is None or m.end() == 0:
            break
        line = line[m.end():]
    return line


def holds_marker(line: bytes) -> bool:
    """A line with an engine-error or notice prefix anywhere: both readers hand such a line to
    the field reader, which strips known prefixes or reports an unknown one."""
    return ENGINE_ERROR_PREFIX in line or NOTICE_PREFIX in line


def may_be_misplaced(line: bytes) -> bool:
    """A cheap first look: only a line holding a `[` or a marker, or starting with indentation
    or a digit, can be `misplaced` (both readers filter with it before calling `misplaced`)."""
    return b"[" in line or line[:1] in LEADER_START or holds_marker(line)


def misplaced(line: bytes) -> bytes | None:
    """The known tag, notice or engine-error prefix a line holds other than at its start, once
    known prefixes are stripped (`node7| [SPECTRACE] ...`, an indented `  vt: ...`, two
    processes' writes run together), or None. Such a line is not read: the stream has a hole
    there."""
    for tag in KNOWN_TAGS:
        if line.find(tag, 1) >= 0:
            return tag
    lead = _LEADER_RE.match(line)
    start = lead.end() if lead is not None else 0
    if start:
        rest = line[start:]
        if rest.startswith(ENGINE_ERROR_PREFIX):
            return ENGINE_ERROR_PREFIX
        if rest.startswith(NOTICE_PREFIX) and NOTICE_MARK in rest:
            return NOTICE_PREFIX
    at = line.find(ENGINE_ERROR_PREFIX, 1)
    while at > 0:
        if not line[at - 1:at].isalnum():  # `x vt: ...`, `|vt: ...`; not `dvt: 3`
            return ENGINE_ERROR_PREFIX
        at = line.find(ENGINE_ERROR_PREFIX, at + 1)
    at = line.find(NOTICE_PREFIX, 1)
    if at > 0 and NOTICE_MARK in line:
        return NOTICE_PREFIX
    return None


def tag_of(line: bytes) -> bytes | None:
    """The known tag a line starts with, if any."""
    if not line.startswith(b"["):
        return None
    end = line.find(b"]")
    if end < 0:
        return None
    tag = line[: end + 1]
    return tag if tag in KNOWN_TAGS else None
