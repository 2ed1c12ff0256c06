"""`difftest localize --dumps A B`: the first draft-forward module whose output differs.

Reads two capture folders (difftest.activations) of one step, taken on one context (the
teacher-forced rerun makes it one), and names the first module in forward order whose output
differs beyond `atol`, with where the difference sits. The module before it agreed, so its
input did (in a chain of modules; a residual input is the stream an earlier module produced).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from difftest.activations import Localization, first_divergence, read_dumps
from difftest.errors import ExitCode


@dataclass(frozen=True)
class LocalizeReport:
    dumps: tuple[Path, Path]
    localization: Localization

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.localization.first is None else ExitCode.DIFFER

    def render(self) -> str:
        loc = self.localization
        lines = [loc.describe(), "", "| # | module | shape | max abs diff |", "|---|---|---|---|"]
        for i, m in enumerate(loc.modules):
            mark = " **first**" if m is loc.first else ""
            lines.append(f"| {i} | {m.module}{mark} | {'x'.join(map(str, m.shape))} | "
                         f"{m.max_abs_diff:.3g} |")
        return "\n".join(lines)


def localize_dumps(a: Path, b: Path, atol: float = 0.0) -> LocalizeReport:
    """Compare two capture folders module by module, in forward order."""
    return LocalizeReport((Path(a), Path(b)), first_divergence(read_dumps(Path(a)),
                                                               read_dumps(Path(b)), atol))
