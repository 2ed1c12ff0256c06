"""Print the VT_SPEC_TRACE lines from any Python runner, in three lines of code.

```python
from difftest.emit import Tracer
tracer = Tracer(drafting="sequential")          # level from VT_SPEC_TRACE, lines to stderr
tracer.step("r0", pos, drafted, emitted, logits=draft_logits)   # once per verify
```

`step` prints, at level 1 and up, a `[spec-propose]` line (the `NO proposing rows` form for a
step that drafted nothing) and a `[SPECTRACE]` line whose `k`, `ns` and `acc` follow from the
lists it was given; at level 3 one `[spec-logits]` line per drafted row, the `top_k` highest
logits of that row, highest first, printed with `%.9g` (which round-trips every float32, so a
bitwise comparison of two traces is a bitwise comparison of the logits). An optional
`[spec-drafting] kind=block|sequential` header, printed once before the first step, tells
difftest how the rows of a block depend on each other; parsers that do not know the line skip
it as other output. `config(mapping)` prints the `[spec-config]` line: the settings the runner
really applied (attention kernel, dtypes, lane...), which difftest checks a comparison's toggle
against; call it once, before the first step.

Nothing here imports numpy or torch until logits are given: a runner that traces tokens only
pays for neither. Logits may be a numpy array, a torch tensor (any dtype, any device) or nested
lists; they are converted to float32 on the host before the top-k is taken.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO


from difftest.core.kinds import DraftingKind

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import numpy as np

    from difftest.core.force import ForceStream

__all__ = ["DraftingKind", "Tracer", "accepted", "drafting_header", "level_from_env",
           "read_force_file", "spec_config", "spec_sample", "top_pairs"]

MAX_LEVEL = 3  # the highest level any line belongs to
DRAFTING_TAG = "[spec-drafting]"


def read_force_file(path: str | Path) -> ForceStream:
    """The stream difftest asks a run to replay under teacher forcing (the file `DIFFTEST_FORCE`
    names): per request, the committed tokens of each step (`.requests[req]`). An engine that
    replays it reads it here; a bad file is a difftest UsageError naming the file."""
    from pathlib import Path

    from difftest.core.force import read_force_file as read

    return read(Path(path))


def level_from_env(env: Mapping[str, str] | None = None) -> int:
    """VT_SPEC_TRACE as the engine reads it: unset/empty/0 = off, numbers clamp to 0..3, words = 1."""
    env = os.environ if env is None else env
    value = env.get("VT_SPEC_TRACE", "").strip()
    if not value:
        return 0
    try:
        number = int(value)
    except ValueError:
        return 1
    return max(0, min(MAX_LEVEL, number))


# -- the producer formats of TRACE-FORMAT.md, written once for every program that prints a trace

def id_list(ids: Iterable[int]) -> str:
    """Each id followed by exactly one space, as the engine's `%s` lists are built."""
    return "".join(f"{int(i)} " for i in ids)


def spec_phase_dev(pre: float, fwd: float, select: float, walk: float) -> str:
    return f"[spec-phase-dev] pre={pre:.2f}ms fwd={fwd:.2f}ms select={select:.2f}ms walk={walk:.2f}ms"


def spec_phase(pre: float, backbone: float, sample: float, logits: int) -> str:
    return f"[spec-phase] pre={pre:.2f}ms backbone={backbone:.2f}ms sample={sample:.2f}ms logits={logits}"


def spec_propose(rows: int, nqpr: int, k: int, first: Sequence[int]) -> str:
    return f"[spec-propose] rows={rows} nqpr={nqpr} drafts/row={k} first=[{id_list(first)}]"


def spectrace(req: str, pos: int, k: int, ns: int, acc: int, draft: Sequence[int],
              emit: Sequence[int]) -> str:
    return (f"[SPECTRACE] req={req} pos={pos} k={k} ns={ns} acc={acc} "
            f"draft=[ {id_list(draft)}] emit=[ {id_list(emit)}]")


def spec_logits(req: str, pos: int, row: int, top: Sequence[tuple[int, float]]) -> str:
    """`%.9g` values: 9 significant digits round-trip every float32 exactly, so two arms' values
    are equal in the trace exactly when they are equal in memory. Python's `g` spelling of
    nan/inf matches C's for the values a logit takes."""
    pairs = "".join(f"{int(i)}:{float(v):.9g} " for i, v in top)
    return f"[spec-logits] req={req} pos={pos} row={row} top=[ {pairs}]"


SAMPLE_TAG = "[spec-sample]"


