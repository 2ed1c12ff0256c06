"""Hypothesis strategies for trace text, written from the format strings in TRACE-FORMAT.md and
independent of the parser: valid lines of every kind (with what they should parse to), other
program output, and mutations of valid lines."""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass, field

from hypothesis import strategies as st

INT32 = st.integers(-(2**31), 2**31 - 1)
SMALL_ID = st.integers(-5, 70000)
IDS = st.one_of(SMALL_ID, INT32)
REQ = st.text(alphabet="abcxyz019-_.:/é", min_size=1, max_size=6).filter(lambda s: s[0] != "[")


def halfway(x: float) -> decimal.Decimal:
    """The exact decimal halfway between a finite double and the next one up."""
    ctx = decimal.Context(prec=1200)
    up = math.nextafter(x, math.inf)
    return ctx.divide(ctx.add(decimal.Decimal(x), decimal.Decimal(up)), 2)


@st.composite
def hard_float_text(draw: st.DrawFn) -> str:
    """Spellings at the edges of exact decimal-to-double reading: halfway points between two
    doubles written out exactly (round-half-even decides) or cut to 16-25 digits and nudged
    by one in the last digit, long mantissas with exponents, signed zeros, subnormals and the
    largest doubles."""
    kind = draw(st.sampled_from(["tie", "near", "mantissa", "zero", "subnormal", "huge"]))
    sign = draw(st.sampled_from(["", "-", "+"]))
    if kind in ("tie", "near"):
        x = draw(st.floats(1e-60, 1e60, allow_nan=False, allow_infinity=False))
        mid = halfway(x)
        if kind == "tie":
            return sign + (format(mid, "f") if draw(st.booleans()) else format(mid, "e"))
        digits = draw(st.integers(16, 25))
        head, exp = format(mid, f".{digits - 1}e").split("e")
        last = int(head[-1]) + draw(st.sampled_from([-1, 0, 1]))
        if 0 <= last <= 9:
            head = head[:-1] + str(last)
        return f"{sign}{head}e{exp}"
    if kind == "mantissa":  # 16-21 digits, exponents around the exact powers of ten
        digits = draw(st.text(alphabet="0123456789", min_size=16, max_size=21))
        point = draw(st.integers(0, len(digits)))
        exp = draw(st.integers(-80, 80))
        return f"{sign}{digits[:point]}.{digits[point:]}e{exp}"
    if kind == "zero":
        return sign + draw(st.sampled_from(["0", "0.0", "0e5", "0.000e-30", "00.00", ".0e99"]))
    if kind == "subnormal":
        x = draw(st.floats(0, 2.2250738585072014e-308, allow_subnormal=True))
        return sign + draw(st.sampled_from([repr(x), f"{x:.17g}", f"{x:.25e}"]))
    return sign + draw(st.sampled_from(["1.7976931348623157e308", "1.7976931348623158e308",
                                        "1.7976931348623159e308", "2.2250738585072011e-308",
                                        "2.2250738585072012e-308", "4.9e-324", "2.4703282292062328e-324"]))


@st.composite
def logit_text(draw: st.DrawFn) -> str:
    """A logit as a printf %g / %.9g / %f / odd-but-valid spelling would print it."""
    kind = draw(st.sampled_from(["g6", "g9", "f", "e", "special", "odd", "long", "g17",
                                 "hard"]))
    if kind == "hard":
        return draw(hard_float_text())
    x = draw(st.floats(-1e6, 1e6, allow_nan=False, width=32))
    if kind == "g17":  # any double, shortest and 17 digits
        y = draw(st.floats(allow_nan=False, allow_infinity=False))
        return repr(y) if draw(st.booleans()) else f"{y:.17g}"
    if kind == "g6":
        return f"{x:.6g}"
    if kind == "g9":
        return f"{x:.9g}"
    if kind == "f":
        return f"{x:.{draw(st.integers(0, 4))}f}"
    if kind == "e":
        return f"{x:.{draw(st.integers(0, 12))}e}".replace("e", draw(st.sampled_from("eE")))
    if kind == "special":
        return draw(st.sampled_from(["nan", "inf", "-inf", "NaN", "-nan", "+NAN", "+inf", "INF", "-0", "0",
                                     "-0.0", "+0", "1e999", "-1e-999", "4.9e-324", "1e308"]))
    if kind == "long":  # long mantissas and exponents: the exact slow path
        digits = draw(st.text(alphabet="0123456789", min_size=16, max_size=40))
        exp = draw(st.integers(-330, 330))
        return f"{draw(st.sampled_from(['', '-', '+']))}{digits[:3]}.{digits[3:]}e{exp}"
    return draw(st.sampled_from(["5.", ".5", "+.5e-3", "007.50", "1E+05", "-.0", "12e0",
                                 "0.000001234", "123456789012345", "9007199254740993",
                                 "0.1", "2.2250738585072011e-308"]))


