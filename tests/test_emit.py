"""difftest.emit: what the Tracer writes, the parser reads back exactly."""

from __future__ import annotations

import io
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.emit import Tracer, top_pairs
from difftest.core.kinds import DraftingKind
from difftest.trace.parser import parse_text

# Request names as a runner may spell them: any printable text without whitespace.
# Any printable text without whitespace, and names made of the trace's own punctuation.
REQ = st.one_of(
    st.sampled_from(["r0", "x]", "a=b", "=", "top=[", "req=r1", ":", "é"]),
    st.text(alphabet=st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")),
            min_size=1, max_size=12).filter(lambda s: not any(c.isspace() for c in s)
                                            and not s.startswith("[")))
IDS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
F32 = st.floats(width=32, allow_nan=False)


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, int, list[int], list[int], np.ndarray | None]]:
    """A few verify steps of a few requests, emitted lossless (emit[:acc] == draft[:acc])."""
    names = draw(st.lists(REQ, min_size=1, max_size=3, unique=True))
    vocab = draw(st.integers(2, 24))
    out = []
    pos = {n: draw(st.integers(0, 2**40 - 100)) for n in names}
    for _ in range(draw(st.integers(1, 6))):
        req = draw(st.sampled_from(names))
        k = draw(st.integers(0, 5))
        drafted = draw(st.lists(IDS, min_size=k, max_size=k))
        acc = draw(st.integers(0, k))
        # the target's own token replaces a rejected draft: it cannot be that draft
        own = IDS if acc == k else IDS.filter(lambda t, d=drafted[acc]: t != d)
        emitted = drafted[:acc] + [draw(own)]
        logits = None
        if k and draw(st.booleans()):
            logits = np.array(draw(st.lists(st.lists(F32, min_size=vocab, max_size=vocab),
                                            min_size=k, max_size=k)), dtype=np.float32)
        out.append((req, pos[req], drafted, emitted, logits))
        pos[req] += len(emitted)
    return out


def expected_top(row: np.ndarray, k: int) -> list[tuple[int, np.float32]]:
    """Highest first, ties by the lower id: the order written down independently of top_pairs."""
    order = sorted(range(row.shape[0]), key=lambda i: (-float(row[i]), i))
    return [(i, row[i]) for i in order[:k]]


@settings(max_examples=150, deadline=None)
@given(steps(), st.integers(2, 9))
def test_round_trip_ids_logits_requests_positions_rows(
        script: list[tuple[str, int, list[int], list[int], np.ndarray | None]], top_k: int) -> None:
    buf = io.StringIO()
    tracer = Tracer(level=3, file=buf, top_k=top_k)
    for req, pos, drafted, emitted, logits in script:
        tracer.step(req, pos, drafted, emitted, logits=logits)
    trace = parse_text(buf.getvalue())
    # infinities are written and read back, and flagged as the parser flags them
    assert {f.kind for f in trace.findings} <= {"non-finite"}
    assert trace.lines_skipped == 0
    v = trace.verifies
    assert len(v) == len(script)
    expected_logit_rows = []
    for i, (req, pos, drafted, emitted, logits) in enumerate(script):
        assert trace.requests[v.req[i]] == req
        assert int(v.pos[i]) == pos
        assert (int(v.k[i]), int(v.ns[i]), int(v.acc[i])) == (len(drafted), len(emitted),
                                                              len(emitted) - 1)
        assert v.draft(i).tolist() == drafted
        assert v.emit(i).tolist() == emitted
        if logits is not None:
            for j in range(len(drafted)):
                expected_logit_rows.append((req, pos, j + 1, expected_top(logits[j], top_k)))
    lg = trace.logits
    assert len(lg) == len(expected_logit_rows)
    for n, (req, pos, row, top) in enumerate(expected_logit_rows):
        assert (trace.requests[lg.req[n]], int(lg.pos[n]), int(lg.row[n])) == (req, pos, row)
        width = int(lg.width[n])
        assert lg.top_ids[n, :width].tolist() == [i for i, _ in top]
        # 9 significant digits: the float32 read back is the float32 written, bit for bit
        back = lg.top_vals[n, :width].astype(np.float32)
        assert back.tobytes() == np.array([v for _, v in top], dtype=np.float32).tobytes()


