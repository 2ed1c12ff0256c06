"""Upper limits on what a config, a command line or a trace may ask for, so that memory and
time stay bounded by the size of the input, not by one number in it. Each is checked where the
value is read (config, overrides, trace parser); docs/safety.md lists them."""

from __future__ import annotations

MAX_TOP_K = 4096  # ids in one [spec-logits] row (engines print a top-k of 1..a few hundred)
# Logit rows are held as (rows x widest row) matrices: rows of very different widths may pad
# to at most this many cells per value printed (plus PAD_SLACK), else the trace is refused.
MAX_PAD_RATIO = 4
PAD_SLACK = 1 << 16
MAX_NOISE_RUNS = 100  # reruns of arm A for a noise floor (noise_runs, `noise --noise-runs`)
MAX_SEQUENTIAL_RUNS = 100  # runs of each arm a sequential comparison may take (--until-decided)
MAX_JOBS = 1024  # arms run at once (-j / --jobs, [defaults] launched_jobs)
MAX_MIN_DIFFERING = 1_000_000_000  # differing blocks an `expect = differ` comparison needs
# A runner's --seed: the runners seed torch, numpy and mlx generators with the seed plus small
# offsets, and each takes at most 64 bits, so a seed is held to 32 (what every generator takes).
MAX_SEED = 2**32 - 1
# The reference runner's --nondet-seed is handed to torch as it is (a drawn one is 63 bits).
MAX_NONDET_SEED = 2**63 - 1


def check_seed(value: object, name: str = "seed", high: int = MAX_SEED) -> None:
    """Refuse a seed the generators would reject with a traceback (UsageError, exit 2)."""
    from difftest.core.errors import UsageError

    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        shown = (f"an integer of {value.bit_length()} bits"
                 if isinstance(value, int) and value.bit_length() > 128 else repr(value))
        raise UsageError(f"{name} must be an integer >= 0 and <= {high}, got {shown}")
