"""Read a runner's captured stream into an ArmTrace.

The file is read in chunks split at newlines, so memory holds one chunk of text plus the parsed
arrays, never the whole text or one Python object per token. Two readers fill the same columns:

- the compiled scanner (`difftest.trace._scan`, built with the package when a C compiler is
  there) reads the canonical form of every common line in one pass and hands any line it does
  not accept cleanly to the Python field reader, which names file, line and field;
- the pure-Python reader, the reference and the fallback: tagged lines are found with bytes
  filters, `[spec-logits]` payloads are converted in one vectorised numeric read per chunk, and
  every other tagged line goes through the field reader.

Both give identical arrays, findings and errors (a differential property test holds them
equal). `DIFFTEST_PURE_PARSER=1`, or `parse_trace(..., pure=True)`, forces the Python reader.
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from difftest.config import line_prefix_pattern
from difftest.core.errors import NoTraceLines, TraceError, UsageError
from difftest.core.limits import MAX_PAD_RATIO, MAX_TOP_K, PAD_SLACK
from difftest.core.model import (
    ArmTrace,
    DraftingKind,
    Finding,
    FindingKind,
    LogitRows,
    Notice,
    Phases,
    Proposes,
    Route,
    SpecConfig,
    SpecCoverage,
    Verifies,
)
from difftest.trace import grammar as g
from difftest.trace import bulk

_scan: Any
try:
    _scan = importlib.import_module("difftest.trace._scan")
except ImportError:  # built without a compiler: the Python reader does everything
    _scan = None

CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 16 << 20  # one trace line; a longer line (no newline for 16 MiB) is bad input
PURE_ENV = "DIFFTEST_PURE_PARSER"

# The builder's columns, in the compiled scanner's order (see _scan.c), with their dtypes.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("v_req", "i4"), ("v_pos", "i8"), ("v_k", "i4"), ("v_ns", "i4"), ("v_acc", "i4"),
    ("v_line", "i8"), ("v_draft_len", "i8"), ("v_draft", "i4"), ("v_emit_len", "i8"),
    ("v_emit", "i4"),
    ("p_rows", "i4"), ("p_nqpr", "i4"), ("p_k", "i4"), ("p_num_reqs", "i4"),
    ("p_first_len", "i8"), ("p_first", "i4"), ("p_line", "i8"),
    ("ph_pre", "f8"), ("ph_backbone", "f8"), ("ph_sample", "f8"), ("ph_logits", "i8"),
    ("ph_line", "i8"),
    ("d_pre", "f8"), ("d_fwd", "f8"), ("d_select", "f8"), ("d_walk", "f8"), ("d_line", "i8"),
    ("l_req", "i4"), ("l_pos", "i8"), ("l_row", "i4"), ("l_width", "i4"), ("l_line", "i8"),
    ("l_digits", "i1"), ("l_ids", "i4"), ("l_vals", "f8"),
)
_COL = {name: i for i, (name, _) in enumerate(COLUMNS)}
_LOGIT_COLS = tuple(i for name, i in _COL.items() if name.startswith("l_"))
_PACK = {"i4": struct.Struct("=i").pack, "i8": struct.Struct("=q").pack,
         "f8": struct.Struct("=d").pack, "i1": struct.Struct("=b").pack}


def fast_path_available() -> bool:
    """True when the compiled scanner was built and imports (the package works without it)."""
    return (_scan is not None and getattr(_scan, "N_COLS", None) == len(COLUMNS)
            and set(getattr(_scan, "KNOWN_TAGS", ())) == set(g.KNOWN_TAGS)
            and set(getattr(_scan, "NOTED_TAGS", ())) == set(g.NOTED_TAGS))


def _use_fast(pure: bool | None) -> bool:
    if pure is None:
        pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    return not pure and fast_path_available()


SLOW_NOTICE_BYTES = 8 << 20
_noticed = False


def _notice_slow_path(size: int) -> None:
    """Say once per process, on stderr, that a large trace is read without the scanner
    because it was not built (`difftest --version` says it too)."""
    global _noticed
    if _noticed or size < SLOW_NOTICE_BYTES or fast_path_available():
        return
    _noticed = True
    sys.stderr.write("difftest: the compiled trace scanner is not built (no C compiler at "
                     "install time?); reading with the pure-Python parser, several times "
                     "slower. Reinstall with a C compiler to build it.\n")


class TraceBuilder:
    """Accumulates events; `finish` checks the cross-line invariants and returns the arrays."""

    def __init__(self, path: str, *, fast: bool = False,
                 line_prefix: re.Pattern[bytes] | None = None) -> None:
        self.path = path
        self.fast = fast
        self.line_prefix = line_prefix  # the arm's own, besides the known ones (grammar)
        self.requests: list[str] = []
        self._req_code: dict[str, int] = {}
        self._req_bytes: dict[bytes, int] = {}
        self.findings: list[Finding] = []
        self.engine_errors: list[Finding] = []
        self.notices: list[Notice] = []
        self.routes: list[Route] = []
        self.lines_total = 0
        self.lines_skipped = 0
        self.forced_lines = False  # a line holds a noted tag (grammar.NOTED_TAGS)
        self.truncated = False
        self.drafting: DraftingKind | None = None
        self._drafting_line = 0
        self.config: dict[str, tuple[str, int]] = {}  # `[spec-config]` key: (value, line)
        self.coverage = SpecCoverage()
        # one bytearray per column, native-endian: appended to by both readers, no Python object
        # per token, and viewed by numpy at the end without a copy
        self.cols: tuple[bytearray, ...] = tuple(bytearray() for _ in COLUMNS)

    # -- interning -----------------------------------------------------------------------------
    def _intern(self, name: str) -> int:
        code = self._req_code.get(name)
        if code is None:
            code = len(self.requests)
            self.requests.append(name)
            self._req_code[name] = code
            # the one place a line the scanner reads itself could hold a noted tag
            self.forced_lines |= g.holds_noted(name.encode())
        return code

    def _intern_bytes(self, raw: bytes) -> int:
        code = self._req_bytes.get(raw)
        if code is None:
            code = self._intern(raw.decode("utf-8", errors="backslashreplace"))
            self._req_bytes[raw] = code
        return code

    def _put(self, name: str, value: float) -> None:
        self.cols[_COL[name]].extend(_PACK[COLUMNS[_COL[name]][1]](value))

    def _put_ids(self, name: str, ids: list[int]) -> None:
        self.cols[_COL[name]].extend(array("i", ids).tobytes())

    def unterminated(self, lineno: int, line: bytes) -> None:
        """Note a last line without its newline (after `feed` read or dropped it)."""
        if self.truncated:  # dropped as unparseable: already reported
            return
        self.truncated = True
        if line.lstrip().startswith(b"["):
            # a trace line cut at a field boundary can still parse: it is cut all the same
            self._finding(lineno, FindingKind.TRUNCATED, "the trace ends inside a trace line (runner "
                          "killed?); that line was read as it stands")
        else:
            self._finding(lineno, FindingKind.NO_FINAL_NEWLINE, "the trace ends without a newline; its "
                          "last line was read as it stands")

    def _finding(self, line: int, kind: FindingKind, message: str) -> None:
        self.findings.append(Finding(self.path, line, kind, message))

    # -- blocks of complete lines --------------------------------------------------------------
    def feed_block(self, buf: bytes, first_lineno: int) -> int:
        """Read `buf`, complete lines each ending with a newline; returns how many."""
        if self.fast:
            count = self._feed_fast(buf, first_lineno) - first_lineno
        else:
            count = buf.count(b"\n")
            self._feed_pure(buf, first_lineno)
        self.lines_total += count
        return count

    def feed_last(self, line: bytes, lineno: int) -> None:
        """The file's last line, without its newline: read it if it parses, else note the cut."""
        try:
            if self.fast:
                self._feed_fast(line + b"\n", lineno)
            else:
                self._feed_pure(line + b"\n", lineno)
        except TraceError as exc:
            if exc.line != lineno or isinstance(exc, NoTraceLines):
                raise
            self.truncated = True
            self._finding(lineno, FindingKind.TRUNCATED, "the trace ends mid-line (runner killed?); read "
                          f"up to the cut, this last line dropped: {exc.reason}")
        self.lines_total += 1
        self.unterminated(lineno, line)

    def _feed_fast(self, buf: bytes, lineno: int) -> int:
        """Scan `buf`, handing refused lines to the field reader; returns the next line number."""
        at, stop = 0, len(buf)
        scan = _scan.scan
        while at < stop:
            at, lineno, skipped, handed, noted = scan(buf, at, stop, lineno, self._req_bytes,
                                                      self._intern_bytes, self.cols)
            self.lines_skipped += skipped
            self.forced_lines |= noted > 0
            if handed:
                end = buf.find(b"\n", at)
                self._careful(buf[at:end], lineno)
                at, lineno = end + 1, lineno + 1
        return lineno

    def _feed_pure(self, buf: bytes, first_lineno: int) -> None:
        """Read `buf`, complete lines each ending with a newline: the canonical logits lines in
        bulk, and by the field reader, in file order, every other line that may be a trace
        line: one that starts with a known tag, a notice or engine-error prefix's first byte,
        indentation or a digit, or holds a tag past its start (a finding); the rest is program
        output."""
        a = np.frombuffer(buf, dtype=np.uint8)
        starts, ends = bulk.line_bounds(a)
        read = bulk.read_logit_lines(buf, a, starts, ends)
        lead = a[starts]
        maybe = _LEADS[lead]  # notices, engine errors and what may stand before a misplaced one
        maybe[bulk.tagged_lines(buf, a, starts, ends)] = True
        maybe[bulk.marked_lines(buf, starts)] = True  # `vt: ` past a prefix, known or not
        maybe[read.index] = False
        cand = np.flatnonzero(maybe)
        other = list(zip(cand.tolist(), starts[cand].tolist(), ends[cand].tolist(), strict=True))
        self.lines_skipped += starts.size - read.index.size - len(other)
        # every line of the block, whatever it is read as (the field reader notes its own too)
        self.forced_lines |= g.holds_noted(buf)
        rows = _Bulk(read, first_lineno, self._intern_bytes)
        for i, s, e in other:  # a bad line raises: the whole parse fails, nothing to keep
            self._careful(buf[s:e], first_lineno + i)
        rows.emit(self.cols)

    # -- one line, by the field reader ---------------------------------------------------------
    def _careful(self, raw: bytes, lineno: int) -> None:
        self.forced_lines |= g.holds_noted(raw)  # whatever the line is read as
        try:
            self._line(raw.rstrip(), lineno)
        except g.FieldError as exc:
            raise TraceError(self.path, lineno, str(exc)) from None

    def _line(self, line: bytes, lineno: int) -> None:
        tag = g.tag_of(line)
        if tag is None:
            rest = g.strip_prefixes(line, self.line_prefix)
            if len(rest) != len(line):  # a launcher's or logger's prefix: read what follows
                tag = g.tag_of(rest)
                if tag is not None or rest.startswith(g.ENGINE_ERROR_PREFIX) or (
                        rest.startswith(g.NOTICE_PREFIX) and g.NOTICE_MARK in rest):
                    line = rest
        if tag is None:
            self._untagged(line, lineno)
            return
        fields = g.read_fields(tag, line[len(tag):])
        if isinstance(fields, g.NoPropose):
            self._no_propose(fields, lineno)
        elif tag == g.TAG_VERIFY:
            self._verify(fields, lineno)
        elif tag == g.TAG_PROPOSE:
            self._propose(fields, lineno)
        else:
            self._other_tag(tag, line, fields, lineno)

    def _untagged(self, line: bytes, lineno: int) -> None:
        """A line with no tag at its start (behind a known prefix or not): an outgrown notice, an
        engine's error, a tag misplaced inside it (findings each), or program output, skipped."""
        if line.startswith(g.NOTICE_PREFIX) and g.NOTICE_MARK in line:
            req = line[len(g.NOTICE_PREFIX):].split(b" ", 1)[0]
            text = line.decode("utf-8", errors="backslashreplace")
            self.notices.append(Notice(lineno, req.decode("utf-8", "backslashreplace"), text))
            self._finding(lineno, FindingKind.OUTGROWN, text)
        elif line.startswith(g.ENGINE_ERROR_PREFIX):
            self.engine_errors.append(Finding(
                self.path, lineno, FindingKind.ENGINE_ERROR,
                line.decode("utf-8", "backslashreplace")))
        elif g.may_be_misplaced(line) and (found := g.misplaced(line)) is not None:
            self._misplaced(found, lineno)
        else:
            self.lines_skipped += 1

    def _other_tag(self, tag: bytes, line: bytes, fields: dict[str, object],
                   lineno: int) -> None:
        """Every tagged line but a step's propose and verify (which `_line` reads first, as
        the most frequent): phase timings, routes, the declarations (drafting, config,
        coverage), and the logits lines the bulk reader did not take."""
        if tag == g.TAG_PHASE:
            for name in ("pre", "backbone", "sample", "logits"):
                self._put(f"ph_{name}", fields[name])  # type: ignore[arg-type]
            self._put("ph_line", lineno)
        elif tag == g.TAG_PHASE_DEV:
            for name in ("pre", "fwd", "select", "walk"):
                self._put(f"d_{name}", fields[name])  # type: ignore[arg-type]
            self._put("d_line", lineno)
        elif tag == g.TAG_ROUTE:
            self.routes.append(Route(lineno, fields["counters"]))  # type: ignore[arg-type]
        elif tag == g.TAG_DRAFTING:
            self._declare_drafting(fields["kind"], lineno)  # type: ignore[arg-type]
        elif tag == g.TAG_CONFIG:
            self._declare_config(fields["values"], lineno)  # type: ignore[arg-type]
        elif tag == g.TAG_COVERAGE:
            self._declare_coverage(fields, lineno)
        elif tag == g.TAG_LOGITS:
            self._logits_line(tag, line, fields, lineno)

    def _misplaced(self, found: bytes, lineno: int) -> None:
        what = found.decode().strip()
        self._finding(lineno, FindingKind.MISPLACED_TAG,
                      f"'{what}' is not at the start of the line, nor behind a known prefix "
                      "(`srun -l`'s `N: `, `[rankN]:`, a timestamp, a logger's `LEVEL name:`), so "
                      "the line was not read (another prefix, indentation, or another process "
                      "writing into the same line); remove the prefix, or give the arm a "
                      "`line_prefix` pattern that matches it")

    def _logits_line(self, tag: bytes, line: bytes, f: dict[str, object], lineno: int) -> None:
        top: list[tuple[int, float]] = f["top"]  # type: ignore[assignment]
        # digits are counted on the items as printed (the field reader has checked them)
        raw_top = dict(g.split_fields(tag, line[len(tag):]))["top"]
        digits = max((g.sig_digits(item.partition(b":")[2]) for item, (_, v) in
                      zip(raw_top[1:-1].split(), top, strict=True) if v - v == 0), default=0)
        self._put("l_req", self._intern(f["req"]))  # type: ignore[arg-type]
        self._put("l_pos", f["pos"])  # type: ignore[arg-type]
        self._put("l_row", f["row"])  # type: ignore[arg-type]
        self._put("l_width", len(top))
        self._put("l_line", lineno)
        self._put("l_digits", min(digits, 127))
        self._put_ids("l_ids", [i for i, _ in top])
        self.cols[_COL["l_vals"]].extend(array("d", [v for _, v in top]).tobytes())

    def _declare_drafting(self, kind: DraftingKind, lineno: int) -> None:
        """One drafting kind per trace: a second header may repeat it, never contradict it."""
        if self.drafting is not None and kind is not self.drafting:
            raise TraceError(self.path, lineno,
                             f"[spec-drafting] kind={kind.value} contradicts "
                             f"kind={self.drafting.value} declared at line {self._drafting_line}")
        if self.drafting is None:
            self.drafting, self._drafting_line = kind, lineno

    def _declare_config(self, values: dict[str, str], lineno: int) -> None:
        """`[spec-config]` lines (one per process) merge; a setting one line gives differently
        from an earlier one is an error: the trace does not say which the engine applied."""
        for key, value in values.items():
            seen = self.config.get(key)
            if seen is not None and seen[0] != value:
                raise TraceError(self.path, lineno,
                                 f"[spec-config] {key}={value} contradicts {key}={seen[0]} "
                                 f"at line {seen[1]}")
            if seen is None:
                self.config[key] = (value, lineno)

    def _declare_coverage(self, f: dict[str, object], lineno: int) -> None:
        """One `[spec-coverage]` line per trace: a run prints it once, after its last step; a
        second is two runs' output in one file, whose sum would describe neither."""
        if self.coverage.present:
            raise TraceError(self.path, lineno, "[spec-coverage] given a second time (first at "
                             f"line {self.coverage.line}): one run prints it once")
        self.coverage = SpecCoverage(f["counts"], f["widths"], lineno)  # type: ignore[arg-type]

    def _verify(self, f: dict[str, object], lineno: int) -> None:
        req: str = f["req"]  # type: ignore[assignment]
        pos, k, ns, acc = (int(f[n]) for n in ("pos", "k", "ns", "acc"))  # type: ignore[call-overload]
        draft: list[int] = f["draft"]  # type: ignore[assignment]
        emit: list[int] = f["emit"]  # type: ignore[assignment]
        where = f"[SPECTRACE] req={req} pos={pos}"
        bad = FindingKind.INVARIANT
        if len(draft) != k:
            self._finding(lineno, bad, f"{where}: k={k} but draft has {len(draft)} ids")
        if len(emit) != ns:
            self._finding(lineno, bad, f"{where}: ns={ns} but emit has {len(emit)} ids")
        # every draft accepted and no bonus token (a verify cut short by a length limit):
        # acc = ns = k; otherwise the last emitted token is the target's own
        all_taken = acc == ns == k and k > 0
        if acc != max(ns - 1, 0) and not all_taken:
            self._finding(lineno, bad, f"{where}: acc={acc} but max(ns-1, 0)={max(ns - 1, 0)}")
        if emit[:acc] != draft[:acc]:
            self._finding(lineno, bad,
                          f"{where}: emit[:acc] {emit[:acc]} differs from draft[:acc] {draft[:acc]}")
        self._put("v_req", self._intern(req))
        for name, value in (("v_pos", pos), ("v_k", k), ("v_ns", ns), ("v_acc", acc),
                            ("v_line", lineno), ("v_draft_len", len(draft)),
                            ("v_emit_len", len(emit))):
            self._put(name, value)
        self._put_ids("v_draft", draft)
        self._put_ids("v_emit", emit)

    def _no_propose(self, f: g.NoPropose, lineno: int) -> None:
        for name, value in (("p_rows", 0), ("p_nqpr", -1), ("p_k", -1),
                            ("p_num_reqs", f.num_reqs), ("p_first_len", 0), ("p_line", lineno)):
            self._put(name, value)

    def _propose(self, f: dict[str, object], lineno: int) -> None:
        first: list[int] = f["first"]  # type: ignore[assignment]
        k = int(f["drafts/row"])  # type: ignore[call-overload]
        if len(first) != k:
            self._finding(lineno, FindingKind.INVARIANT,
                          f"[spec-propose] drafts/row={k} but first has {len(first)} ids")
        for name, value in (("p_rows", int(f["rows"])), ("p_nqpr", int(f["nqpr"])),  # type: ignore[call-overload]
                            ("p_k", k), ("p_num_reqs", -1), ("p_first_len", len(first)),
                            ("p_line", lineno)):
            self._put(name, value)
        self._put_ids("p_first", first)

    # -- the result ----------------------------------------------------------------------------
    def _array(self, name: str) -> np.ndarray:
        i = _COL[name]
        return np.frombuffer(self.cols[i], dtype=COLUMNS[i][1])

    def finish(self) -> ArmTrace:
        a = self._array
        verifies = Verifies(
            req=a("v_req"), pos=a("v_pos"), k=a("v_k"), ns=a("v_ns"), acc=a("v_acc"),
            draft_ids=a("v_draft"), draft_off=_offsets(a("v_draft_len")),
            emit_ids=a("v_emit"), emit_off=_offsets(a("v_emit_len")), line=a("v_line"))
        proposes = Proposes(
            rows=a("p_rows"), nqpr=a("p_nqpr"), k=a("p_k"), num_reqs=a("p_num_reqs"),
            first_ids=a("p_first"), first_off=_offsets(a("p_first_len")), line=a("p_line"))
        phases = Phases(pre=a("ph_pre"), backbone=a("ph_backbone"), sample=a("ph_sample"),
                        logits=a("ph_logits"), line=a("ph_line"), dev_pre=a("d_pre"),
                        dev_fwd=a("d_fwd"), dev_select=a("d_select"), dev_walk=a("d_walk"),
                        dev_line=a("d_line"))
        self._check_widths(a("l_width"), a("l_line"))
        logits = LogitRows(*_pad_logits(
            a("l_req"), a("l_pos"), a("l_row"), a("l_width"), a("l_line"), a("l_digits"),
            a("l_ids"), a("l_vals")))
        self._order_requests(verifies, logits)
        self._check_positions(verifies)
        self._check_coverage(verifies)
        self._check_logits(logits)
        self._check_repeated_logits(logits)
        self.findings.sort(key=lambda f: f.line)
        return ArmTrace(
            path=self.path, requests=tuple(self.requests), verifies=verifies,
            proposes=proposes, logits=logits, phases=phases, routes=tuple(self.routes),
            notices=tuple(self.notices), findings=tuple(self.findings),
            lines_total=self.lines_total, lines_skipped=self.lines_skipped,
            forced_lines=self.forced_lines, engine_errors=tuple(self.engine_errors),
            truncated=self.truncated, drafting=self.drafting,
            config=SpecConfig({k: v for k, (v, _) in self.config.items()},
                              {k: line for k, (_, line) in self.config.items()}),
            coverage=self.coverage)

    def _check_coverage(self, verifies: Verifies) -> None:
        """The verify widths a `[spec-coverage]` line counts are widths the trace's verifies
        could have had (at most the widest, k + 1) and no more steps than it traced: counts
        the trace contradicts would claim coverage nothing ran."""
        cov = self.coverage
        if not cov.present or not cov.widths or not len(verifies):
            return
        widest = int(verifies.k.max()) + 1
        over = [w for w, n in cov.widths if n > 0 and w > widest]
        if over:
            raise TraceError(self.path, cov.line, f"[spec-coverage] widths: width {over[0]} is "
                             f"wider than any traced verify (k + 1 is at most {widest} here)")
        steps = sum(n for _, n in cov.widths)
        if steps > len(verifies):
            raise TraceError(self.path, cov.line, f"[spec-coverage] widths: {steps} verify steps "
                             f"counted, and the trace holds {len(verifies)} verifies")

    def _check_widths(self, widths: np.ndarray, lines: np.ndarray) -> None:
        """Refuse, before the rows are padded to one width, a row wider than MAX_TOP_K or rows
        whose padding would outgrow the values printed (memory stays linear in the trace)."""
        if not widths.size:
            return
        wide = np.flatnonzero(widths > MAX_TOP_K)
        if wide.size:
            at = int(wide[np.argmin(lines[wide])])
            raise TraceError(self.path, int(lines[at]),
                             f"[spec-logits] row of {int(widths[at])} ids: difftest reads at "
                             f"most {MAX_TOP_K} ids per row (print a shorter top-k list)")
        values = int(widths.sum())
        cells = int(widths.size) * int(widths.max())
        if cells > MAX_PAD_RATIO * values + PAD_SLACK:
            at = int(np.argmax(widths))
            raise TraceError(self.path, int(lines[at]),
                             f"[spec-logits] rows of {int(widths.min())} to {int(widths.max())} "
                             f"ids: held at one width they would take {cells} cells for "
                             f"{values} values printed (more than {MAX_PAD_RATIO}x); print "
                             "every row's top-k list at one width")

    def _order_requests(self, v: Verifies, lg: LogitRows) -> None:
        """Number requests by the line they first appear on (the readers intern them in
        different orders), dropping names no kept line uses (a dropped cut-off last line)."""
        n = len(self.requests)
        if not n:
            return
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, v.req, v.line)
        np.minimum.at(first, lg.req, lg.line)
        used = np.flatnonzero(first < np.iinfo(np.int64).max)
        order = used[np.argsort(first[used])]  # first lines are distinct: no ties
        remap = np.zeros(n, np.int32)  # names no kept line uses are never looked up
        remap[order] = np.arange(order.size)
        v.req[:] = remap[v.req]
        lg.req[:] = remap[lg.req]
        self.requests[:] = [self.requests[i] for i in order.tolist()]

    def _check_positions(self, v: Verifies) -> None:
        """Per request, each verify starts where the previous one's emit left off; a verify
        of a (request, pos) seen before is a repeat, harmless when identical."""
        n = len(v)
        if n < 2:
            return
        keys = (v.req.astype(np.int64) << 40) | v.pos
        by_key = np.argsort(keys, kind="stable")  # verifies are in file order
        again = np.flatnonzero(keys[by_key][1:] == keys[by_key][:-1]) + 1
        repeat = np.zeros(n, dtype=bool)
        first = 0
        for j in again.tolist():
            cur = int(by_key[j])
            if j < 2 or keys[by_key[j - 1]] != keys[by_key[j - 2]]:
                first = int(by_key[j - 1])
            repeat[cur] = True
            same = (int(v.k[cur]) == int(v.k[first]) and int(v.ns[cur]) == int(v.ns[first])
                    and np.array_equal(v.draft(cur), v.draft(first))
                    and np.array_equal(v.emit(cur), v.emit(first)))
            where = (f"[SPECTRACE] req={self.requests[int(v.req[cur])]} pos={int(v.pos[cur])}: "
                     f"verified again (first at line {int(v.line[first])})")
            if same:
                self._finding(int(v.line[cur]), FindingKind.REPEAT,
                              f"{where}, identically: harmless, one of them is compared")
            else:
                self._finding(int(v.line[cur]), FindingKind.CONFLICTING_REPEAT,
                              f"{where} with a different draft or emit: which one the engine "
                              "acted on is unknown, so no verdict can rest on this step")
        kept = np.flatnonzero(~repeat)
        order = kept[np.lexsort((kept, v.req[kept]))]  # by request, then file order
        req, pos = v.req[order], v.pos[order]
        nxt = pos + v.ns[order]
        bad = np.flatnonzero((req[1:] == req[:-1]) & (pos[1:] != nxt[:-1])) + 1
        for j in sorted(bad.tolist(), key=lambda j: int(v.line[order[j]])):
            cur, prev = int(order[j]), int(order[j - 1])
            self._finding(int(v.line[cur]), FindingKind.DISCONTINUITY,
                          f"[SPECTRACE] req={self.requests[int(v.req[cur])]}: "
                          f"pos={int(v.pos[cur])}, but the previous verify (line "
                          f"{int(v.line[prev])}) leads to pos={int(nxt[j - 1])}")

    def _check_repeated_logits(self, lg: LogitRows) -> None:
        """A (request, pos, row) traced twice: harmless when identical (bit for bit), else the
        arm contradicts itself there."""
        if len(lg) < 2 or not _may_repeat(lg):
            return
        order = np.lexsort((lg.line, lg.row, lg.pos, lg.req))  # copies in file order
        same_key = ((lg.req[order][1:] == lg.req[order][:-1])
                    & (lg.pos[order][1:] == lg.pos[order][:-1])
                    & (lg.row[order][1:] == lg.row[order][:-1]))
        again = np.flatnonzero(same_key) + 1
        first = 0
        vals = np.ascontiguousarray(lg.top_vals).view(np.uint64)
        for j in again.tolist():
            cur = int(order[j])
            if j < 2 or not same_key[j - 2]:
                first = int(order[j - 1])
            same = (int(lg.width[cur]) == int(lg.width[first])
                    and np.array_equal(lg.top_ids[cur], lg.top_ids[first])
                    and np.array_equal(vals[cur], vals[first]))
            where = (f"[spec-logits] req={self.requests[int(lg.req[cur])]} pos={int(lg.pos[cur])} "
                     f"row={int(lg.row[cur])}: traced again (first at line {int(lg.line[first])})")
            if same:
                self._finding(int(lg.line[cur]), FindingKind.REPEAT,
                              f"{where}, identically: harmless, one of them is compared")
            else:
                self._finding(int(lg.line[cur]), FindingKind.CONFLICTING_REPEAT,
                              f"{where} with a different top list: which one the engine "
                              "computed is unknown, so no verdict can rest on this row")

    def _check_logits(self, lg: LogitRows) -> None:
        if not len(lg):
            return
        if int(lg.width.min()) == lg.top_vals.shape[1]:  # every row full: no padding to mask
            cols = np.ones((1, lg.top_vals.shape[1]), dtype=bool)
            nonfinite = np.flatnonzero(~np.isfinite(lg.top_vals).all(axis=1))
        else:
            cols = np.arange(lg.top_vals.shape[1])[None, :] < lg.width[:, None]
            nonfinite = np.flatnonzero(~np.all(np.isfinite(lg.top_vals) | ~cols, axis=1))
        for i in nonfinite[:1000].tolist():
            self._finding(int(lg.line[i]), FindingKind.NON_FINITE,
                          f"[spec-logits] req={self.requests[lg.req[i]]} pos={lg.pos[i]} "
                          f"row={lg.row[i]}: non-finite logit in the top list")
        if nonfinite.size > 1000:
            self._finding(int(lg.line[nonfinite[1000]]), FindingKind.NON_FINITE,
                          f"... and {nonfinite.size - 1000} more rows with non-finite logits")
        narrow = np.flatnonzero(lg.width < 2)
        for i in narrow[:100].tolist():
            self._finding(int(lg.line[i]), FindingKind.INVARIANT,
                          f"[spec-logits] row={lg.row[i]}: fewer than two entries, margin undefined")
        if lg.top_vals.shape[1] >= 2:
            with np.errstate(invalid="ignore"):
                rising = lg.top_vals[:, 1:] > lg.top_vals[:, :-1]
            if cols.shape[0] > 1:
                rising &= cols[:, 1:]
            for i in np.flatnonzero(rising.any(axis=1))[:100].tolist():
                self._finding(int(lg.line[i]), FindingKind.INVARIANT,
                              "[spec-logits] top list is not ordered highest first")
        for i in np.flatnonzero(lg.row < 1)[:100].tolist():
            self._finding(int(lg.line[i]), FindingKind.INVARIANT,
                          f"[spec-logits] row={lg.row[i]}: rows are 1..k (row 0 is the anchor)")


