"""Running an arm's command through a launcher (`srun ... --`), so the arm runs where the GPUs
are while difftest keeps its captures, exit code, timeout and signals.

The launcher is an argv prefix. For Slurm's `srun` three things need care:
- environment: srun copies its own environment into the job (`--export=ALL`, the default), and
  an explicit `--export=ALL,K=V` loses to a K already set in srun's environment. So the arm's
  overrides are set in srun's own environment, which is what reaches the job; an `--export`
  naming them is added as well so a site default of `--export=NONE` cannot drop them.
- ending the job: one SIGINT to srun is not forwarded; SIGTERM ends the job step at once. The
  supervisor ends an arm's process group with SIGTERM, so srun is covered.
- job id: srun does not print it under `-Q`; the arm gets a unique `--job-name` and the id is
  looked up with `squeue` while the arm runs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

def is_srun(launcher: Sequence[str]) -> bool:
    return bool(launcher) and os.path.basename(launcher[0]) == "srun"


@dataclass(frozen=True)
class Launch:
    """The argv difftest starts and, for srun, the job name to find the job by."""

    argv: list[str]
    launcher: list[str] | None
    job_name: str | None


def _has_option(launcher: Sequence[str], *names: str) -> bool:
    for arg in launcher:
        if arg == "--":
            break
        if any(arg == n or arg.startswith(n + "=") for n in names):
            return True
    return False


def _insert_before_separator(launcher: list[str], extra: list[str]) -> list[str]:
    """srun options go before `--` (or at the end when there is none)."""
    if "--" in launcher:
        i = launcher.index("--")
        return launcher[:i] + extra + launcher[i:]
    return launcher + extra


def launch(command: Sequence[str], launcher: Sequence[str] | None,
           env_overrides: Mapping[str, str], tag: str) -> Launch:
    """The argv to start: the command alone, or behind its launcher with srun's extras added."""
    if not launcher:
        return Launch(list(command), None, None)
    prefix = list(launcher)
    job_name = None
    if is_srun(prefix):
        extra: list[str] = []
        if not _has_option(prefix, "--job-name", "-J"):
            job_name = f"difftest-{tag}"
            extra.append(f"--job-name={job_name}")
        if env_overrides and not _has_option(prefix, "--export"):
            # Names only: srun takes the values from its own environment, where they are set.
            extra.append("--export=" + ",".join(["ALL", *env_overrides]))
        prefix = _insert_before_separator(prefix, extra)
    return Launch(prefix + list(command), list(launcher), job_name)


def find_job_id(job_name: str) -> str | None:
    """The id of the running job with this name, if squeue can tell."""
    try:
        out = subprocess.run(["squeue", "--noheader", "--name", job_name, "--format", "%i"],
                             capture_output=True, text=True, timeout=5, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    ids = out.stdout.split()
    return ids[0] if out.returncode == 0 and ids else None


def cancel_job(job_name: str) -> None:
    """scancel by name: the last word when srun itself could not end its job."""
    try:
        subprocess.run(["scancel", "--name", job_name], capture_output=True, timeout=10,
                       check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        pass
