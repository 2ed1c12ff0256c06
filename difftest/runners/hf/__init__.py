"""`python -m difftest.runners.hf`: greedy speculative decoding with Hugging Face transformers, traced.

A real engine written by others, for difftest's own tests and CI: a target and a draft model
(two local model directories, or by default a pair of tiny seeded random models built from
configs in memory, no hub access), transformers' `generate(..., assistant_model=...)` with
assisted generation or its DFlash block drafter, and `difftest.adapters.hf` printing the trace.
Importing this package does not import torch or transformers.
"""

from difftest.runners.hf.options import ATTNS, DRAFTERS, DTYPES, MUTATIONS, HFOptions

__all__ = ["ATTNS", "DRAFTERS", "DTYPES", "HFOptions", "MUTATIONS"]