# -- the pure-Python bulk reader ---------------------------------------------------------------

# The first bytes of the lines the field reader must see besides tagged ones: the notice and
# engine-error prefixes', and what may stand before a misplaced tag or prefix (g.LEADER_START).
_LEADS = np.zeros(256, dtype=bool)
for _lead in (g.NOTICE_PREFIX[:1], g.ENGINE_ERROR_PREFIX[:1], *g.LEADER_START):
    _LEADS[_lead[0]] = True


class _Bulk:
    """One block's `[spec-logits]` lines read in bulk, written to the columns once the block's
    other lines are read."""

    def __init__(self, read: bulk.LogitLines, first_lineno: int,
                 intern: Callable[[bytes], int]) -> None:
        codes = {name: intern(name) for name in dict.fromkeys(read.names)}
        self.rows: dict[str, np.ndarray] = {
            "l_req": np.fromiter(map(codes.__getitem__, read.names), dtype=np.int32,
                                 count=len(read.names)),
            "l_pos": read.pos, "l_row": read.row, "l_width": read.width,
            "l_line": read.index + first_lineno, "l_digits": read.digits}
        self.items: dict[str, np.ndarray] = {"l_ids": read.ids, "l_vals": read.values}

    def emit(self, cols: tuple[bytearray, ...]) -> None:
        for name, values in (*self.rows.items(), *self.items.items()):
            cols[_COL[name]].extend(values.tobytes())


