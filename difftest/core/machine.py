"""What makes a float differ between machines, as a thresholds file records it and `check`
compares it: the CPU and its SIMD features (the CPU's and the ones numpy dispatches to), the
numeric libraries' versions and BLAS, the thread counts and kernel choices the environment sets
(`env`), and the CPU count (recorded, not compared: the shipped configs pin each arm's threads).

Nothing here imports torch, transformers or mlx: their versions are read from the installed
distributions' metadata.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from collections.abc import Mapping
from pathlib import Path

# the /proc/cpuinfo flags that choose a kernel: vector extensions and fused multiply-add
_SIMD_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "amx", "asimd", "sve", "neon")
# the variables that set thread counts or a library's kernels (numpy's own: `numpy_simd`)
_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "ATEN_CPU_CAPABILITY")
_PACKAGES = ("numpy", "torch", "transformers", "mlx", "mlx-lm")

# the keys whose difference can move a float; the others (a machine's name) only describe
COMPARED = ("arch", "cpu", "cpu_simd", "numpy_simd", "blas", *_PACKAGES, "env")


def _cpuinfo() -> tuple[str, str]:
    """The CPU's model name and its SIMD flags, from /proc/cpuinfo where there is one."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown", ""
    model, flags = "", ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = value
    simd = sorted({f for f in flags.split() if f.startswith(_SIMD_PREFIXES)})
    return model or platform.processor() or "unknown", " ".join(simd)


def _numpy_simd() -> str:
    """The SIMD features numpy dispatches to here (NPY_DISABLE_CPU_FEATURES takes some off)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - numpy < 2
        return "unknown"
    return " ".join(sorted(k for k, v in __cpu_features__.items() if v))


def _blas() -> str:
    import numpy as np
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    except (KeyError, TypeError, AttributeError):  # pragma: no cover - another numpy build
        return "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.lru_cache(maxsize=1)
def _machine() -> tuple[tuple[str, str], ...]:
    return tuple(_read().items())


def this_machine() -> dict[str, str]:
    """This machine, as a thresholds file's `[machine]` table records it (read once)."""
    return dict(_machine())


def _read() -> dict[str, str]:
    cpu, simd = _cpuinfo()
    env = ", ".join(f"{v}={os.environ[v]}" for v in _ENV_VARS if v in os.environ)
    return {"arch": platform.machine(), "cpu": cpu, "cpu_simd": simd,
            "numpy_simd": _numpy_simd(), "blas": _blas(),
            **{p: _version(p) for p in _PACKAGES},
            "env": env or "unset", "cpus": str(os.cpu_count() or 0),
            "python": platform.python_version()}


def _env_without(text: str, pinned: frozenset[str]) -> str:
    """An `env` value less the variables in `pinned` ("unset" when none is left)."""
    if not pinned or text == "unset":
        return text
    kept = [part for part in text.split(", ") if part.partition("=")[0] not in pinned]
    return ", ".join(kept) or "unset"


def differences(recorded: Mapping[str, str], here: Mapping[str, str],
                pinned: frozenset[str] = frozenset()) -> list[str]:
    """The float-moving keys on which two machines differ, as `key (file: X, here: Y)`; for a
    SIMD list, the features one has and the other lacks. `pinned`: environment variables every
    arm sets itself, so that difftest's own value of them reaches no arm (not compared)."""
    out = []
    for key in COMPARED:
        if key not in recorded:
            continue
        was, now = recorded[key], here.get(key, "unknown")
        if key == "env":
            was, now = _env_without(was, pinned), _env_without(now, pinned)
        if was == now:
            continue
        if key.endswith("_simd"):
            lost = sorted(set(was.split()) - set(now.split()))
            gained = sorted(set(now.split()) - set(was.split()))
            parts = ([f"lacks {' '.join(lost)}"] if lost else []) + (
                [f"adds {' '.join(gained)}"] if gained else [])
            out.append(f"{key} ({'; '.join(parts)} here)")
        else:
            out.append(f"{key} (file: {was}, here: {now})")
    return out