def test_levels_gate_what_is_printed() -> None:
    logits = np.arange(12, dtype=np.float32).reshape(2, 6)
    printed = {}
    for level in (0, 1, 2, 3):
        buf = io.StringIO()
        Tracer(level=level, file=buf, drafting="block").step("r0", 5, [1, 2], [1, 4], logits)
        printed[level] = [line.split(" ", 1)[0] for line in buf.getvalue().splitlines()]
    assert printed[0] == []
    assert printed[1] == printed[2] == ["[spec-drafting]", "[spec-propose]", "[SPECTRACE]"]
    assert printed[3] == ["[spec-drafting]", "[spec-propose]", "[spec-logits]", "[spec-logits]",
                          "[SPECTRACE]"]


def test_level_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, level in (("", 0), ("0", 0), ("1", 1), ("3", 3), ("7", 3), ("yes", 1)):
        monkeypatch.setenv("VT_SPEC_TRACE", value)
        assert Tracer().level == level
    monkeypatch.delenv("VT_SPEC_TRACE")
    assert Tracer().level == 0


def test_a_step_that_drafts_nothing_carries_the_emitted_token() -> None:
    buf = io.StringIO()
    Tracer(level=3, file=buf).step("r0", 7, [], [42], logits=None)
    assert buf.getvalue().splitlines() == [
        "[spec-propose] NO proposing rows this step (num_reqs=1)",
        "[SPECTRACE] req=r0 pos=7 k=0 ns=1 acc=0 draft=[ ] emit=[ 42 ]"]
    trace = parse_text(buf.getvalue())
    assert not trace.findings
    assert trace.verifies.emit(0).tolist() == [42]


def test_a_sampled_step_prints_its_rejection_test_at_level_1() -> None:
    from difftest.trace.sampled import samples_of

    quiet = io.StringIO()
    Tracer(level=0, file=quiet).sample("r0", 7, 0, [0.5, 0.25], [0.125], [0.375], 9)
    assert quiet.getvalue() == ""
    buf = io.StringIO()
    tracer = Tracer(level=1, file=buf)
    tracer.step("r0", 7, [3, 4], [9])
    tracer.sample("r0", 7, 0, [0.5, 0.25], [0.125], [0.375], 9)
    assert buf.getvalue().splitlines()[-1] == (
        "[spec-sample] req=r0 pos=7 acc=0 q=[ 0.5 0.25 ] p=[ 0.125 ] overlap=[ 0.375 ] residual=9")
    step = samples_of(buf.getvalue().encode()).steps[0]
    assert (step.q, step.p, step.overlap, step.residual) == ((0.5, 0.25), (0.125,), (0.375,), 9)
    assert not parse_text(buf.getvalue()).findings


def test_header_once_before_the_first_step() -> None:
    buf = io.StringIO()
    tracer = Tracer(level=1, file=buf, drafting="sequential")
    tracer.step("a", 0, [1], [1, 2])
    tracer.step("a", 2, [3], [4])
    lines = buf.getvalue().splitlines()
    assert lines[0] == "[spec-drafting] kind=sequential"
    assert sum(line.startswith("[spec-drafting]") for line in lines) == 1


def test_top_pairs_ties_and_nan() -> None:
    row = np.array([1.0, 3.0, 3.0, np.nan, 2.0, 3.0], dtype=np.float32)
    assert top_pairs(row, 2) == [(1, 3.0), (2, 3.0)]
    assert top_pairs(row, 4) == [(1, 3.0), (2, 3.0), (5, 3.0), (4, 2.0)]
    assert [i for i, _ in top_pairs(row, 6)] == [1, 2, 5, 4, 0, 3]


def test_torch_tensors_of_any_dtype() -> None:
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[0.5, 2.25, -1.0], [3.0, 1.0, 2.0]], dtype=torch.bfloat16)
    buf = io.StringIO()
    Tracer(level=3, file=buf, top_k=2).step("r0", torch.tensor(3), torch.tensor([1, 0]),
                                            torch.tensor([1, 0, 2]), logits=logits[None])
    trace = parse_text(buf.getvalue())
    assert trace.logits.top_ids.tolist() == [[1, 0], [0, 2]]
    assert trace.logits.top_vals.tolist() == [[2.25, 0.5], [3.0, 2.0]]
    assert trace.verifies.pos.tolist() == [3]


