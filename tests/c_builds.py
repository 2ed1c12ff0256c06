"""Build one of difftest's C extensions with chosen compiler flags, here, and load it under its
own name: how tests check that a module's results do not depend on how it was built."""

from __future__ import annotations

import importlib.util
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType


def built(source: Path, name: str, folder: Path, *flags: str) -> ModuleType:
    """`source` compiled by gcc with `flags` into `folder`, loaded as module `name`."""
    out = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *flags,
                    f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(out)],
                   check=True, capture_output=True, timeout=300)
    spec = importlib.util.spec_from_file_location(name, out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