def _probs(values: Sequence[float]) -> str:
    return "".join(f"{float(v):.9g} " for v in values)


def spec_sample(req: str, pos: int, acc: int, q: Sequence[float], p: Sequence[float],
                overlap: Sequence[float], residual: int | None) -> str:
    """`[spec-sample]`: one sampled verify's rejection test. `q` is the draft's probability of
    each drafted token, `p` the target's, for every row the verify tested (the accepted ones and
    the first rejected one); `overlap` is sum over the vocabulary of min(p, q) for each tested
    row (its acceptance probability); `residual` the token drawn from the normalised residual
    max(0, p - q) at the rejected row, or None (`-`) when every draft was accepted and the
    last emitted token is the target's bonus draw. Distributions are the ones the test used,
    after temperature and top-p."""
    if not len(p) == len(overlap) <= len(q):
        raise ValueError(f"spec_sample: {len(q)} q, {len(p)} p and {len(overlap)} overlap "
                         "values: p and overlap cover the tested rows, at most one per draft")
    drawn = "-" if residual is None else str(int(residual))
    return (f"{SAMPLE_TAG} req={req} pos={pos} acc={acc} q=[ {_probs(q)}] p=[ {_probs(p)}] "
            f"overlap=[ {_probs(overlap)}] residual={drawn}")


def dflash_route(paged_seam: int, combined: int, last_q: int, last_k: int) -> str:
    """`block_kernel` is the engine's fused-kernel lane, which this runner does not have."""
    return (f"[dflash-route] paged_seam={paged_seam} block_kernel=0 combined={combined} "
            f"last_combined_q={last_q} last_combined_k={last_k}")


COVERAGE_TAG = "[spec-coverage]"


def spec_coverage(counts: Mapping[str, object]) -> str:
    """What state a run exercised, once per process after its last step: `key=value` counters
    (docs/trace-format.md). `widths` is `W:N,...` (verify width: steps), `-` for none."""
    parts = []
    for key, value in counts.items():
        text = str(value)
        if not _CONFIG_KEY_RE.match(key) or not text or any(c.isspace() for c in text):
            raise ValueError(f"{COVERAGE_TAG} {key}={text!r}: a key and a one-word value")
        parts.append(f"{key}={text}")
    return f"{COVERAGE_TAG} {' '.join(parts)}"


CONFIG_TAG = "[spec-config]"
_CONFIG_KEY_RE = re.compile(r"[A-Za-z_][\w/]*\Z", re.ASCII)
_CONFIG_VALUE_RE = re.compile(r"[^\s\x00-\x1f\x7f\[][^\s\x00-\x1f\x7f]*\Z")


def _config_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if not _CONFIG_VALUE_RE.match(text):
        raise ValueError(f"config {key}: {text!r} must be one word without spaces or control "
                         "characters, not starting with '['")
    return text


def spec_config(settings: Mapping[str, object]) -> str:
    """`[spec-config] key=value ...`: what the runner applied, one word per value (booleans as
    1/0), keys as given."""
    if not settings:
        raise ValueError("config: give at least one setting")
    parts = []
    for key, value in settings.items():
        if not isinstance(key, str) or not _CONFIG_KEY_RE.match(key):
            raise ValueError(f"config: key {key!r} must be a name like 'lane' or 'dtype_target'")
        parts.append(f"{key}={_config_value(key, value)}")
    return f"{CONFIG_TAG} " + " ".join(parts)


def _kind(kind: DraftingKind | str) -> DraftingKind:
    try:
        return DraftingKind(kind)
    except ValueError:
        choices = ", ".join(k.value for k in DraftingKind)
        raise ValueError(f"drafting: {kind!r} is not one of {choices}") from None


def drafting_header(kind: DraftingKind | str) -> str:
    """The header line that declares a trace's drafting kind."""
    return f"{DRAFTING_TAG} kind={_kind(kind).value}"


# No whitespace or control characters, and no leading `[` (a field value starting with `[` is read
# as a bracketed list).
_REQ_RE = re.compile(r"[^\s\x00-\x1f\x7f\[][^\s\x00-\x1f\x7f]*\Z")


