"""Reading a diff CSV back (`diff.csv`, `diff-<comparison>.csv`, `--csv FILE`) as a typed pandas
DataFrame: token ids as nullable integers, so a row only one arm drafted leaves <NA> instead of
turning every id of the column into a float, and the two label columns as categoricals of the
values difftest writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.analysis.compare import STATUS_NAMES, LogitJudgement
from difftest.core.errors import UsageError
from difftest.report.cells import FORMULA_START
from difftest.report.comparison import CSV_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

# column -> dtype; every column of CSV_COLUMNS has one
DTYPES: dict[str, str] = {
    "req": "string", "pos": "int64", "row": "int64", "token_a": "Int64", "token_b": "Int64",
    "status": "category", "margin_a": "float64", "margin_b": "float64", "logit_a": "float64",
    "logit_b": "float64", "abs_logit_diff": "float64", "logits": "category"}
_LABELS = {"status": tuple(STATUS_NAMES), "logits": tuple(j.value for j in LogitJudgement)}
_NUMERIC = [c for c, t in DTYPES.items() if t not in ("string", "category")]
_INTEGERS = {c for c, t in DTYPES.items() if t.lower() == "int64"}
# a diff CSV holds one row per compared draft row: a few hundred bytes each; past this it is not
# one (and /dev/zero, a FIFO or a folder is refused before anything is read)
MAX_DIFF_BYTES = 4 << 30
_MAX_HEADER = 4096


def _unquote(name: str) -> str:
    """A request id as it was before the writer made it safe for a spreadsheet."""
    return name[1:] if name[:1] == "'" and name[1:2] in FORMULA_START and name[1:] else name


def read_diff(path: Path | str) -> pd.DataFrame:
    """The rows of a diff CSV with one dtype per column (see DTYPES): `Int64` tokens (<NA>
    where an arm has no row), float64 margins and logits (NaN where unknown), the request id
    as a string with the writer's spreadsheet quote removed, and `status`/`logits` as
    categoricals of the values difftest writes."""
    path = Path(path)
    frame = _read_text(path)
    _read_labels(path, frame)
    _read_numbers(path, frame)
    frame["req"] = frame["req"].map(_unquote).astype("string")
    return frame


def _read_text(path: Path) -> pd.DataFrame:
    """Every cell of a diff CSV as text, after the checks that tell a diff CSV from any other
    file (a regular file, of a diff CSV's size, with its header): each kind of unreadable file
    gets its own line, never a traceback."""
    import pandas as pd

    try:
        with open(path, encoding="utf-8", newline="") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"{path}: not a regular file; a diff CSV is a file difftest "
                                 "wrote")
            if info.st_size > MAX_DIFF_BYTES:
                raise UsageError(f"{path}: larger than {MAX_DIFF_BYTES} bytes; not a diff CSV")
            header = fh.readline(_MAX_HEADER).rstrip("\r\n").split(",")
            if tuple(header) != CSV_COLUMNS:
                raise UsageError(f"{path}: not a difftest diff CSV: its header is "
                                 f"{','.join(header)[:200]!r}, expected "
                                 f"{','.join(CSV_COLUMNS)!r}")
            fh.seek(0)
            return pd.read_csv(fh, dtype=str, keep_default_na=False)
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a diff CSV") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}): not a diff CSV") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise UsageError(f"{path}: not a well-formed CSV: {str(exc).strip()}") from None


def _read_labels(path: Path, frame: pd.DataFrame) -> None:
    """The label columns as categoricals of the values difftest writes; any other value is
    refused with its line, so a typo is not read as a new category."""
    import pandas as pd

    for column, allowed in _LABELS.items():
        bad = ~frame[column].isin(allowed)
        if bad.any():
            line = int(bad.to_numpy().argmax()) + 2
            raise UsageError(f"{path}:{line}: column {column}: {frame[column][bad].iloc[0]!r} is "
                             f"not one of {', '.join(repr(v) for v in allowed)}")
        frame[column] = pd.Categorical(frame[column], categories=list(allowed))


def _read_numbers(path: Path, frame: pd.DataFrame) -> None:
    """The numeric columns in their dtypes (an empty cell is unknown); the integer columns
    hold whole numbers (`_whole`)."""
    import pandas as pd

    for column in _NUMERIC:
        text = frame[column]
        try:
            numbers = pd.to_numeric(text.where(text != "", None), errors="raise")
            if column in _INTEGERS:
                _whole(path, column, numbers, text)
            dtype: Any = DTYPES[column]  # a dtype name pandas reads; the stubs want literals
            frame[column] = numbers.astype(dtype)
        except (ValueError, TypeError, OverflowError) as exc:
            raise UsageError(f"{path}: column {column}: {exc}") from None


def _whole(path: Path, column: str, numbers: pd.Series, text: pd.Series) -> None:
    """An integer column holds whole numbers that fit int64: `pos = 12.5` is refused, not
    read as 12."""
    import numpy as np

    values = numbers.to_numpy(dtype="float64", na_value=np.nan)
    known = ~np.isnan(values)
    bad = known & ((np.floor(values) != values) | (np.abs(values) >= 2.0**63))
    if bad.any():
        line = int(bad.argmax()) + 2
        raise UsageError(f"{path}:{line}: column {column}: {text.iloc[int(bad.argmax())]} is "
                         "not a whole number that fits 64 bits")
