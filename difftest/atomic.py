"""The one way difftest writes a file: a temp file created exclusively beside the target, then
renamed over it, so readers see the old file or the new one and a planted link is never followed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# O_EXCL makes open() fail on any existing name, a symlink included (dangling or not); O_NOFOLLOW
# says the same for the last component where O_EXCL alone would not be enough.
_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _exclusive_temp(folder: Path, name: str) -> tuple[int, Path]:
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, _EXCLUSIVE, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {folder}")


@contextmanager
def atomic_output(path: Path, *, make_parents: bool = True) -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` when the block ends without an exception.

    Missing parent folders are created (an output folder that does not exist yet is the
    normal case in CI, not an error).
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _exclusive_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:
            # a write, flush or fsync names no file; the message must (a full disk is not a
            # failure to write to standard output)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of one, even if we die mid-write."""
    with atomic_output(path) as fh:
        fh.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: object) -> None:
    from difftest.jsonout import dumps

    text = dumps(data) + "\n"  # serialise first: a bad value must not touch the old file
    write_text_atomic(path, text)


def write_with(path: Path, writer: Callable[[IO[bytes]], None]) -> None:
    """Let `writer` fill the file (e.g. pandas' to_csv) and publish it atomically."""
    with atomic_output(path) as fh:
        writer(fh)
