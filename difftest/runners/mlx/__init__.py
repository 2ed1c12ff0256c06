"""`python -m difftest.runners.mlx`: greedy speculative decoding with mlx-lm, traced.

A second real engine written by others, for difftest's own tests and CI: a pair of tiny seeded
random Llama models built from a config in memory (no hub access), mlx-lm's
`speculative_generate_step`, and `difftest.adapters.mlx` printing the trace. Importing this
package does not import mlx.
"""

from difftest.runners.mlx.options import ATTNS, DTYPES, MUTATIONS, MLXOptions

__all__ = ["ATTNS", "DTYPES", "MLXOptions", "MUTATIONS"]