def _ids(name: str, values: Any) -> list[int]:
    """A flat list of Python ints from a list, tuple, numpy array or torch tensor."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    ids = list(values)
    out: list[int] = []
    for n, v in enumerate(ids):
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise ValueError(f"{name}[{n}]: expected an integer token id, got {v!r}")
        if not -(2**31) <= v < 2**31:
            raise ValueError(f"{name}[{n}]: token id {v} is outside int32")
        out.append(v)
    return out


def _request_place(req: str | int, pos: Any) -> tuple[str, int]:
    """A step's request id and position as a trace line can carry them: an id a line's fields
    cannot be confused by, and a token count >= 0 (a numpy or torch scalar is taken whole)."""
    name = str(req)
    if not _REQ_RE.match(name):
        raise ValueError(f"req: {name!r} must be non-empty, without spaces or control "
                         "characters, and not start with '['")
    if isinstance(pos, bool) or not isinstance(pos, int):
        if hasattr(pos, "item"):
            pos = int(pos.item())
        else:
            raise ValueError(f"pos: expected an integer, got {pos!r}")
    if pos < 0:
        raise ValueError(f"pos: expected a token count >= 0, got {pos}")
    return name, pos


def _float32_rows(logits: Any) -> np.ndarray:
    """(rows, vocab) float32 on the host, from numpy, torch (any dtype/device) or lists."""
    import numpy as np

    if hasattr(logits, "detach"):  # a torch tensor: bf16 has no numpy dtype, so upcast first
        logits = logits.detach().float().cpu().numpy()
    try:
        arr = np.asarray(logits, dtype=np.float32)
    except (TypeError, ValueError, RuntimeError) as first:
        arr = _cast_by_own_library(logits, first)
    if arr.ndim == 3 and arr.shape[0] == 1:  # (batch=1, rows, vocab), as generate() hands them
        arr = arr[0]
    if arr.ndim != 2:
        raise ValueError(f"logits: expected shape (k, vocab), got {tuple(arr.shape)}")
    return arr


def _float32_any(value: Any) -> np.ndarray:
    """Any shape, float32 on the host, from numpy, torch (any dtype/device) or lists."""
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float32)


def _cast_by_own_library(logits: Any, first: Exception) -> np.ndarray:
    """An array numpy cannot read directly (a bfloat16 array of mlx, jax...), cast to float32
    by the library that made it: its `astype` with that library's own `float32`. Anything
    else is refused, naming what was given."""
    import importlib

    import numpy as np

    what = f"{type(logits).__module__}.{type(logits).__qualname__}"
    dtype = getattr(logits, "dtype", None)
    if hasattr(logits, "astype") and dtype is not None:
        module = type(logits).__module__
        for name in dict.fromkeys([module, module.split(".")[0], module.split(".")[0] + ".numpy"]):
            try:
                float32 = getattr(importlib.import_module(name), "float32", None)
            except ImportError:
                continue
            if float32 is None:
                continue
            try:
                return np.asarray(logits.astype(float32), dtype=np.float32)
            except (TypeError, ValueError, RuntimeError):
                continue
    raise ValueError(f"logits: cannot read a {what}"
                     + (f" of dtype {dtype}" if dtype is not None else "")
                     + f" as float32 ({first}); give a numpy array, a torch tensor, nested "
                       "lists, or an array whose library casts it with .astype(float32)") from None


def top_pairs(row: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k highest (id, value) pairs of one row, highest first, ties by the lower id.

    NaN never ranks above a number (it sorts last), so a row with NaNs lists its finite values
    first; the parser flags any non-finite value that makes the list.
    """
    import numpy as np

    k = min(k, row.shape[0])
    key = np.where(np.isnan(row), -np.inf, row)
    if k < row.shape[0]:
        cand = np.argpartition(-key, k - 1)[:k]
        # argpartition keeps an arbitrary subset of ties at the cut (+inf and -inf ties too):
        # keep the ids above it, then the lowest tied ids (a real -inf before a NaN), so equal
        # rows always print equal lists
        cut = key[cand].min()
        above = cand[key[cand] > cut]
        tied = np.flatnonzero(key == cut)
        tied = tied[np.argsort(np.isnan(row[tied]), kind="stable")]
        cand = np.concatenate([above, tied[:k - above.size]])
    else:
        cand = np.arange(row.shape[0])
    order = np.lexsort((cand, -key[cand], np.isnan(row[cand])))[:k]
    chosen = cand[order]
    return [(int(i), float(row[i])) for i in chosen]