def _pad_logits(req: np.ndarray, pos: np.ndarray, row: np.ndarray, widths: np.ndarray,
                line: np.ndarray, digits: np.ndarray, ids: np.ndarray,
                vals: np.ndarray) -> list[np.ndarray]:
    """Flat id/value lists to (n, K) matrices padded with -1 / nan, rows in file order. When
    every row has the same width the matrices are views of the flat arrays: no copy."""
    n = widths.size
    width = int(widths.max()) if n else 0
    if n and int(widths.min()) == width:
        top_ids = ids.reshape(n, width)
        top_vals = vals.reshape(n, width)
    else:
        top_ids = np.full((n, width), -1, dtype=np.int32)
        top_vals = np.full((n, width), np.nan)
        rows = np.repeat(np.arange(n), widths)
        starts = np.cumsum(widths) - widths
        cols = np.arange(rows.size) - np.repeat(starts, widths)
        top_ids[rows, cols] = ids
        top_vals[rows, cols] = vals
    out = [req, pos, row, top_ids, top_vals, widths, line, digits]  # LogitRows' order
    if n > 1 and bool(np.any(line[1:] < line[:-1])):
        # lines the field reader took after a block's bulk: restore file order
        order = np.argsort(line, kind="stable")
        out = [x[order] for x in out]
    return out


