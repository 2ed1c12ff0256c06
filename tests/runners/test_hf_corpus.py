"""The bug corpus's classes in the transformers runner, for real: the runner's command line run in
this process (corpus_helpers.arm) with tiny seeded models, each mutation through the config's
`rerun` comparison: caught where an input reaches its state, computing the correct run's output
and uninformative where none does (in either arm); the draft-length cycle and the window as
asked; bad options one line, exit 2. The tests both runners pass are corpus_helpers'; this
runner's own are below."""

from __future__ import annotations

import pytest

import corpus_helpers as ch
from corpus_helpers import *  # noqa: F403 - the tests both runners pass, collected for this one


@pytest.fixture
def runner() -> str:
    return "hf"


@pytest.mark.parametrize("argv, message", [
    (("--sliding-window", "4", "--attn", "eager"), "use --attn sdpa"),
    (("--draft-lens", "1", "--drafter", "dflash"), "for greedy assisted drafting only"),
    (("--draft-lens", "1", "--temperature", "1"), "for greedy assisted drafting only"),
    (("--draft-lens", "1", "--schedule", "heuristic"), "drop --schedule"),
])
def test_the_corpus_state_needs_greedy_assisted_sdpa(argv: tuple[str, ...], message: str) -> None:
    ch.bad_option("hf", argv, message)
