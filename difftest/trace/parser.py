"""Read a runner's captured stream into an ArmTrace.

The file is read in chunks split at newlines, so memory holds one chunk of text plus the parsed
arrays, never the whole text or one Python object per token. `[spec-logits]` lines, the bulk of
a level-3 trace, are matched by one regex each and their id:logit payloads converted to numbers
in one numpy call per chunk; every other tagged line goes through the grammar's field reader.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from collections.abc import Iterable

import numpy as np

from difftest.errors import TraceError, UsageError
from difftest.model import (
    ArmTrace, DraftingKind, Finding, LogitRows, Notice, Phases, Proposes, Route, Verifies,
)
from difftest.trace import grammar as g

CHUNK_BYTES = 4 << 20


def row_sig_digits(joined: bytes, widths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the most significant mantissa digits among its finite values (int8), counted on
    the printed text: `joined` holds the rows' `id:value` items in order, separated by spaces,
    already read into `values`. Vectorised over the whole chunk; equal to `g.sig_digits` per
    item (the reference) and to the compiled scanner's count."""
    a = np.frombuffer(joined, dtype=np.uint8)
    sep = np.flatnonzero((a == 32) | (a == 58))
    after_colon = np.flatnonzero(a[sep] == 58)
    start = sep[after_colon] + 1
    end = np.append(sep, a.size)[after_colon + 1]
    n = start.size
    mant_end = end.copy()
    if n:
        exp_at = np.flatnonzero((a | 32) == 101)  # `e`/`E`: only values carry them
        if exp_at.size:
            owner = np.searchsorted(start, exp_at, side="right") - 1
            mant_end[owner[::-1]] = exp_at[::-1]  # the first `e` of a token wins
    lead = a[np.minimum(start, max(a.size - 1, 0))] if n else np.zeros(0, np.uint8)
    sign = ((lead == 45) | (lead == 43)).astype(np.int64)
    has_dot = (np.add.reduceat(a == 46, start).astype(np.int64) if n
               else np.zeros(0, np.int64))
    digits = mant_end - start - sign - has_dot
    # leading zeros (and the dot among them): walk only the tokens that start with one
    first = start + sign
    zeros = np.zeros(n, dtype=np.int64)
    active = np.flatnonzero(((a[np.minimum(first, max(a.size - 1, 0))] == 48)
                             | (a[np.minimum(first, max(a.size - 1, 0))] == 46))
                            & (first < mant_end)) if n else np.zeros(0, np.int64)
    at = first[active]
    while active.size:
        c = a[at]
        zero = c == 48
        zeros[active[zero]] += 1
        keep = (zero | (c == 46)) & (at + 1 < mant_end[active])
        active = active[keep]
        at = at[keep] + 1
    sig = np.maximum(digits - zeros, 1)
    sig[~np.isfinite(values)] = 0
    out = np.zeros(widths.size, dtype=np.int8)
    filled = widths > 0
    if n and filled.any():
        starts = (np.cumsum(widths) - widths)[filled]
        out[filled] = np.minimum(np.maximum.reduceat(sig, starts), 127)
    return out


