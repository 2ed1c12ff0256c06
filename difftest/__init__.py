"""difftest: compare what two arms of a speculative-decoding runner drafted, and say whether
the comparison could have failed at all.

The Python API (`difftest.compare_arms`, `compare_traces`, `check`, `probe`, `rejudge`,
`read_diff`) is
loaded on first use, so `import difftest` and `difftest --help` import no numpy or pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["check", "compare_arms", "compare_traces", "probe", "read_diff", "rejudge"]

from difftest.core import moved

moved.install()  # old module names (difftest.errors, difftest.compare, ...) for one release

if TYPE_CHECKING:
    from difftest.api import check, compare_arms, compare_traces, probe, read_diff, rejudge


def __getattr__(name: str) -> Any:
    if name in __all__:
        from difftest import api

        return getattr(api, name)
    raise AttributeError(f"module 'difftest' has no attribute {name!r}")