@pytest.mark.parametrize("call, message", [
    (lambda t: t.step("r 0", 0, [1], [1]), "without spaces"),
    (lambda t: t.step("[x", 0, [1], [1]), "not start with '['"),
    (lambda t: t.step("r0", -1, [1], [1]), "pos"),
    (lambda t: t.step("r0", 0, [1.5], [1]), "drafted[0]"),
    (lambda t: t.step("r0", 0, [2**31], [1]), "outside int32"),
    (lambda t: t.step("r0", 0, [1, 2], [1], logits=np.zeros((3, 4))), "3 rows for 2"),
    (lambda t: t.step("r0", 0, [1], [1], logits=np.zeros(4)), "shape (k, vocab)"),
])
def test_bad_calls_are_clear_errors(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=re.escape(message)):
        call(Tracer(level=3, file=io.StringIO()))


@pytest.mark.parametrize(("drafted", "emitted", "message"), [
    # acc=2 from the emitted count, but emitted[:2] != drafted[:2]
    ([5, 6, 7], [5, 9, 8], "emitted[1]=9 replaces drafted[1]=6, yet 1 more token(s) follow it"),
    ([5, 6], [9, 6, 8], "emitted[0]=9 replaces drafted[0]=5, yet 2 more token(s) follow it"),
    ([5], [5, 6, 7], "emitted[1]=6 replaces drafted[1]=(none), yet 1 more token(s) follow it"),
    # the target's own token equals the draft it would replace: that draft was accepted
    ([5, 6, 7], [5, 6], "the target's own token emitted[1]=6 equals drafted[1]"),
    # every draft emitted and nothing after: a verify cut short, traced with bonus=False
    ([5], [5], "emitted is every drafted id and no token of the target's own follows them: a "
               "verify cut short (a token budget that ended after its last accepted draft, as "
               "mlx-lm's does) is traced with step(..., bonus=False)"),
])
def test_a_step_whose_ids_contradict_each_other_is_refused(
        drafted: list[int], emitted: list[int], message: str) -> None:
    buf = io.StringIO()
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        Tracer(level=1, file=buf).step("r0", 4, drafted, emitted)
    assert str(err.value).startswith(f"step req=r0 pos=4: drafted {drafted}, emitted {emitted}: ")
    assert buf.getvalue() == ""  # nothing of a refused step is written


@pytest.mark.parametrize(("drafted", "emitted", "acc"), [
    ([5, 6, 7], [5, 6, 7, 8], 3), ([5, 6, 7], [5, 6, 9], 2), ([5, 6, 7], [9], 0),
    ([5, 6], [], 0), ([], [4], 0), ([], [], 0)])
def test_the_accepted_count_is_the_longest_shared_prefix(
        drafted: list[int], emitted: list[int], acc: int) -> None:
    buf = io.StringIO()
    Tracer(level=1, file=buf).step("r0", 4, drafted, emitted)
    assert f" acc={acc} " in buf.getvalue().splitlines()[-1]


def test_top_k_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="top_k"):
        Tracer(level=3, top_k=1)


def test_importing_the_emitter_imports_neither_numpy_nor_torch() -> None:
    code = ("import sys, difftest.emit; "
            "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", list(DraftingKind))
def test_the_drafting_header_reads_back_as_the_trace_kind(kind: DraftingKind) -> None:
    buf = io.StringIO()
    Tracer(level=1, file=buf, drafting=kind).step("r0", 0, [3, 4], [3, 5])
    trace = parse_text(buf.getvalue())
    assert trace.drafting is kind
    assert trace.lines_skipped == 0


def test_an_unknown_drafting_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="drafting"):
        Tracer(level=1, drafting="tree")