def _may_repeat(lg: LogitRows) -> bool:
    """False when no (request, pos, row) occurs twice, told from one sort of the three packed
    into an int64 (when they fit); True when some may (the full check then finds which)."""
    bits = [int(x.max()).bit_length() if int(x.min()) >= 0 else 64
            for x in (lg.req, lg.pos, lg.row)]
    if sum(bits) > 63:
        return True
    key = lg.req.astype(np.int64) << (bits[1] + bits[2])
    key |= lg.pos.astype(np.int64) << bits[2]
    key |= lg.row.astype(np.int64)
    key.sort()
    return bool(np.any(key[1:] == key[:-1]))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


# -- entry points ------------------------------------------------------------------------------

class _LineTooLong(Exception):
    """The line after the blocks read so far passes MAX_LINE_BYTES."""


def _blocks(fh: object, chunk_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """(complete lines, False) blocks, then (the last line without newline, True) if any.
    A line is gathered piecewise (linear in its length) and capped at MAX_LINE_BYTES."""
    pending: list[bytes | memoryview] = []
    pending_len = 0
    read = fh.read  # type: ignore[attr-defined]
    while True:
        chunk: bytes = read(chunk_bytes)
        if not chunk:
            break
        cut = chunk.rfind(b"\n")
        if cut < 0:
            pending.append(chunk)
            pending_len += len(chunk)
            if pending_len > MAX_LINE_BYTES:
                raise _LineTooLong
            continue
        if pending:
            if pending_len + chunk.find(b"\n") > MAX_LINE_BYTES:
                raise _LineTooLong
            pending.append(memoryview(chunk)[:cut + 1])  # joined without a copy of its own
            block = b"".join(pending)
        else:
            block = chunk[:cut + 1]
        rest = chunk[cut + 1:]
        pending, pending_len = ([rest], len(rest)) if rest else ([], 0)
        yield block, False
    if pending:
        yield b"".join(pending), True


def _too_long(path: str, lineno: int) -> TraceError:
    return TraceError(path, lineno, f"line longer than {MAX_LINE_BYTES >> 20} MiB (the cap on "
                      "one trace line): is this a trace?")


def parse_trace(path: str | os.PathLike[str], *, chunk_bytes: int = CHUNK_BYTES,
                pure: bool | None = None, require_lines: bool = False,
                line_prefix: str | None = None) -> ArmTrace:
    """Parse a captured trace file; a missing file is a UsageError, a bad line a TraceError,
    and with `require_lines` a file without a single trace line is NoTraceLines.
    `line_prefix`: the arm's own prefix pattern, stripped like the known ones."""
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed by the `with` below, after the checks
    except FileNotFoundError:
        raise UsageError(f"{p}: no such trace file") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a directory, not a trace file") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror}") from None
    fast = _use_fast(pure)
    if not fast and pure is None and os.environ.get(PURE_ENV, "") in ("", "0"):
        _notice_slow_path(os.fstat(fh.fileno()).st_size)
    builder = TraceBuilder(str(p), fast=fast, line_prefix=_prefix(line_prefix))
    lineno = 1
    collecting = gc.isenabled()
    gc.disable()  # no cycles are made while parsing; the collector would only walk the arrays
    try:
        with fh:
            for block, last in _blocks(fh, chunk_bytes):
                if last:
                    builder.feed_last(block, lineno)
                else:
                    lineno += builder.feed_block(block, lineno)
    except _LineTooLong:
        raise _too_long(str(p), lineno) from None
    finally:
        if collecting:
            gc.enable()
    trace = builder.finish()
    if require_lines:
        require_trace_lines(trace)
    return trace


