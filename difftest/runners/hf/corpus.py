"""The bug corpus's classes that live in the transformers runner (difftest.core.corpus), and
the counters of its `[spec-coverage]` line.

`sliding-window-edge` reads the draft's --sliding-window one key too wide (attention.mutated_mask);
`verify-width-path` gives the target's verify of width 3 the rows of the next offsets (a kernel
path taken at one width); `broken-mask` flips the draft mask's causality; the control
`control-explicit-mask` hands the draft's sdpa its causal mask as a tensor. --draft-lens sets the
draft length of each verify, so that inputs reach the widths. `fired` counts the forwards a
planted bug changed, so a run can say that its bug never acted.
"""

from __future__ import annotations

from typing import Any

import torch

from difftest.adapters.hf import HFTrace
from difftest.core.corpus import StepCoverage, cycled_len, width_path_broken
from difftest.runners.hf.options import HFOptions


class Planted:
    """One run's corpus state: the counters, each request's draft-length cycle, and the width
    the target's next forward verifies (set when the draft proposes, read by the target's
    forward hook)."""

    def __init__(self, options: HFOptions) -> None:
        self.options = options
        self.coverage = StepCoverage()
        self.index = 0  # the request being generated
        self.step = 0  # its verifies so far
        self.width: int | None = None
        self.layers = 0  # the draft's, once loaded

    def request(self, index: int) -> None:
        self.index, self.step = index, 0

    def draft_forward(self, module: Any, q_len: int, k_len: int) -> None:
        """A routed draft attention forward (attention.route_masked_attention): on its first layer,
        whether the window left a key out, and whether a planted mask bug changed this one."""
        if getattr(module, "layer_idx", 0) != 0:
            return
        # transformers' draft samples the last row of each forward, its prompt's included
        self.coverage.draft_forward(self.options.mutation, self.options.sliding_window, q_len,
                                    k_len, layers=self.layers, last_sampled=True)

    def generator(self, generator: Any) -> None:
        """Wrap a candidate generator's proposal: the cycle's draft length before it drafts, the
        verify width it hands the target after."""
        inner = generator.get_candidates
        lens = self.options.draft_lens

        def get_candidates(input_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if lens:
                generator.num_assistant_tokens = cycled_len(lens, self.options.k, self.step,
                                                            self.index)
            candidate_ids, logits = inner(input_ids, *args, **kwargs)
            self.width = 1 + int(candidate_ids.shape[-1]) - int(input_ids.shape[-1])
            self.step += 1
            return candidate_ids, logits

        generator.get_candidates = get_candidates

    def target_output(self, module: Any, args: Any, output: Any) -> None:
        """The target's forward hook: a verify of the broken width gets each of its rows' logits
        from the next row (the last keeps its own)."""
        width, self.width = self.width, None
        if width is None or not width_path_broken(self.options.mutation, width):
            return
        logits = output.logits
        rows = torch.cat([logits[:, -width + 1:], logits[:, -1:]], dim=1)
        output.logits = torch.cat([logits[:, :-width], rows], dim=1)
        self.coverage.fired += 1

    def count(self, record: HFTrace) -> None:
        """A request's verifies, as traced, into the counters."""
        for step in record.steps:
            self.coverage.verified(len(step.drafted), len(step.emitted) - 1)