def test_declare_fills_in_an_undeclared_kind_and_refuses_a_contradiction() -> None:
    buf = io.StringIO()
    tracer = Tracer(level=1, file=buf)
    tracer.declare(DraftingKind.SEQUENTIAL)
    tracer.step("r0", 0, [1], [2])
    tracer.declare("sequential")
    with pytest.raises(ValueError, match="already declared sequential"):
        tracer.declare(DraftingKind.BLOCK)
    assert parse_text(buf.getvalue()).drafting is DraftingKind.SEQUENTIAL


def test_the_header_alone_once_and_only_when_tracing() -> None:
    for level, drafting, want in ((1, "block", ["[spec-drafting] kind=block"]),
                                  (0, "block", []), (1, None, [])):
        buf = io.StringIO()
        tracer = Tracer(level=level, file=buf, drafting=drafting)
        tracer.header()
        tracer.header()
        assert buf.getvalue().splitlines() == want
        tracer.step("r0", 0, [3], [3, 4])
        assert sum(line.startswith("[spec-drafting]") for line in buf.getvalue().splitlines()) \
            == len(want)
    buf = io.StringIO()
    tracer = Tracer(level=1, file=buf)
    tracer.header()  # nothing declared: no header, and a kind learnt later is not printed
    tracer.declare("sequential")
    tracer.step("r0", 0, [3], [3, 4])
    assert not buf.getvalue().startswith("[spec-drafting]")


