"""difftest: compare what two arms of a speculative-decoding runner drafted, and say whether
the comparison could have failed at all.

This module declares the public surface; docs/python-api.md documents it. The names in
`__all__` (the commands, the records they take and return, the emitter and its adapters) and
the modules in `MODULES` (what an engine imports, the runners' `python -m` entry points, the
command line and the pytest plugin) are the only supported import paths: every other module of
the package is internal and may move.

Every name is loaded on first use, so `import difftest` and `difftest --help` import no numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    # the commands, one function each (difftest.api); `bisect` is spelled `difftest.api.bisect`,
    # since `difftest.bisect` is the package of its library
    "audit", "calibrate", "check", "compare", "compare_arms", "compare_traces", "localize",
    "noise", "parse", "probe", "read_diff", "rejudge",
    # the records they take and return, and the errors they raise
    "AuditReport", "BisectResult", "CheckResult", "ComparisonReport", "ConfigError",
    "DifftestError", "ExitCode", "Expect", "NoiseReport", "Outputs", "Overrides", "ProbeReport",
    "Rules", "RunOptions", "Traces", "UsageError", "Verdict", "VerdictKind",
    # what an engine calls to print a trace: the emitter, its tracer and drafting kinds, and
    # the adapters (`difftest.adapters.hf`, `.mlx`, `.llamacpp`)
    "DraftingKind", "Tracer", "adapters", "emit",
]

# The modules a user imports or runs by name: the emitter and the adapters (imported by an
# engine), the runners (`python -m difftest.runners.NAME`, arms of a config), the command line
# (`difftest`, `python -m difftest`) and the pytest plugin (`pytest --difftest`).
MODULES = ("difftest.emit", "difftest.adapters.hf", "difftest.adapters.mlx",
           "difftest.adapters.llamacpp", "difftest.runners.reference", "difftest.runners.hf",
           "difftest.runners.mlx", "difftest.runners.llamacpp",
           "difftest.cli", "difftest.pytest_plugin")

if TYPE_CHECKING:
    from difftest import adapters, emit
    from difftest.api import (AuditReport, BisectResult, CheckResult, ComparisonReport,
                              ConfigError, DifftestError, ExitCode, Expect, NoiseReport,
                              Outputs, Overrides, ProbeReport, Rules, RunOptions, Traces, UsageError,
                              Verdict, VerdictKind, audit, calibrate, check, compare,
                              compare_arms, localize,
                              compare_traces, noise, parse, probe, read_diff, rejudge)
    from difftest.emit import DraftingKind, Tracer


def __getattr__(name: str) -> Any:
    if name in ("adapters", "emit"):
        return importlib.import_module(f"difftest.{name}")
    if name in ("Tracer", "DraftingKind"):
        from difftest import emit

        return getattr(emit, name)
    if name in __all__:
        from difftest import api

        return getattr(api, name)
    raise AttributeError(f"module 'difftest' has no attribute {name!r}")