class _LogitChunk:
    """The `[spec-logits]` lines of one chunk, converted to arrays in one go."""

    def __init__(self) -> None:
        self.req: list[int] = []
        self.pos: list[int] = []
        self.row: list[int] = []
        self.line: list[int] = []
        self.payload: list[bytes] = []

    def _diagnose(self, path: str, candidates: Iterable[int]) -> None:
        """Re-read suspect lines with the field reader, which names the bad item."""
        for i in candidates:
            try:
                g.read_top_list("top", b"[" + self.payload[i] + b"]")
            except g.FieldError as exc:
                raise TraceError(path, self.line[i], f"[spec-logits] {exc}") from None
        raise TraceError(path, self.line[0], "[spec-logits] payload could not be read")

    def _flat_pairs(self, path: str, widths: np.ndarray) -> np.ndarray:
        """All (id, value) pairs of the chunk, in order, as a (total, 2) float64 array."""
        total = int(widths.sum())
        joined = b" ".join(self.payload).replace(b":", b" ")
        try:
            flat = (np.fromstring(joined, dtype=np.float64, sep=" ") if joined.strip()
                    else np.zeros(0))
        except ValueError:  # numpy stops at the first spelling it cannot read
            flat = np.zeros(0)
        if flat.size != 2 * total:
            # The line regex admits only number-like spellings; reaching here means one that
            # numpy does not read. Find the line the slow way and name it.
            self._diagnose(path, range(len(self.payload)))
        return flat.reshape(total, 2)

    def _check_ranges(self, path: str) -> None:
        """pos and row as the field reader bounds them (the fast regex bounds only digits)."""
        bounds = (("pos", self.pos, g.POS_LIMIT - 1), ("row", self.row, g.INT32_MAX))
        for name, values, limit in bounds:
            if values and max(values) > limit:
                i = next(j for j, v in enumerate(values) if v > limit)
                raise TraceError(path, self.line[i], f"[spec-logits] field {name}: expected at "
                                 f"most {limit}, got {values[i]}")

    def to_arrays(self, path: str) -> list[np.ndarray]:
        self._check_ranges(path)
        n = len(self.payload)
        widths = np.fromiter((p.count(b":") for p in self.payload), dtype=np.int32, count=n)
        pairs = self._flat_pairs(path, widths)
        ids = pairs[:, 0]
        bad = (ids < g.INT32_MIN) | (ids > g.INT32_MAX)
        if bad.any():
            at = int(np.searchsorted(np.cumsum(widths), int(np.flatnonzero(bad)[0]), side="right"))
            self._diagnose(path, [at])
        width = int(widths.max()) if n else 0
        if n and int(widths.min()) == width:
            top_ids = ids.astype(np.int32).reshape(n, width)
            top_vals = np.ascontiguousarray(pairs[:, 1]).reshape(n, width)
        else:
            top_ids = np.full((n, width), -1, dtype=np.int32)
            top_vals = np.full((n, width), np.nan)
            rows = np.repeat(np.arange(n), widths)
            starts = np.cumsum(widths) - widths
            cols = np.arange(rows.size) - np.repeat(starts, widths)
            top_ids[rows, cols] = ids.astype(np.int32)
            top_vals[rows, cols] = pairs[:, 1]
        digits = row_sig_digits(b" ".join(self.payload), widths, pairs[:, 1])
        out: list[np.ndarray] = [
               np.asarray(self.req, dtype=np.int32), np.asarray(self.pos, dtype=np.int64),
               np.asarray(self.row, dtype=np.int32), top_ids, top_vals, widths,
               np.asarray(self.line, dtype=np.int64), digits]
        if n > 1 and bool(np.any(np.diff(out[6]) < 0)):
            # lines the field reader took after the bulk: restore file order
            order = np.argsort(out[6], kind="stable")
            out = [a[order] for a in out]
        return out


