"""Running arms and keeping what they printed: one job per module.

- `supervise`: start arms (up to a cap), watch them, end their process groups, handle signals
- `capture`: copy an arm's output into its capture files, count trace lines, cap their size
- `launcher`: run an arm through `srun` (or another argv prefix)
- `gitprep`: where an arm runs (its cwd, or a checkout of its git_ref)
- `records`: the frozen `ArmResult` and the meta.json it is stored in
- `rundir`: run directories and capture file names
- `progress`: the progress display

The names the other stages use are those of these modules, loaded here on first use. The atomic
file writer (`difftest.core.atomic`), the process-group killer (`difftest.core.procgroup`) and
the run signal (`difftest.core.errors.RunSignal`) sit below every stage and are imported from
there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from difftest.execute.records import (
        META_FORMAT, META_NAME, ArmResult, RunStatus, load_run, utc_now,
    )
    from difftest.execute.rundir import new_run_dir, safe_name
    from difftest.execute.supervise import (ArmsEnded, JobLimits, run_arms, signal_of,
                                            signals_as_interrupts)

# Each name is loaded from its module on first use, so reading an arm's record (`records`)
# does not start the supervisor's imports: a compare of two traces never loads them.
_HOMES = {
    "difftest.execute.records": ("META_FORMAT", "META_NAME", "ArmResult", "RunStatus",
                                 "load_run", "utc_now"),
    "difftest.execute.rundir": ("new_run_dir", "safe_name"),
    "difftest.execute.supervise": ("ArmsEnded", "JobLimits", "run_arms", "signal_of",
                                   "signals_as_interrupts"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'difftest.execute' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "ArmResult", "ArmsEnded", "JobLimits", "META_FORMAT", "META_NAME", "RunStatus", "load_run",
    "new_run_dir", "run_arms", "safe_name", "signal_of", "signals_as_interrupts", "utc_now",
]
