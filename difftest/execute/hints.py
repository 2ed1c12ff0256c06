"""Arm failures with a way out: an arm whose Python could not import a module is one line that
names what to install, not the child's traceback.

The table below is the one place that knows which difftest extra provides which module. A
module no extra provides is named with the plain advice to install it where the arm runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# module (top-level package) -> the difftest extra that installs it
EXTRAS = {"torch": "reference", "transformers": "hf", "mlx": "mlx", "mlx_lm": "mlx"}
# runners whose imports come from another extra than the table's default
_RUNNER_EXTRAS = (("difftest.runners.hf", "hf"), ("difftest/hf", "hf"))

# the last line of an uncaught import failure, as Python prints it
_MISSING = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([^']+)'\s*\Z")


@dataclass(frozen=True)
class MissingModule:
    """A module an arm's Python could not import, and the difftest extra that provides it."""

    module: str  # the top-level package: `torch`, not `torch.nn`
    extra: str | None

    @property
    def cause(self) -> str:
        """One line, the same for every arm that failed this way."""
        if self.extra is None:
            return (f"cannot import {self.module}: install the package that provides it in the "
                    "environment the arm runs in")
        return (f"cannot import {self.module}: install difftest's {self.extra} extra "
                f"(pip install -e '.[{self.extra}]' in a checkout, else "
                f"pip install 'difftest[{self.extra}]')")


def missing_module(stderr_tail: str, argv: Sequence[str] = ()) -> MissingModule | None:
    """The module an arm failed to import, when its stderr ends the way Python ends on an
    uncaught import failure; None otherwise (an import failure the program survived, or one
    followed by other output, is not taken for the cause)."""
    lines = [line for line in stderr_tail.splitlines() if line.strip()]
    found = _MISSING.match(lines[-1]) if lines else None
    if found is None:
        return None
    module = found.group(1).split(".")[0]
    extra = EXTRAS.get(module)
    if extra is not None:
        for marker, runner_extra in _RUNNER_EXTRAS:
            if any(marker in a for a in argv):
                extra = runner_extra
    return MissingModule(module, extra)