def test_every_line_of_a_step_as_printed() -> None:
    buf = io.StringIO()
    logits = np.array([[0.5, 2.25, -1.0] + [0.0] * 7, [3.0, 1.0, 2.0] + [-5.0] * 7],
                      dtype=np.float32)
    Tracer(level=3, file=buf).step("r0", 3, [1, 0], [1, 0, 2], logits)
    assert buf.getvalue().splitlines() == [
        "[spec-propose] rows=1 nqpr=3 drafts/row=2 first=[1 0 ]",
        "[spec-logits] req=r0 pos=3 row=1 top=[ 1:2.25 0:0.5 3:0 4:0 5:0 6:0 7:0 8:0 ]",
        "[spec-logits] req=r0 pos=3 row=2 top=[ 0:3 2:2 1:1 3:-5 4:-5 5:-5 6:-5 7:-5 ]",
        "[SPECTRACE] req=r0 pos=3 k=2 ns=3 acc=2 draft=[ 1 0 ] emit=[ 1 0 2 ]"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"level": True}, "level must be an integer >= 0, got True"),
    ({"level": "1"}, "level must be an integer >= 0, got '1'"),
    ({"level": -1}, "level must be an integer >= 0, got -1"),
    ({"top_k": True}, "top_k must be an integer >= 2 (the margin needs two), got True"),
    ({"top_k": 2.5}, "top_k must be an integer >= 2 (the margin needs two), got 2.5"),
    ({"drafting": "tree"}, "drafting: 'tree' is not one of block, sequential"),
])
def test_bad_settings_are_named_exactly(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Tracer(**{"level": 1, **kwargs})  # type: ignore[arg-type]
    assert str(err.value) == message


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t.step("r0", True, [1], [1]), "pos: expected an integer, got True"),
    (lambda t: t.step("r0", "3", [1], [1]), "pos: expected an integer, got '3'"),
    (lambda t: t.step("r0", 0, [1], [2**31]), "emitted[0]: token id 2147483648 is outside int32"),
    (lambda t: t.step("r0", 0, [1], [-(2**31) - 1]), "emitted[0]: token id -2147483649 is outside int32"),
    (lambda t: t.step("r0", 0, [1], [1], logits=np.zeros((1, 1))),
     "logits: vocab of 1 leaves no margin (need 2)"),
])
def test_bad_steps_are_named_exactly(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as err:
        call(Tracer(level=3, file=io.StringIO()))
    assert str(err.value) == message


def test_ids_at_the_int32_edges_arrays_and_integral_floats_are_written() -> None:
    buf = io.StringIO()
    Tracer(level=1, file=buf).step("r0", np.int64(4), np.array([-(2**31), 2**31 - 1]),
                                   [-(2**31), 7.0])
    assert buf.getvalue().splitlines()[-1] == (
        "[SPECTRACE] req=r0 pos=4 k=2 ns=2 acc=1 draft=[ -2147483648 2147483647 ] "
        "emit=[ -2147483648 7 ]")


def test_top_pairs_of_a_row_exactly_k_wide_and_of_nan_only() -> None:
    row = np.array([2.0, 5.0, 1.0], dtype=np.float32)
    assert top_pairs(row, 3) == [(1, 5.0), (0, 2.0), (2, 1.0)]
    assert top_pairs(row, 2) == [(1, 5.0), (0, 2.0)]
    nan = np.array([np.nan, 1.0, np.nan, 0.5], dtype=np.float32)
    assert [i for i, _ in top_pairs(nan, 2)] == [1, 3]


def test_a_kind_given_at_construction_is_kept_when_an_adapter_declares_another() -> None:
    buf = io.StringIO()
    tracer = Tracer(level=1, file=buf, drafting="block")
    tracer.declare("sequential")
    tracer.step("r0", 0, [3], [3, 4])
    assert buf.getvalue().splitlines()[0] == "[spec-drafting] kind=block"


def test_a_verify_cut_short_by_a_stop_is_traced_without_contradiction() -> None:
    from difftest.adapters.hf import cut_at_stop

    logits = np.zeros((4, 3))
    # max length reached after two accepted drafts: no token of the target's own follows
    drafted, rows = cut_at_stop([5, 6, 7, 8], [5, 6], logits)
    assert (drafted, rows.shape) == ([5], (1, 3))
    buf = io.StringIO()
    Tracer(level=1, file=buf).step("r0", 4, drafted, [5, 6])
    assert buf.getvalue().splitlines()[-1] == (
        "[SPECTRACE] req=r0 pos=4 k=1 ns=2 acc=1 draft=[ 5 ] emit=[ 5 6 ]")
    # an ordinary verify, and one that accepted everything, are left alone
    assert cut_at_stop([5, 6, 7], [5, 9], logits)[0] == [5, 6, 7]
    assert cut_at_stop([5, 6], [5, 6, 9], None) == ([5, 6], None)
    assert cut_at_stop([], [4], None) == ([], None)


def test_an_engine_reads_the_force_stream_from_the_emitter(tmp_path: Path) -> None:
    """`difftest.emit.read_force_file`, the public reader of `DIFFTEST_FORCE`: the stream
    difftest wrote, from a str path too; a bad file is difftest's usage error, naming it."""
    from difftest.core.errors import UsageError
    from difftest.core.force import ForcedStep, ForceStream, write_force_file
    from difftest.emit import read_force_file

    stream = ForceStream({"r0": (ForcedStep(5, (1, 2)), ForcedStep(7, (3,), (3, 4)))})
    path = write_force_file(stream, tmp_path / "force.json")
    assert read_force_file(str(path)) == stream
    path.write_text("{")
    with pytest.raises(UsageError, match=f"{re.escape(str(path))}.*not valid JSON"):
        read_force_file(path)


def test_ties_at_an_infinite_cut_keep_the_lowest_ids() -> None:
    """Ties at the k-th value keep the lowest ids whatever that value is: +inf and -inf ties
    too (argpartition keeps an arbitrary subset of them, so equal rows printed different
    lists), a real -inf before a NaN."""
    from difftest.emit import top_pairs

    row = np.zeros(17, dtype=np.float32)
    row[[13, 14, 15]] = np.inf
    assert [i for i, _ in top_pairs(row, 2)] == [13, 14]
    row = np.full(9, -np.inf, dtype=np.float32)
    row[6], row[0], row[4] = 1.0, np.nan, np.nan
    assert [i for i, _ in top_pairs(row, 4)] == [6, 1, 2, 3]
    assert [i for i, _ in top_pairs(row, 9)] == [6, 1, 2, 3, 5, 7, 8, 0, 4]
    rng = np.random.default_rng(0)
    for _ in range(200):  # the same row, its ids shuffled in memory order: the same list
        row = rng.choice(np.array([np.inf, -np.inf, np.nan, 1.0], dtype=np.float32), 40)
        k = int(rng.integers(1, 12))
        want = sorted(range(40), key=lambda i: (bool(np.isnan(row[i])),
                                               -np.nan_to_num(row[i], nan=-np.inf), i))[:k]
        assert [i for i, _ in top_pairs(row, k)] == want