def require_trace_lines(trace: ArmTrace) -> None:
    """Raise NoTraceLines when the trace holds no VT_SPEC_TRACE line at all."""
    if trace.level == 0:
        raise NoTraceLines(trace.path, compressed=_gzip(trace.path))


def _gzip(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _prefix(pattern: str | None) -> re.Pattern[bytes] | None:
    if pattern is None:
        return None
    try:
        return line_prefix_pattern(pattern)
    except ValueError as exc:
        raise UsageError(f"line_prefix {pattern!r}: {exc}") from None


def parse_text(text: str | bytes, path: str = "<text>", *, pure: bool | None = None,
               line_prefix: str | None = None) -> ArmTrace:
    """Parse trace text held in memory (tests, and runners driven in-process)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    builder = TraceBuilder(path, fast=_use_fast(pure), line_prefix=_prefix(line_prefix))
    if not data:
        return builder.finish()
    cut = data.rfind(b"\n")
    if cut >= 0:
        builder.feed_block(data[:cut + 1], 1)
    if cut + 1 < len(data):
        builder.feed_last(data[cut + 1:], data.count(b"\n") + 1)
    return builder.finish()


def parse_lines(lines: Iterable[str], path: str = "<lines>", *,
                pure: bool | None = None, line_prefix: str | None = None) -> ArmTrace:
    """Parse an iterable of lines without newlines."""
    return parse_text("".join(line + "\n" for line in lines), path, pure=pure,
                      line_prefix=line_prefix)
