"""The bug corpus's classes in the mlx runner, for real (mlx's CPU backend): the runner's command
line run in this process (corpus_helpers.arm) with tiny seeded models, each mutation through the
config's `rerun` comparison: caught where an input reaches its state, computing the correct
run's output and uninformative where none does (in either arm); the draft-length cycle (one
mlx-lm call per verify) and the window as asked; bad options one line, exit 2. The tests both
runners pass are corpus_helpers'."""

from __future__ import annotations

import pytest

import corpus_helpers as ch
from corpus_helpers import *  # noqa: F403 - the tests both runners pass, collected for this one


@pytest.fixture
def runner() -> str:
    return "mlx"


def test_a_mask_fault_takes_no_window() -> None:
    ch.bad_option("mlx", ("--sliding-window", "4", "--fault", "model.layers.0.self_attn:mask"),
                  "a mask fault needs no --mutation and no --sliding-window")
