"""`python -m difftest.runners.llamacpp`: greedy speculative decoding on llama.cpp, traced.

A C++ engine the field runs, through llama-cpp-python: a tiny seeded Llama target and draft
written as GGUF on first use (difftest.runners.llamacpp.models, nothing fetched), the draft
proposing k tokens and the target verifying them in one `llama_decode` call, and
`difftest.adapters.llamacpp` doing the loop and printing the trace. Importing this package does
not import llama_cpp or numpy.
"""

from difftest.runners.llamacpp.options import (FLASH_ATTN, KV_TYPES, LOGITS, MUTATIONS, VERIFY,
                                               LlamaCppOptions)

__all__ = ["FLASH_ATTN", "KV_TYPES", "LOGITS", "LlamaCppOptions", "MUTATIONS", "VERIFY"]
