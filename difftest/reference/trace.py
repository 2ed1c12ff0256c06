"""The producer formats of TRACE-FORMAT.md, written once so every line the runner prints matches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


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


def dflash_route(paged_seam: int, combined: int, last_q: int, last_k: int) -> str:
    """`block_kernel` is the engine's fused-kernel lane, which this runner does not have."""
    return (f"[dflash-route] paged_seam={paged_seam} block_kernel=0 combined={combined} "
            f"last_combined_q={last_q} last_combined_k={last_k}")