@dataclass
class Expected:
    """What a generated trace must parse to (only for valid traces)."""

    logits: list[tuple[str, int, int, list[int], list[float]]] = field(default_factory=list)
    verifies: list[tuple[str, int, int, int, int, list[int], list[int]]] = field(
        default_factory=list)
    proposes: list[tuple[int, int, int, list[int]]] = field(default_factory=list)
    phases: list[tuple[float, float, float, int]] = field(default_factory=list)
    forced_lines: bool = False  # a line of other output holds `[spec-forced]`


def id_list(ids: list[int], style: str) -> str:
    if style == "producer":  # every id followed by one space
        return "[ " + "".join(f"{i} " for i in ids) + "]"
    return "[" + " ".join(map(str, ids)) + "]"


@st.composite
def valid_trace(draw: st.DrawFn) -> tuple[list[str], Expected]:
    exp = Expected()
    lines: list[str] = []
    pos: dict[str, int] = {}
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["logits", "logits", "verify", "propose", "phase", "noise",
                                     "nopropose", "dev", "route", "config", "empty"]))
        style = draw(st.sampled_from(["producer", "trimmed"]))
        if kind == "logits":
            req = draw(REQ)
            p = draw(st.integers(0, 2**40 - 1))
            row = draw(st.integers(0, 2**31 - 1))
            n = draw(st.integers(0, 5))
            ids = [draw(IDS) for _ in range(n)]
            texts = [draw(logit_text()) for _ in range(n)]
            body = " ".join(f"{i}:{t}" for i, t in zip(ids, texts, strict=True))
            top = f"[ {body} ]" if style == "producer" else f"[{body}]"
            lines.append(f"[spec-logits] req={req} pos={p} row={row} top={top}")
            exp.logits.append((req, p, row, ids, [float(t) for t in texts]))
        elif kind == "verify":
            req = draw(REQ)
            p = pos.get(req, draw(st.integers(0, 1000)))
            k = draw(st.integers(0, 5))
            draft = [draw(IDS) for _ in range(k)]
            ns = draw(st.integers(1, k + 1))
            acc = ns - 1
            emit = draft[:acc] + [draw(IDS)]
            pos[req] = p + ns
            lines.append(f"[SPECTRACE] req={req} pos={p} k={k} ns={ns} acc={acc} "
                         f"draft={id_list(draft, style)} emit={id_list(emit, style)}")
            exp.verifies.append((req, p, k, ns, acc, draft, emit))
        elif kind == "propose":
            k = draw(st.integers(0, 5))
            first = [draw(IDS) for _ in range(k)]
            rows, nqpr = draw(st.integers(1, 64)), k + 1
            lines.append(f"[spec-propose] rows={rows} nqpr={nqpr} drafts/row={k} "
                         f"first={id_list(first, style)}")
            exp.proposes.append((rows, nqpr, k, first))
        elif kind == "nopropose":
            n = draw(st.integers(0, 9))
            lines.append(f"[spec-propose] NO proposing rows this step (num_reqs={n})")
            exp.proposes.append((0, -1, -1, []))
        elif kind == "phase":
            ms = [draw(st.floats(0, 1e4, allow_nan=False)) for _ in range(3)]
            count = draw(st.integers(0, 2**63 - 1))
            lines.append(f"[spec-phase] pre={ms[0]:.2f}ms backbone={ms[1]:.2f}ms "
                         f"sample={ms[2]:.2f}ms logits={count}")
            exp.phases.append((float(f"{ms[0]:.2f}"), float(f"{ms[1]:.2f}"),
                               float(f"{ms[2]:.2f}"), count))
        elif kind == "dev":
            lines.append("[spec-phase-dev] pre=0.05ms fwd=1.20ms select=0.30ms walk=0.10ms")
        elif kind == "route":
            lines.append("[dflash-route] paged_seam=3 block_kernel=0 combined=1")
        elif kind == "config":  # repeats of one setting agree: they merge
            lines.append("[spec-config] lane=paged attention=split threads=1")
        elif kind == "empty":
            lines.append("")
        else:
            other = draw(st.sampled_from([
                "[graph-dispatch] captured batch=4", "vt-dump-logits: wrote 96 floats",
                "INFO something", "[not-a-tag] x=1", "[spec-logits", "  [SPECTRACE] indented",
                "vllm.cpp: draft speculative context is limited", "\x00\x01binary\xff",
                # tags past the line start: findings, never read
                "node7| [SPECTRACE] req=a pos=1 k=0 ns=1 acc=0 draft=[ ] emit=[ 5 ]",
                "step 4 done[spec-logits] req=a pos=1 row=1 top=[ 1:0.5 2:0.25 ]",
                "  vt: propose_drafts_block: failed", "\tvt: x", "x3:vt: x", "12 tokens [ok]",
                "node7| vllm.cpp: request r has outgrown the draft speculative context",
                "[graph] [spec-phase] pre=0.1ms", "0: plain", "  plain",
                # program output with a `[` or a leading digit that holds no tag: skipped
                "INFO 12-06 18:09:31 [engine.py:42] Avg prompt throughput: 0.0 tokens/s",
                "[spec-phase-devx] x=1", "[spec-logitsy] [SPECTRACEx] [dflash-route", "3 [ok] vtx: 1",
                "  [rank0]: loading", "[2026-12-03 16:20:01] served",
                # a forced arm's commits (noted, ArmTrace.forced_lines), and a near miss
                "[spec-forced] req=a pos=3 commit=[ 5 6 ]", "0: [spec-forced] req=a pos=3",
                "x[spec-forced]", "[spec-force] req=a", "[spec-forced",
                # and inside lines the field reader reads as something else
                "vllm.cpp: request r has outgrown the draft speculative context [spec-forced]",
                "[spec-forced] req=a [spec-phase] pre=0.1ms"]))
            lines.append(other)
            exp.forced_lines |= "[spec-forced]" in other
    return lines, exp


