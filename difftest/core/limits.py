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


def check_sampling(temperature: object, top_p: object, sample_seed: object, samples: object,
                   *, dash: bool, seed_needs_temperature: bool = False) -> None:
    """Refuse sampling options a runner cannot honour (UsageError, exit 2): the reference and
    transformers runners take the same four. `dash`: options named as on a command line
    (`top-p`), else as in a config (`top_p`); `seed_needs_temperature`: a sampler seed without a
    temperature is refused too (greedy decoding draws nothing)."""
    from difftest.core.errors import UsageError

    top, seed = ("top-p", "sample-seed") if dash else ("top_p", "sample_seed")
    t = temperature
    if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool)
                              and 0 < t < float("inf")):
        raise UsageError(f"temperature must be a finite number > 0, got {t!r}")
    p = top_p
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise UsageError(f"{top} must be in (0, 1], got {p!r}")
    if t is None and p != 1:
        raise UsageError(f"{top} needs a temperature (greedy decoding takes the argmax)")
    if sample_seed is not None:
        check_seed(sample_seed, seed, MAX_NONDET_SEED)
        if seed_needs_temperature and t is None:
            raise UsageError(f"{seed} needs a temperature (greedy decoding draws nothing)")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise UsageError(f"samples must be an integer >= 1, got {samples!r}")
    if samples > 1 and t is None:
        raise UsageError("samples > 1 needs a temperature (greedy draws are all equal)")


# A sliding window in keys (the reference runner's `sliding:W`, the hf and mlx runners'
# --sliding-window): positions and masks are int32 in the engines this mimics.
MAX_WINDOW = 2**31 - 1


def check_window(value: object, name: str = "sliding-window") -> int:
    """A sliding window of 1..MAX_WINDOW keys (the query's own included), else UsageError."""
    from difftest.core.errors import UsageError

    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW:
        raise UsageError(f"{name} must be an integer in 1..{MAX_WINDOW}, got {value!r}")
    return value


def parse_draft_lens(text: str, flag: str = "--draft-lens") -> tuple[int, ...]:
    """`1,2,3,4`: drafted tokens per step, cycled (every runner's --draft-lens); "" is none.
    An empty entry or a non-integer is a UsageError (entries are checked by check_draft_lens)."""
    from difftest.core.errors import UsageError

    if not text.strip():
        return ()
    entries = [x.strip() for x in text.split(",")]
    if not all(e.isdigit() and e.isascii() and len(e) <= 10 for e in entries):
        raise UsageError(f"{flag} {text!r}: expected comma-separated integers, e.g. 1,2,3,4")
    return tuple(int(e) for e in entries)


def check_draft_lens(lens: tuple[int, ...], k: int, name: str = "draft_lens") -> None:
    """Each drafted length in 1..k (k: the most a step drafts), else UsageError."""
    from difftest.core.errors import UsageError

    for n in lens:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= k:
            raise UsageError(f"{name} entries must be integers in 1..k ({k}), got {n!r}")