class TraceBuilder:
    """Accumulates events line by line; `finish` checks the cross-line invariants."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.requests: list[str] = []
        self._req_code: dict[str, int] = {}
        self._req_bytes: dict[bytes, int] = {}
        self.findings: list[Finding] = []
        self.engine_errors: list[Finding] = []
        self.notices: list[Notice] = []
        self.routes: list[Route] = []
        self.lines_total = 0
        self.lines_skipped = 0
        self.truncated = False
        self.drafting: DraftingKind | None = None
        self._drafting_line = 0
        # verifies; ids and counters in typed arrays: no Python object per token
        self.v_req = array("i")
        self.v_pos = array("q")
        self.v_k = array("i")
        self.v_ns = array("i")
        self.v_acc = array("i")
        self.v_line = array("q")
        self.v_draft = array("i")
        self.v_draft_len = array("q")
        self.v_emit = array("i")
        self.v_emit_len = array("q")
        # proposes
        self.p_rows = array("i")
        self.p_nqpr = array("i")
        self.p_k = array("i")
        self.p_num_reqs = array("i")
        self.p_first = array("i")
        self.p_first_len = array("q")
        self.p_line = array("q")
        # phases
        self.ph: list[tuple[float, float, float, int, int]] = []
        self.ph_dev: list[tuple[float, float, float, float, int]] = []
        # logits, one converted block of arrays per chunk
        self._logit_columns = _LogitColumns()
        self._logits = _LogitChunk()

    # -- interning -----------------------------------------------------------------------------
    def _intern(self, name: str) -> int:
        code = self._req_code.get(name)
        if code is None:
            code = len(self.requests)
            self.requests.append(name)
            self._req_code[name] = code
        return code

    def _intern_bytes(self, raw: bytes) -> int:
        code = self._req_bytes.get(raw)
        if code is None:
            code = self._intern(raw.decode("utf-8", errors="backslashreplace"))
            self._req_bytes[raw] = code
        return code

    def unterminated(self, lineno: int, line: bytes) -> None:
        """Note a last line without its newline (after `feed` read or dropped it)."""
        if self.truncated:  # dropped as unparseable: already reported
            return
        self.truncated = True
        if line.lstrip().startswith(b"["):
            # a trace line cut at a field boundary can still parse: it is cut all the same
            self._finding(lineno, "truncated", "the trace ends inside a trace line (runner "
                          "killed?); that line was read as it stands")
        else:
            self._finding(lineno, "no-final-newline", "the trace ends without a newline; its "
                          "last line was read as it stands")

    def _finding(self, line: int, kind: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, kind, message))

    # -- lines ---------------------------------------------------------------------------------
    def feed(self, lines: list[bytes], first_lineno: int, last_is_partial: bool = False) -> None:
        # The logits regex fails on the first byte of any other line, so matching every line
        # is the cheapest way to find the bulk; the rest go through the field reader in order.
        matches = list(map(g.LOGITS_RE.match, lines))
        hits = [m.groups() for m in matches if m is not None]
        if hits:
            chunk = self._logits
            reqs, poss, rows, payloads = zip(*hits, strict=False)
            chunk.req.extend(map(self._intern_bytes, reqs))
            chunk.pos.extend(map(int, poss))
            chunk.row.extend(map(int, rows))
            chunk.payload.extend(payloads)
            chunk.line.extend(first_lineno + i for i, m in enumerate(matches) if m is not None)
        last = len(lines) - 1
        try:
            for i in [i for i, m in enumerate(matches) if m is None]:
                try:
                    self._line(lines[i].rstrip(), first_lineno + i)
                except g.FieldError as exc:
                    if last_is_partial and i == last:
                        self.truncated = True
                        self._finding(first_lineno + i, "truncated",
                                      "the trace ends mid-line (runner killed?); read up to the "
                                      f"cut, this last line dropped: {exc}")
                        continue
                    raise TraceError(self.path, first_lineno + i, str(exc)) from None
        except TraceError as late:
            # Report the first bad line of the file, whichever path found it: a bad logits
            # line before `late` raises from the flush instead.
            self._flush_logits(before=late.line)
            raise
        self.lines_total += len(lines)
        self._flush_logits()

    def _flush_logits(self, before: int | None = None) -> None:
        chunk = self._logits
        if before is not None:
            keep = [i for i, line in enumerate(chunk.line) if line < before]
            for name in ("req", "pos", "row", "line", "payload"):
                values = getattr(chunk, name)
                setattr(chunk, name, [values[i] for i in keep])
        if chunk.payload:
            self._logit_columns.extend(chunk.to_arrays(self.path))
        self._logits = _LogitChunk()

    def _line(self, line: bytes, lineno: int) -> None:
        tag = g.tag_of(line)
        if tag is None:
            if line.startswith(g.NOTICE_PREFIX) and g.NOTICE_MARK in line:
                req = line[len(g.NOTICE_PREFIX):].split(b" ", 1)[0]
                text = line.decode("utf-8", errors="backslashreplace")
                self.notices.append(Notice(lineno, req.decode("utf-8", "backslashreplace"), text))
                self._finding(lineno, "outgrown", text)
            elif line.startswith(g.ENGINE_ERROR_PREFIX):
                self.engine_errors.append(Finding(
                    self.path, lineno, "engine-error", line.decode("utf-8", "backslashreplace")))
            else:
                self.lines_skipped += 1
            return
        fields = g.read_fields(tag, line[len(tag):])
        if tag == g.TAG_VERIFY:
            self._verify(fields, lineno)  # type: ignore[arg-type]
        elif tag == g.TAG_PROPOSE:
            self._propose(fields, lineno)
        elif tag == g.TAG_PHASE:
            f = fields
            self.ph.append((f["pre"], f["backbone"], f["sample"], f["logits"], lineno))  # type: ignore[index,arg-type]  # fields is the grammar's untyped dict
        elif tag == g.TAG_PHASE_DEV:
            f = fields
            self.ph_dev.append((f["pre"], f["fwd"], f["select"], f["walk"], lineno))  # type: ignore[index,arg-type]  # fields is the grammar's untyped dict
        elif tag == g.TAG_ROUTE:
            self.routes.append(Route(lineno, fields["counters"]))  # type: ignore[index,arg-type]  # untyped dict
        elif tag == g.TAG_DRAFTING:
            self._declare_drafting(fields["kind"], lineno)  # type: ignore[index, arg-type]  # untyped dict
        elif tag == g.TAG_LOGITS:
            # Only reached when the fast regex rejected the line but the field reader accepted it
            # (e.g. extra spaces); keep it through the same path.
            # the items as printed (the field reader has checked them): digits are counted on
            # the text
            raw_top = dict(g.split_fields(tag, line[len(tag):]))["top"]
            payload = b" ".join(raw_top[1:-1].split())
            self._logits.req.append(self._intern(fields["req"]))  # type: ignore[index, arg-type]
            self._logits.pos.append(fields["pos"])  # type: ignore[index, arg-type]
            self._logits.row.append(fields["row"])  # type: ignore[index, arg-type]
            self._logits.line.append(lineno)
            self._logits.payload.append(payload)

    def _declare_drafting(self, kind: DraftingKind, lineno: int) -> None:
        """One drafting kind per trace: a second header may repeat it, never contradict it."""
        if self.drafting is not None and kind is not self.drafting:
            raise TraceError(self.path, lineno,
                             f"[spec-drafting] kind={kind.value} contradicts "
                             f"kind={self.drafting.value} declared at line {self._drafting_line}")
        if self.drafting is None:
            self.drafting, self._drafting_line = kind, lineno

    def _verify(self, f: dict[str, object], lineno: int) -> None:
        req: str = f["req"]  # type: ignore[assignment]
        pos, k, ns, acc = (int(f[n]) for n in ("pos", "k", "ns", "acc"))  # type: ignore[call-overload]
        draft: list[int] = f["draft"]  # type: ignore[assignment]
        emit: list[int] = f["emit"]  # type: ignore[assignment]
        where = f"[SPECTRACE] req={req} pos={pos}"
        if len(draft) != k:
            self._finding(lineno, "invariant", f"{where}: k={k} but draft has {len(draft)} ids")
        if len(emit) != ns:
            self._finding(lineno, "invariant", f"{where}: ns={ns} but emit has {len(emit)} ids")
        if acc != max(ns - 1, 0):
            self._finding(lineno, "invariant", f"{where}: acc={acc} but max(ns-1, 0)={max(ns - 1, 0)}")
        if emit[:acc] != draft[:acc]:
            self._finding(lineno, "invariant",
                          f"{where}: emit[:acc] {emit[:acc]} differs from draft[:acc] {draft[:acc]}")
        self.v_req.append(self._intern(req))
        self.v_pos.append(pos)
        self.v_k.append(k)
        self.v_ns.append(ns)
        self.v_acc.append(acc)
        self.v_line.append(lineno)
        self.v_draft.extend(draft)
        self.v_draft_len.append(len(draft))
        self.v_emit.extend(emit)
        self.v_emit_len.append(len(emit))

    def _propose(self, f: dict[str, object] | g.NoPropose, lineno: int) -> None:
        if isinstance(f, g.NoPropose):
            self.p_rows.append(0)
            self.p_nqpr.append(-1)
            self.p_k.append(-1)
            self.p_num_reqs.append(f.num_reqs)
            self.p_first_len.append(0)
        else:
            first: list[int] = f["first"]  # type: ignore[assignment]
            k = int(f["drafts/row"])  # type: ignore[call-overload]
            if len(first) != k:
                self._finding(lineno, "invariant",
                              f"[spec-propose] drafts/row={k} but first has {len(first)} ids")
            self.p_rows.append(int(f["rows"]))  # type: ignore[call-overload]
            self.p_nqpr.append(int(f["nqpr"]))  # type: ignore[call-overload]
            self.p_k.append(k)
            self.p_num_reqs.append(-1)
            self.p_first.extend(first)
            self.p_first_len.append(len(first))
        self.p_line.append(lineno)

    # -- the result ----------------------------------------------------------------------------
    def finish(self) -> ArmTrace:
        verifies = Verifies(
            req=np.asarray(self.v_req, dtype=np.int32), pos=np.asarray(self.v_pos, dtype=np.int64),
            k=np.asarray(self.v_k, dtype=np.int32), ns=np.asarray(self.v_ns, dtype=np.int32),
            acc=np.asarray(self.v_acc, dtype=np.int32),
            draft_ids=np.asarray(self.v_draft, dtype=np.int32), draft_off=_offsets(self.v_draft_len),
            emit_ids=np.asarray(self.v_emit, dtype=np.int32), emit_off=_offsets(self.v_emit_len),
            line=np.asarray(self.v_line, dtype=np.int64))
        proposes = Proposes(
            rows=np.asarray(self.p_rows, dtype=np.int32), nqpr=np.asarray(self.p_nqpr, dtype=np.int32),
            k=np.asarray(self.p_k, dtype=np.int32), num_reqs=np.asarray(self.p_num_reqs, dtype=np.int32),
            first_ids=np.asarray(self.p_first, dtype=np.int32), first_off=_offsets(self.p_first_len),
            line=np.asarray(self.p_line, dtype=np.int64))
        ph = np.asarray([row[:3] for row in self.ph], dtype=np.float64).reshape(-1, 3)
        ph_counts = np.asarray([row[3:] for row in self.ph], dtype=np.int64).reshape(-1, 2)
        dev = np.asarray(self.ph_dev, dtype=np.float64).reshape(-1, 5)
        phases = Phases(pre=ph[:, 0], backbone=ph[:, 1], sample=ph[:, 2],
                        logits=ph_counts[:, 0], line=ph_counts[:, 1],
                        dev_pre=dev[:, 0], dev_fwd=dev[:, 1], dev_select=dev[:, 2],
                        dev_walk=dev[:, 3], dev_line=dev[:, 4].astype(np.int64))
        logits = self._logit_columns.result()
        self._check_positions(verifies)
        self._check_logits(logits)
        self.findings.sort(key=lambda f: f.line)
        return ArmTrace(
            path=self.path, requests=tuple(self.requests), verifies=verifies,
            proposes=proposes, logits=logits, phases=phases, routes=tuple(self.routes),
            notices=tuple(self.notices), findings=tuple(self.findings),
            lines_total=self.lines_total, lines_skipped=self.lines_skipped,
            engine_errors=tuple(self.engine_errors),
            truncated=self.truncated, drafting=self.drafting)

    def _check_positions(self, v: Verifies) -> None:
        """Per request, each verify starts where the previous one's emit left off."""
        expected: dict[int, tuple[int, int]] = {}
        for req, pos, ns, line in zip(v.req.tolist(), v.pos.tolist(), v.ns.tolist(),
                                      v.line.tolist(), strict=True):
            prev = expected.get(req)
            if prev is not None and prev[0] != pos:
                self._finding(line, "invariant",
                              f"[SPECTRACE] req={self.requests[req]}: pos={pos}, but the previous "
                              f"verify (line {prev[1]}) leads to pos={prev[0]}")
            expected[req] = (pos + ns, line)

    def _check_logits(self, lg: LogitRows) -> None:
        if not len(lg):
            return
        cols = np.arange(lg.top_vals.shape[1])[None, :] < lg.width[:, None]
        nonfinite = np.flatnonzero(~np.all(np.isfinite(lg.top_vals) | ~cols, axis=1))
        for i in nonfinite[:1000].tolist():
            self._finding(int(lg.line[i]), "non-finite",
                          f"[spec-logits] req={self.requests[lg.req[i]]} pos={lg.pos[i]} "
                          f"row={lg.row[i]}: non-finite logit in the top list")
        if nonfinite.size > 1000:
            self._finding(int(lg.line[nonfinite[1000]]), "non-finite",
                          f"... and {nonfinite.size - 1000} more rows with non-finite logits")
        narrow = np.flatnonzero(lg.width < 2)
        for i in narrow[:100].tolist():
            self._finding(int(lg.line[i]), "invariant",
                          f"[spec-logits] row={lg.row[i]}: fewer than two entries, margin undefined")
        if lg.top_vals.shape[1] >= 2:
            with np.errstate(invalid="ignore"):
                rising = (lg.top_vals[:, 1:] > lg.top_vals[:, :-1]) & cols[:, 1:]
            for i in np.flatnonzero(rising.any(axis=1))[:100].tolist():
                self._finding(int(lg.line[i]), "invariant",
                              "[spec-logits] top list is not ordered highest first")
        for i in np.flatnonzero(lg.row < 1)[:100].tolist():
            self._finding(int(lg.line[i]), "invariant",
                          f"[spec-logits] row={lg.row[i]}: rows are 1..k (row 0 is the anchor)")


