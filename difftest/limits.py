"""Upper limits on what a config, a command line or a trace may ask for, so that memory and
time stay bounded by the size of the input, not by one number in it. Each is checked where the
value is read (config, overrides, trace parser); docs/safety.md lists them."""

from __future__ import annotations

MAX_TOP_K = 4096  # ids in one [spec-logits] row (engines print a top-k of 1..a few hundred)
# Logit rows are held as (rows x widest row) matrices: rows of very different widths may pad
# to at most this many cells per value printed (plus PAD_SLACK), else the trace is refused.
MAX_PAD_RATIO = 4
PAD_SLACK = 1 << 16
MAX_NOISE_RUNS = 100  # reruns of arm A for a noise floor (noise_runs, `noise --runs`)
MAX_SEQUENTIAL_RUNS = 100  # runs of each arm a sequential comparison may take (--until-decided)
MAX_JOBS = 1024  # arms run at once (-j / --jobs, [defaults] launched_jobs)
MAX_MIN_DIFFERING = 1_000_000_000  # differing blocks an `expect = differ` comparison needs
