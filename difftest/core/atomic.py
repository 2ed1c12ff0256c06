"""The one way difftest writes a file: a temp file created exclusively beside the target, then
renamed over it, so readers see the old file or the new one and a planted link is never followed.

Before anything is created, the target is checked (`check_target`): only a regular file, or
nothing, may be there. A device node, FIFO, socket, directory or symbolic link is refused
(RefusedOutput, exit 2) and left exactly as it was: as root, replacing `/dev/null` or a FIFO a
CI step reads from would harm the machine. A caller also names the files its run reads (never
overwritten, whatever path leads to them) and, for run-directory files, the folder the file must
really sit in.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from difftest.core.errors import RefusedOutput

# O_EXCL makes open() fail on any existing name, a symlink included (dangling or not); O_NOFOLLOW
# says the same for the last component where O_EXCL alone would not be enough.
_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

STDOUT_NAME = "-"

_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _within(child: str, folder: str) -> bool:
    return child == folder or child.startswith(folder.rstrip(os.sep) + os.sep)


def output_file(text: str) -> Path:
    """An output file's name as the user wrote it: one that ends in a separator names a
    folder, and a Path would drop the separator and write a file named like the folder."""
    if text.endswith(("/", os.sep)):
        raise RefusedOutput(f"{text}: names a folder (it ends in {text[-1]!r}); a report is a "
                            "file: give the file's name (in that folder: "
                            f"{text}NAME)")
    return Path(text)


def check_target(path: Path, *, reads: Iterable[Path] = (), keeps: Iterable[Path] = (),
                 inside: Path | None = None) -> None:
    """Refuse (RefusedOutput) a target difftest must not write; touch nothing either way.

    `reads`: files the run reads (traces, captures, meta.json, the config); the target may not
    be any of them, by name, through a link, or as a hard link. `keeps`: records a run wrote
    that a report asked for later may not replace, told apart the same way. `inside`: the
    folder the target must really be in (its parent's real path), for files named inside a run
    directory.
    """
    path = Path(path)
    if str(path) == STDOUT_NAME:
        raise RefusedOutput(f"{path}: '-' (standard output) is not a file this option writes; "
                            "give a file name")
    st = _regular_or_none(path)
    if st is not None:
        _check_not_ours(path, (st.st_dev, st.st_ino), reads, keeps)
    if inside is not None:
        parent = os.path.realpath(path.parent)
        if not _within(parent, os.path.realpath(inside)):
            raise RefusedOutput(f"{path}: leads outside the run directory {inside}")


def _regular_or_none(path: Path) -> os.stat_result | None:
    """What is at the target, without following a link: nothing (None) or a regular file;
    anything else is refused by its kind, before anything is created."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError:
        st = None  # e.g. a parent that is not a folder: the write itself says so
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise RefusedOutput(f"{path}: is {kind}; difftest writes only regular files and never "
                            "replaces or writes through anything else (choose another path)")
    return st


def _check_not_ours(path: Path, here: tuple[int, int], reads: Iterable[Path],
                    keeps: Iterable[Path]) -> None:
    """An existing target (device and inode `here`) that is one of the run's inputs or one of
    its own records, by any name or link, is refused: writing it would destroy what the run
    is about."""
    for read in reads:
        if _identity(Path(read)) == here:
            raise RefusedOutput(f"{path}: is {read}, a file this run reads; difftest never "
                                "writes over its own inputs (choose another path)")
    for kept in keeps:
        if _identity(Path(kept)) == here:
            raise RefusedOutput(f"{path}: is {kept}, a record the run itself wrote; a "
                                "requested report never replaces it (choose another path)")


def check_writable(path: Path) -> None:
    """Refuse (RefusedOutput) now a target the writer could not create later: checked as
    `check_target` does, then its nearest existing folder must be a folder that takes a new file
    (tried by creating and removing one temp file there; folders still missing are made by the
    writer). For a result that takes a long run to produce."""
    path = Path(path)
    check_target(path)
    folder = path.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise RefusedOutput(f"{path}: cannot be written: {folder} is not a folder")
    try:
        fd, tmp = _exclusive_temp(folder, path.name)
    except OSError as exc:
        raise RefusedOutput(f"{path}: cannot be written: {folder}: "
                            f"{exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(tmp)


@contextmanager
def atomic_output(path: Path, *, make_parents: bool = True, reads: Iterable[Path] = (),
                  inside: Path | None = None) -> Iterator[IO[bytes]]:
    """A binary file that becomes `path` when the block ends without an exception.

    Missing parent folders are created (an output folder that does not exist yet is the
    normal case in CI, not an error). The target is checked before the temp file is made and
    again just before the rename.
    """
    path = Path(path)
    reads = tuple(reads)
    check_target(path, reads=reads)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    check_target(path, reads=reads, inside=inside)
    try:
        fd, tmp = _exclusive_temp(path.parent, path.name)
    except OSError as exc:  # the temp file's name means nothing to the reader: name the target
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        check_target(path, reads=reads, inside=inside)
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


def _exclusive_temp(folder: Path, name: str) -> tuple[int, Path]:
    for _ in range(100):
        tmp = folder / f".{name[:200]}.{os.urandom(4).hex()}.tmp"
        try:
            return os.open(tmp, _EXCLUSIVE, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {folder}")


def write_bytes_atomic(path: Path, data: bytes, *, reads: Iterable[Path] = (),
                       inside: Path | None = None) -> None:
    """Readers see the old file or the new one, never half of one, even if we die mid-write."""
    with atomic_output(path, reads=reads, inside=inside) as fh:
        fh.write(data)


def write_text_atomic(path: Path, text: str, *, reads: Iterable[Path] = (),
                      inside: Path | None = None) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), reads=reads, inside=inside)


def write_json_atomic(path: Path, data: object, *, reads: Iterable[Path] = (),
                      inside: Path | None = None) -> None:
    from difftest.core.jsonout import dumps

    text = dumps(data) + "\n"  # serialise first: a bad value must not touch the old file
    write_text_atomic(path, text, reads=reads, inside=inside)


def write_with(path: Path, writer: Callable[[IO[bytes]], None], *, reads: Iterable[Path] = (),
               inside: Path | None = None) -> None:
    """Let `writer` fill the file (e.g. pandas' to_csv) and publish it atomically."""
    with atomic_output(path, reads=reads, inside=inside) as fh:
        writer(fh)