def _offsets(lengths: array[int]) -> np.ndarray:
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    if len(lengths):
        np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=off[1:])
    return off


class _Column:
    """A column that grows in place (realloc, which the OS can satisfy by remapping), so the
    parsed arrays are never held twice; pages past the filled rows are never touched."""

    def __init__(self, dtype: type, fill: float | None = None) -> None:
        self.dtype = dtype
        self.fill = fill
        self.data: np.ndarray | None = None
        self.n = 0

    def extend(self, piece: np.ndarray) -> None:
        rows = piece.shape[0]
        if self.data is None:
            self.data = np.empty((max(rows, 1024),) + piece.shape[1:], dtype=self.dtype)
        if piece.ndim == 2 and piece.shape[1] > self.data.shape[1]:
            wider: np.ndarray = np.full((self.data.shape[0], piece.shape[1]), self.fill, dtype=self.dtype)
            wider[:, : self.data.shape[1]] = self.data
            self.data = wider
        need = self.n + rows
        if need > self.data.shape[0]:
            self.data.resize((max(need, 2 * self.data.shape[0]),) + self.data.shape[1:],
                             refcheck=False)
        if piece.ndim == 2:
            width = piece.shape[1]
            self.data[self.n:need, :width] = piece
            if width < self.data.shape[1]:
                self.data[self.n:need, width:] = self.fill
        else:
            self.data[self.n:need] = piece
        self.n = need

    def result(self, empty_shape: tuple[int, ...]) -> np.ndarray:
        if self.data is None:
            return np.zeros(empty_shape, dtype=self.dtype)
        self.data.resize((self.n,) + self.data.shape[1:], refcheck=False)
        return self.data