def accepted(req: str, pos: int, draft: Sequence[int], emit: Sequence[int]) -> int:
    """How many drafted tokens a verify accepted, refusing a step that contradicts itself.

    A verify emits the drafted tokens the target agreed with, up to the first it did not, then
    one token of its own (or nothing, at the end of a stream): so the accepted count is the
    length of the longest prefix draft and emitted share, and it is one less than the emitted
    count. A target token equal to the draft it replaces, or emitted tokens past a rejected
    draft, would make `acc` say one thing and the ids another."""
    shared = 0
    for d, e in zip(draft, emit, strict=False):
        if d != e:
            break
        shared += 1
    acc = max(len(emit) - 1, 0)
    if acc == shared:
        return acc
    where = f"step req={req} pos={pos}: drafted {list(draft)}, emitted {list(emit)}"
    if acc > shared:
        raise ValueError(f"{where}: emitted[{shared}]={emit[shared]} replaces "
                         f"drafted[{shared}]={draft[shared] if shared < len(draft) else '(none)'}"
                         f", yet {acc - shared} more token(s) follow it; a verify emits the "
                         "accepted drafts (the prefix both share) and then one token of its own")
    raise ValueError(f"{where}: the target's own token emitted[{acc}]={emit[acc]} equals "
                     f"drafted[{acc}], so that draft was accepted and the verify would have gone "
                     "on; a verify emits the accepted drafts (the longest prefix both share) and "
                     "then one token of its own")


