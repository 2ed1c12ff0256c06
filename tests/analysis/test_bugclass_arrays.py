"""The bug class read over flat arrays says what the step-by-step reading says: a few hundred
seeded pairs of traces with gaps, overlaps, repeated positions, shorter and longer runs, read
both ways."""

from __future__ import annotations

import random

import pytest

from difftest.analysis import bugclass
from difftest.core.model import ArmTrace
from difftest.trace import parse_text
from conftest import verify_line

Steps = list[tuple[str, int, list[int], list[int]]]


def arm_a(rng: random.Random) -> Steps:
    steps: Steps = []
    for req in rng.sample(["r0", "r1", "r2", "q"], rng.randint(1, 3)):
        pos = rng.randint(0, 4)
        for _ in range(rng.randint(1, 6)):
            draft = [rng.randint(0, 2) for _ in range(rng.randint(0, 3))]
            emit = [rng.randint(0, 2) for _ in range(rng.randint(1, len(draft) + 1))]
            steps.append((req, pos, draft, emit))
            move = rng.random()
            # mostly the next step where this one's tokens end; sometimes a gap, an overlap or
            # the same position again
            pos += len(emit) + (0 if move < 0.9 else rng.choice([1, 2, -1, -len(emit)]))
    return steps


def arm_b(rng: random.Random, a: Steps) -> Steps:
    b = [(req, pos, list(d), list(e)) for req, pos, d, e in a]
    for _ in range(rng.randint(0, 3)):
        if not b:
            break
        i = rng.randrange(len(b))
        req, pos, d, e = b[i]
        what = rng.randrange(7)
        if what == 0 and d:
            d[rng.randrange(len(d))] = rng.randint(0, 3)
        elif what == 1:
            e[rng.randrange(len(e))] = rng.randint(0, 3)
        elif what == 2 and len(e) > 1:
            e.pop()
        elif what == 3:
            e.append(rng.randint(0, 3))
        elif what == 4:
            del b[i]
            continue
        elif what == 5:
            b.append((req, pos + len(e) + rng.randint(0, 4), [1], [rng.randint(0, 2)]))
        else:
            b.insert(rng.randrange(len(b) + 1), ("z" if rng.random() < 0.5 else req,
                                                 rng.randint(0, 20), [2], [2, 1]))
    if rng.random() < 0.3:
        rng.shuffle(b)  # the order of the lines is not the order of the steps
    return b


def trace(steps: Steps, name: str) -> ArmTrace:
    return parse_text("".join(verify_line(*s) + "\n" for s in steps), name)


def test_the_array_reading_says_what_the_step_by_step_one_does() -> None:
    flat, kinds = 0, set()
    for seed in range(300):
        rng = random.Random(seed)
        steps_a = arm_a(rng)
        a, b = trace(steps_a, "a"), trace(arm_b(rng, steps_a), "b")
        for x, y in ((a, b), (b, a)):
            pairs = bugclass._pairs(x, y)
            found = bugclass.classify(x, y)
            assert found == bugclass._classify_steps(x, y), seed
            kinds.add(found.kind)
            assert bugclass.acceptance_moved(x, y) == bugclass._acceptance_moved_steps(x, y), seed
            flat += pairs is not None
    assert flat > 300  # most pairs took the array reading (the rest overlap)
    assert len(kinds) == 4  # every kind, and none, came up


@pytest.mark.parametrize("overlap", [False, True])
def test_a_trace_whose_steps_overlap_is_read_step_by_step(overlap: bool) -> None:
    second = 11 if overlap else 12
    a = trace([("r", 10, [1], [1, 2]), ("r", second, [3], [3])], "a")
    assert (bugclass._pairs(a, a) is None) is overlap