class _LogitColumns:
    def __init__(self) -> None:
        self.req = _Column(np.int32)
        self.pos = _Column(np.int64)
        self.row = _Column(np.int32)
        self.top_ids = _Column(np.int32, fill=-1)
        self.top_vals = _Column(np.float64, fill=np.nan)
        self.width = _Column(np.int32)
        self.line = _Column(np.int64)
        self.sig_digits = _Column(np.int8)

    def extend(self, arrays: list[np.ndarray]) -> None:
        for column, piece in zip((self.req, self.pos, self.row, self.top_ids, self.top_vals,
                                  self.width, self.line, self.sig_digits), arrays, strict=False):
            column.extend(piece)

    def result(self) -> LogitRows:
        return LogitRows(req=self.req.result((0,)), pos=self.pos.result((0,)),
                         row=self.row.result((0,)), top_ids=self.top_ids.result((0, 0)),
                         top_vals=self.top_vals.result((0, 0)), width=self.width.result((0,)),
                         line=self.line.result((0,)),
                         sig_digits=self.sig_digits.result((0,)))


def parse_trace(path: str | os.PathLike[str], *, chunk_bytes: int = CHUNK_BYTES) -> ArmTrace:
    """Parse a captured trace file; a missing file is a UsageError, a bad line a TraceError."""
    p = Path(path)
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise UsageError(f"{p}: no such trace file") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a directory, not a trace file") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror}") from None
    builder = TraceBuilder(str(p))
    lineno = 1
    carry = b""
    with fh:
        while True:
            chunk = fh.read(chunk_bytes)
            if not chunk:
                break
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            lines = buf[:cut].split(b"\n")
            carry = buf[cut + 1:]
            del buf
            builder.feed(lines, lineno)
            lineno += len(lines)
    if carry:
        builder.feed([carry], lineno, last_is_partial=True)
        builder.unterminated(lineno, carry)
    return builder.finish()


def parse_text(text: str | bytes, path: str = "<text>") -> ArmTrace:
    """Parse trace text held in memory (tests, and runners driven in-process)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    builder = TraceBuilder(path)
    if not data:
        return builder.finish()
    complete = data.endswith(b"\n")
    lines = (data[:-1] if complete else data).split(b"\n")
    if complete:
        builder.feed(lines, 1)
    else:
        builder.feed(lines[:-1], 1)
        builder.feed(lines[-1:], len(lines), last_is_partial=True)
        builder.unterminated(len(lines), lines[-1])
    return builder.finish()


def parse_lines(lines: Iterable[str], path: str = "<lines>") -> ArmTrace:
    """Parse an iterable of lines without newlines."""
    return parse_text("".join(line + "\n" for line in lines), path)
