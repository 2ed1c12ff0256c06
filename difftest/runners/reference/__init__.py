"""difftest's embedded reference runner: a seeded DFlash/DFlash2 speculative-decoding loop in
PyTorch with a paged and a materialized attention lane, selector scalars, a degenerate fixture
and three known-wrong attentions. The only package of difftest that imports torch; importing this
package itself does not (the runner modules do), so option errors are reported before torch loads.
"""

from difftest.runners.reference.options import (DRAFTERS, FIXTURES, KERNELS, LANES, MUTATIONS,
                                        RunnerOptions, lane_from_env, mutation_from_env,
                                        trace_level_from_env)

__all__ = ["DRAFTERS", "FIXTURES", "KERNELS", "LANES", "MUTATIONS", "RunnerOptions",
           "lane_from_env", "mutation_from_env", "trace_level_from_env"]