MUTATION_ALPHABET = "0123456789 -+.:=[]eEnaifNAIF\t\r\x00\x7fé_x/"


@st.composite
def mutated_trace(draw: st.DrawFn) -> str:
    """A valid trace with a few lines edited: characters inserted, deleted or replaced."""
    lines, _ = draw(valid_trace())
    if not lines:
        lines = ["[SPECTRACE] req=a pos=0 k=1 ns=1 acc=0 draft=[ 3 ] emit=[ 4 ]"]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        at = draw(st.integers(0, len(line)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "cut", "digits", "dup",
                                   "prefix"]))
        ch = draw(st.sampled_from(MUTATION_ALPHABET))
        if op == "insert":
            line = line[:at] + ch + line[at:]
        elif op == "delete":
            line = line[:at] + line[at + 1:]
        elif op == "replace":
            line = line[:at] + ch + line[at + 1:]
        elif op == "cut":
            line = line[:at]
        elif op == "prefix":  # launchers, loggers, indentation, another process's text
            line = draw(st.sampled_from(["0: ", "  ", "\t", "17:", "out[", "[rank0]: ",
                                         "2026-12-03 16:20:01 ", "2026-12-03T16:20:01.5Z ",
                                         "INFO vllm: ", "WARNING:root:", "node7| ",
                                         "[rank1]: 3: ", "vt: ", "[2026-12-03 16:20:01] ",
                                         "ERROR 12-03 16:20:01 [engine.py:42] "])) + line
        elif op == "digits":  # a huge integer somewhere
            line = line[:at] + "9" * draw(st.sampled_from([11, 20, 5000])) + line[at:]
        else:
            lines.insert(i, line)
        lines[i] = line
    text = "\n".join(lines)
    return text + ("\n" if draw(st.booleans()) else "")