class Tracer:
    """Writes one runner's trace lines.

    `level`: 0 prints nothing, 1-2 tokens (`[spec-propose]`, `[SPECTRACE]`), 3 adds
    `[spec-logits]`; None reads `VT_SPEC_TRACE` once, as the engine does. `file`: where the lines
    go (default: the process's stderr at the time of each write). `top_k`: entries per logits
    row (at least 2, so the margin is defined). `drafting`: the drafting kind to declare in a
    header line, or None for no header.
    """

    def __init__(self, level: int | None = None, file: TextIO | None = None, top_k: int = 8,
                 drafting: DraftingKind | str | None = None) -> None:
        if level is None:
            level = level_from_env()
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ValueError(f"level must be an integer >= 0, got {level!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 2:
            raise ValueError(f"top_k must be an integer >= 2 (the margin needs two), got {top_k!r}")
        self.level = min(level, MAX_LEVEL)
        self.top_k = top_k
        self.drafting: DraftingKind | None = None if drafting is None else _kind(drafting)
        self._file = file
        self._header_done = False
        self._stepped = False
        self._config_done = False
        self._coverage_done = False

    @property
    def enabled(self) -> bool:
        """True when `step` prints anything at all."""
        return self.level >= 1

    @property
    def wants_logits(self) -> bool:
        """True at level 3: only then are the logits given to `step` printed (and worth making)."""
        return self.level >= 3

    def _write(self, lines: Iterable[str]) -> None:
        out = self._file if self._file is not None else sys.stderr
        text = "".join(line + "\n" for line in lines)
        if text:
            out.write(text)  # one write per step: a killed runner leaves whole steps behind
            out.flush()

    def declare(self, kind: DraftingKind | str) -> None:
        """Set the drafting kind unless one was given; an adapter calls this when it learns the
        engine's kind. Declaring a different kind after the header was printed is an error."""
        value = _kind(kind)
        if self.drafting is None and not self._header_done:
            self.drafting = value
        elif self._header_done and self.drafting not in (None, value):
            raise ValueError(f"the trace already declared {self.drafting.value} drafting, "
                             f"not {value.value}")

    def config(self, settings: Mapping[str, object]) -> None:
        """Print the `[spec-config]` line: the settings the runner really applied (read back
        from the engine where it can say, e.g. the attention implementation it resolved), not
        the ones it was asked for. Once per process, before the first step."""
        line = spec_config(settings)  # checked at every level, so a bad value fails in tests
        if self._config_done or self._stepped:
            raise ValueError("config: the [spec-config] line is printed once, before the first "
                             "step")
        self._config_done = True
        if self.enabled:
            self._write([line])

    def coverage(self, counts: Mapping[str, object]) -> None:
        """Print the `[spec-coverage]` line (`spec_coverage`): what state the run exercised.
        Once per process, after its last step (a second one is an error, as readers refuse it)."""
        line = spec_coverage(counts)  # checked at every level, so a bad value fails in tests
        if self._coverage_done:
            raise ValueError("coverage: the [spec-coverage] line is printed once, after the "
                             "last step")
        self._coverage_done = True
        if self.enabled:
            self._write([line])

    def header(self) -> None:
        """Print the drafting-kind header now (otherwise `step` prints it before the first step)."""
        if self._header_done or not self.enabled:
            return
        self._header_done = True
        if self.drafting is not None:
            self._write([drafting_header(self.drafting)])

    def activation(self, req: str | int, pos: int, index: int, module: str, output: Any,
                   folder: str | os.PathLike[str] | None = None, used: int = 0) -> int:
        """At a captured step (`DIFFTEST_CAPTURE=REQ:POS`), one module's output in forward order:
        a `[spec-act]` summary line and, with a folder, `NNN-module.npy` in it (bounded, see
        difftest.core.activations). Returns the bytes the folder holds after, to pass back next."""
        from pathlib import Path

        from difftest.core.activations import capture_line, save_dump

        arr = _float32_any(output)
        if self.enabled:
            self._write([capture_line(str(req), int(pos), index, module, arr)])
        return save_dump(Path(folder), index, module, arr, used) if folder is not None else used

    def forced(self, req: str | int, pos: int, committed: Any) -> None:
        """Under teacher forcing (`DIFFTEST_FORCE`, difftest.core.force), after the step's trace: the
        tokens committed instead of the emitted ones (a `[spec-forced]` line)."""
        from difftest.core.force import forced_line

        if self.enabled:
            self._write([forced_line(str(req), int(pos), _ids("committed", committed))])

    def sample(self, req: str | int, pos: int, acc: int, q: Sequence[float],
               p: Sequence[float], overlap: Sequence[float], residual: int | None) -> None:
        """In sampled decoding, after the step's `step(...)`: the rejection test's draft and
        target probabilities of the drafted tokens, each tested row's overlap sum(min(p, q)),
        and the residual draw (None: all accepted). A `[spec-sample]` line at level 1 and up."""
        if self.enabled:
            self._write([spec_sample(str(req), int(pos), int(acc), q, p, overlap, residual)])

    def step(self, req: str | int, pos: int, drafted: Any, emitted: Any,
             logits: Any = None, *, bonus: bool = True) -> None:
        """Trace one verify of request `req`.

        `pos`: the request's token count before this step's tokens are appended (the same
        number in both arms for the same place in the stream). `drafted`: the ids the target
        verified (empty for a step that drafted nothing). `emitted`: what the step appended
        (the accepted drafts and the target's own next token). `logits`: optional, shape
        (len(drafted), vocab), the drafter's raw logits of each drafted row, printed at level 3.
        `bonus=False`: the step emitted no token of the target's own (every draft accepted,
        the verify cut short), so `emitted` equals `drafted`; such a step traced with the
        default `bonus=True` is refused, the error naming `bonus=False`. Ids that contradict
        each other are refused with a ValueError (see `accepted`).
        """
        if not self.enabled:
            return
        self.header()  # the header stands even when this first step's input is refused
        name, pos = _request_place(req, pos)
        draft = _ids("drafted", drafted)
        emit = _ids("emitted", emitted)
        k, ns = len(draft), len(emit)
        if not bonus and (emit != draft or not draft):
            raise ValueError(f"bonus=False: emitted {emit} must be every drafted id {draft} "
                             "(a step without the target's token accepted all its drafts)")
        lines: list[str] = []
        self._stepped = True
        if k:
            lines.append(spec_propose(1, k + 1, k, draft))
        else:
            lines.append("[spec-propose] NO proposing rows this step (num_reqs=1)")
        if self.wants_logits and logits is not None and k:
            lines += self._logit_lines(name, pos, k, logits)
        if bonus and draft and emit == draft:
            # what a hook written before `bonus` existed passes at a verify a token budget cut
            # short (mlx-lm's last step): every draft emitted, no token of the target's own
            raise ValueError(f"step req={name} pos={pos}: drafted {draft}, emitted {emit}: "
                             "emitted is every drafted id and no token of the target's own "
                             "follows them: a verify cut "
                             "short (a token budget that ended after its last accepted draft, "
                             "as mlx-lm's does) is traced with step(..., bonus=False); a "
                             "verify that went on emits the target's token after the drafts")
        # without a bonus token every draft was accepted (checked above): acc = ns = k
        acc = accepted(name, pos, draft, emit) if bonus else ns
        lines.append(spectrace(name, pos, k, ns, acc, draft, emit))
        self._write(lines)

    def _logit_lines(self, name: str, pos: int, k: int, logits: Any) -> list[str]:
        """The `[spec-logits]` lines of a step's `k` drafted rows (their top_k pairs), from
        logits of one row per drafted id and a vocab wide enough to have a margin."""
        rows = _float32_rows(logits)
        if rows.shape[0] != k:
            raise ValueError(f"logits: {rows.shape[0]} rows for {k} drafted ids")
        if rows.shape[1] < 2:
            raise ValueError(f"logits: vocab of {rows.shape[1]} leaves no margin (need 2)")
        return [spec_logits(name, pos, j + 1, top_pairs(rows[j], self.top_k)) for j in range(k)]

