"""Property tests of the parser: generated traces round-trip exactly, mutated traces only ever
raise difftest's own error, and the compiled and pure-Python readers agree on everything
(arrays, findings, errors), also when the file is read in small chunks."""

from __future__ import annotations

import ctypes
import platform
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from difftest.core.errors import DifftestError, TraceError
from difftest.core.model import ArmTrace
from difftest.trace import fast_path_available, parse_text, parse_trace
from difftest.trace import grammar as g
from tests.trace_strategies import (
    halfway,
    hard_float_text,
    logit_text,
    mutated_trace,
    valid_trace,
)

needs_fast = pytest.mark.skipif(not fast_path_available(),
                                reason="the compiled scanner is not built")
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def bits(a: np.ndarray) -> np.ndarray:
    """Arrays compared bit for bit (so -0.0, nan and its sign count)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint64) if a.dtype == np.float64 else a


def snapshot(t: ArmTrace) -> dict[str, object]:
    """Everything a trace says, in comparable form."""
    out: dict[str, object] = {
        "requests": t.requests, "lines_total": t.lines_total, "skipped": t.lines_skipped,
        "truncated": t.truncated, "drafting": t.drafting, "forced_lines": t.forced_lines,
        "findings": [(f.line, f.kind, f.message) for f in t.findings],
        "engine_errors": [(f.line, f.message) for f in t.engine_errors],
        "notices": [(n.line, n.req, n.text) for n in t.notices],
        "routes": [(r.line, r.counters) for r in t.routes],
        "config": (dict(t.config.values), dict(t.config.lines)),
    }
    for group in ("verifies", "proposes", "logits", "phases"):
        obj = getattr(t, group)
        for name, value in vars(obj).items():
            assert isinstance(value, np.ndarray), (group, name)
            out[f"{group}.{name}"] = (value.dtype.str, value.shape, bits(value).tobytes())
    return out


def outcome(text: bytes, *, pure: bool) -> object:
    try:
        return snapshot(parse_text(text, path="t.log", pure=pure))
    except TraceError as exc:
        return ("error", str(exc))


@needs_fast
@SETTINGS
@given(st.one_of(mutated_trace(), valid_trace().map(lambda v: "\n".join(v[0]) + "\n")))
def test_compiled_and_pure_readers_agree(text: str) -> None:
    data = text.encode("utf-8", "surrogateescape")
    assert outcome(data, pure=False) == outcome(data, pure=True)


@needs_fast
@SETTINGS
@given(st.lists(st.text(alphabet="0123456789 -+.:eEnaifNAIF]x\t", max_size=12), min_size=1,
                max_size=4))
def test_readers_agree_on_odd_payload_items(items: list[str]) -> None:
    """Number-like junk inside a top list: the bulk readers must reject exactly what the
    field reader rejects, and read the rest to the same bits."""
    line = "[spec-logits] req=r pos=1 row=1 top=[ " + " ".join(f"1:{x}" for x in items) + " ]\n"
    for text in (line, "noise\n" + line * 3):
        assert outcome(text.encode(), pure=False) == outcome(text.encode(), pure=True)


# Lines at the edges of the pure reader's bulk path (bulk.py): each is either read in bulk to
# the field reader's values or left to the field reader, which reads it or names the fault.
EDGE_LINES = [
    "top=[ 1:2.5  3:-0.0 ]", "top=[1:2]", "top=[ ]", "top=[]", "top=[ 1:2\t3:1 ]",
    "top=[ 1:2 ] ", "top=[ 1:2 ]\r", "top=[ 1:2 ]x", "top=[ 1:2 ] ]", "top=[ 1:2] 3:1 ]",
    "top=[ 1:2:3 ]", "top=[ 1::2 ]", "top=[ :2 ]", "top=[ 1: 2 ]", "top=[ 1 :2 ]",
    "top=[ 1:1e5 2:1E-05 ]", "top=[ 1:-nan 2:inf 3:-INF 4:NaN ]", "top=[ 1:1.2.3 ]",
    "top=[ 1:.5 2:5. 3:-.5 4:+5 ]", "top=[ 1:1234567890123456 2:0.1234567890123456 ]",
    "top=[ 1:" + "7" * 400 + " ]", "top=[ 2147483648:1 ]", "top=[ -2147483648:1 ]",
    "top=[ 00000000001:1 ]", "top=[ +3:1 -0:2 ]", "top=[ 1:- ]", "top=[ 1:. ]",
    "top=[ 1:0.000000000000000000001 ]", "top=[ 1:1e400 2:-1e-400 ]",
    "top=[:]", "top=[ : ]", "top=[ :1:2 ]", "top=[ 1:2 :3:4 ]", "top=[1:2 3:4 :]",
]
EDGE_HEADS = ["req=r pos=1 row=1", "req=r pos=+1 row=1", "req=[r pos=1 row=1",
              "req=r\x7f pos=1 row=1", "req=r  pos=1 row=1", "req=r pos=1099511627776 row=1",
              "req=r pos=1 row=2147483648", "req=r pos=01 row=0001", "req=" + "n" * 80 + " pos=1 row=1",
              "req=r pos= row=1", "req=r pos=1 row=1 extra=2"]


@needs_fast
@pytest.mark.parametrize("head", EDGE_HEADS)
def test_readers_agree_at_the_edges_of_the_bulk_path(head: str) -> None:
    for top in EDGE_LINES:
        line = f"[spec-logits] {head} {top}"
        text = f"noise\n[spec-logits] req=ok pos=1 row=1 top=[ 5:1 ]\n{line}\n{line}\n"
        data = text.encode("utf-8", "surrogateescape")
        assert outcome(data, pure=False) == outcome(data, pure=True), line


@SETTINGS
@given(valid_trace(), st.booleans())
def test_generated_traces_round_trip_exactly(generated: tuple[list[str], object],
                                             pure: bool) -> None:
    lines, exp = generated
    t = parse_text("\n".join(lines) + "\n", pure=pure)
    lg = t.logits
    assert len(lg) == len(exp.logits)  # type: ignore[attr-defined]
    for i, (req, pos, row, ids, vals) in enumerate(exp.logits):  # type: ignore[attr-defined]
        w = int(lg.width[i])
        assert (t.requests[lg.req[i]], int(lg.pos[i]), int(lg.row[i])) == (req, pos, row)
        assert lg.top_ids[i, :w].tolist() == ids
        got = lg.top_vals[i, :w]
        assert bits(got).tolist() == bits(np.array(vals, dtype=np.float64)).tolist()
    v = t.verifies
    assert len(v) == len(exp.verifies)  # type: ignore[attr-defined]
    for i, (req, pos, k, ns, acc, draft, emit) in enumerate(exp.verifies):  # type: ignore[attr-defined]
        assert (t.requests[v.req[i]], int(v.pos[i]), int(v.k[i]), int(v.ns[i]),
                int(v.acc[i])) == (req, pos, k, ns, acc)
        assert v.draft(i).tolist() == draft and v.emit(i).tolist() == emit
    p = t.proposes
    assert [(int(p.rows[i]), int(p.nqpr[i]), int(p.k[i]), p.first(i).tolist())
            for i in range(len(p))] == exp.proposes  # type: ignore[attr-defined]
    ph = t.phases
    assert list(zip(ph.pre.tolist(), ph.backbone.tolist(), ph.sample.tolist(),
                    ph.logits.tolist(), strict=True)) == exp.phases  # type: ignore[attr-defined]
    assert not [f for f in t.findings if f.message.startswith("[SPECTRACE]")]
    assert t.forced_lines is exp.forced_lines  # type: ignore[attr-defined]


@SETTINGS
@given(mutated_trace(), st.booleans())
def test_mutated_traces_only_raise_difftest_errors(text: str, pure: bool) -> None:
    try:
        parse_text(text.encode("utf-8", "surrogateescape"), pure=pure)
    except DifftestError as exc:
        assert isinstance(exc, TraceError) and str(exc).startswith("<text>:")


@SETTINGS
@given(valid_trace(), st.integers(1, 64), st.booleans())
def test_chunked_file_reading_equals_reading_in_memory(tmp_path_factory: pytest.TempPathFactory,
                                                       generated: tuple[list[str], object],
                                                       chunk: int, pure: bool) -> None:
    text = ("\n".join(generated[0]) + "\n").encode("utf-8", "surrogateescape")
    path = tmp_path_factory.mktemp("chunks") / "t.log"
    path.write_bytes(text)
    whole = snapshot(parse_text(text, path=str(path), pure=pure))
    assert snapshot(parse_trace(path, chunk_bytes=chunk, pure=pure)) == whole


@needs_fast
@settings(max_examples=400, deadline=None)
@given(st.one_of(logit_text(), st.text(alphabet="0123456789.eE+-naifNAIF", max_size=30)))
@example("9007199254740993")
@example("2.2250738585072011e-308")
@example("-0")
@example("-nan")
@example("1" * 400)
@example("0." + "0" * 400 + "1e400")
def test_compiled_float_reader_equals_float(text: str) -> None:
    from difftest.trace import _scan  # type: ignore[attr-defined]

    got = _scan.read_float(text.encode())
    valid = g._FLOAT_RE.match(text.encode()) is not None
    if not valid:
        assert got is None
        return
    value, digits = got
    assert struct.pack("=d", value) == struct.pack("=d", float(text))
    assert digits == (min(g.sig_digits(text.encode()), 127) if np.isfinite(value) else 0)


@needs_fast
@settings(max_examples=1500, deadline=None)
@given(hard_float_text())
@example(format(halfway(0.1), "f"))  # a tie: round half to even, down
@example(format(halfway(1.0000000000000002), "f"))  # a tie, up to the even neighbour
@example("8.168997786612772713259102e-6")  # 25 digits just past a halfway point
@example("-5.334690538062148926e+12")  # 19 digits, 1e12: near a halfway point
@example("-0.000e-30")
@example("-8.928086950024424394e-20")  # 19 digits, two steps through powers of ten
def test_compiled_float_reader_is_exact_at_the_edges(text: str) -> None:
    """The scanner's exact fast paths (64-bit significand, exponents within 54, the exact
    comparison of digits with halfway points, and spellings kept per block) against float()."""
    from difftest.trace import _scan  # type: ignore[attr-defined]

    value, _ = _scan.read_float(text.encode())
    assert struct.pack("=d", value) == struct.pack("=d", float(text)), text


@needs_fast
def test_near_halfway_decimals_read_exactly() -> None:
    """19 to 21 digits just below, on and above the halfway points of doubles whose decimal
    exponent takes the scanner one or two steps through powers of ten (|e10| up to 54)."""
    from difftest.trace import _scan  # type: ignore[attr-defined]

    rng = np.random.default_rng(3)
    doubles = np.concatenate([10.0 ** rng.uniform(-36, -20, 3000),
                              10.0 ** rng.uniform(20, 48, 3000), rng.uniform(0.5, 2, 1000)])
    texts = []
    for x in doubles.tolist():
        mid = halfway(x)
        for digits in (19, 20, 21):
            head, exp = format(mid, f".{digits - 1}e").split("e")
            texts += [f"{head[:-1]}{d}e{exp}" for d in range(10)]
    wrong = [t for t in texts
             if struct.pack("=d", _scan.read_float(t.encode())[0]) != struct.pack("=d", float(t))]
    assert not wrong, wrong[:5]


@needs_fast
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or sys.platform != "linux",
                    reason="sets the x87 control word through glibc's fenv")
def test_floats_read_exactly_when_the_fpu_rounds_to_53_bits() -> None:
    """Some systems run the x87 at 53-bit precision: the scanner's 64-bit path must notice
    and leave those spellings to the exact reader."""
    from difftest.trace import _scan  # type: ignore[attr-defined]

    libm = ctypes.CDLL("libm.so.6")
    env = ctypes.create_string_buffer(64)  # fenv_t: the x87 control word first
    assert libm.fegetenv(env) == 0
    saved = env.raw
    word = struct.unpack_from("=H", saved, 0)[0]
    rounding_53 = bytearray(saved)
    struct.pack_into("=H", rounding_53, 0, (word & ~0x300) | 0x200)  # precision control: 53
    rng = np.random.default_rng(5)
    texts = []
    for x in (10.0 ** rng.uniform(-20, 20, 1000)).tolist():
        head, exp = format(halfway(x), ".18e").split("e")
        texts += [f"{head[:-1]}{d}e{exp}" for d in range(10)]
    assert libm.fesetenv(ctypes.create_string_buffer(bytes(rounding_53), 64)) == 0
    try:
        got = [_scan.read_float(t.encode())[0] for t in texts]
    finally:
        libm.fesetenv(ctypes.create_string_buffer(saved, 64))
    wrong = [t for t, v in zip(texts, got, strict=True)
             if struct.pack("=d", v) != struct.pack("=d", float(t))]
    assert not wrong, wrong[:5]


def test_many_rare_spellings_in_one_block_read_exactly() -> None:
    """Values only CPython's reader converts, many of one length (the scanner keeps such
    spellings per block by their text: a collision must not hand one value to another)."""
    rng = np.random.default_rng(7)
    tiny = rng.integers(1, 2**52, 3000) * 2.0**-1074  # subnormals
    texts = [f"{float(v):.17e}" for v in tiny] + ["4.9e-324", "-4.9e-324"] * 50
    texts += [f"{float(v):.17e}" for v in tiny[:500]]  # the same spellings again
    lines = [f"[spec-logits] req=r pos={i} row=1 top=[ 1:{t} ]" for i, t in enumerate(texts)]
    want = bits(np.array([float(t) for t in texts]))
    for pure in (False, True):
        got = parse_text("\n".join(lines) + "\n", pure=pure).logits.top_vals[:, 0]
        assert bits(got).tolist() == want.tolist()


def test_request_names_with_one_hash_stay_apart() -> None:
    """The scanner codes request names from a per-block table: two names with one 32-bit hash
    (and one length), and more names than the table holds, each keep their own request."""
    names = ["r0667786", "r1526240", "req-991307", "req-1971740"] + [f"n{i}" for i in range(300)]
    lines = [f"[SPECTRACE] req={name} pos={i} k=0 ns=1 acc=0 draft=[ ] emit=[ {i} ]"
             for name in names for i in range(3)]
    lines = lines[::2] + lines[1::2]
    text = ("\n".join(lines) + "\n").encode()
    t = parse_text(text, pure=False)
    assert [t.requests[r] for r in t.verifies.req.tolist()] == [line.split()[1][4:] for line in lines]
    assert outcome(text, pure=False) == outcome(text, pure=True)


def test_random_nine_digit_floats_read_exactly() -> None:
    """float32 values printed with %.9g, and the same with long random mantissas."""
    rng = np.random.default_rng(1)
    vals = rng.standard_normal(20000).astype(np.float32) * np.float32(30)
    texts = [f"{float(v):.9g}" for v in vals] + [f"{float(v):.17g}" for v in vals[:2000]]
    lines = [f"[spec-logits] req=r pos=1 row=1 top=[ 1:{t} ]" for t in texts]
    for pure in (False, True):
        got = parse_text("\n".join(lines) + "\n", pure=pure).logits.top_vals[:, 0]
        assert bits(got).tolist() == bits(np.array([float(t) for t in texts])).tolist()
    assert np.array_equal(got[:20000].astype(np.float32), vals)


def test_readers_agree_on_the_golden_traces() -> None:
    data = Path(__file__).parents[1] / "data"
    for path in sorted(data.glob("*.log")):
        text = path.read_bytes()
        assert outcome(text, pure=False) == outcome(text, pure=True), path
