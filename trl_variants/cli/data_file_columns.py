"""The columns of one local data file, read from its head without `datasets`, so that a missing prompt column is
reported before torch, transformers and TRL load (10-25 s on a small machine).

Only what settles the question is read: a CSV or TSV file's header row, a Parquet file's schema (its footer, with
pyarrow, which `datasets` already depends on and which imports in a fraction of a second), a JSON or JSON Lines
file's first record. A JSON record may lack a key that later records have, and `datasets` then still has the
column, so a column missing from the first record is reported only once the file holds the column's quoted name
nowhere; a compressed file, or a JSON layout other than records (one per line, or a list of them), is left to
`datasets`.
"""

import csv
import json
import os

# Enough for the first record of any reasonable JSON file; a larger one is left to `datasets`.
FIRST_RECORD_MAX_BYTES = 16 * 2**20
READ_CHUNK_BYTES = 2**20


def data_file_columns(path: str) -> list[str] | None:
    """The column names `datasets` will read from `path` (its first record's, for JSON), or `None` when they cannot
    be read cheaply or surely: an unsupported suffix, a compressed or unreadable file, an unusual JSON layout."""
    suffix = os.path.splitext(path.lower())[1]
    try:
        if suffix in (".csv", ".tsv"):
            return _header_row(path, delimiter="\t" if suffix == ".tsv" else ",")
        if suffix == ".parquet":
            import pyarrow.parquet

            return list(pyarrow.parquet.read_schema(path).names)
        if suffix in (".json", ".jsonl"):
            return _first_json_record_keys(path)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError, ImportError):
        return None
    return None


def column_surely_absent(path: str, column: str, columns: list[str]) -> bool:
    """Whether `column`, missing from `columns` as `data_file_columns` read them, is missing from the whole file."""
    if column in columns:
        return False
    if not path.lower().endswith((".json", ".jsonl")):
        return True  # a header row or a schema is every column
    needle = json.dumps(column).encode()
    tail = b""
    with open(path, "rb") as data_file:
        while chunk := data_file.read(READ_CHUNK_BYTES):
            if needle in tail + chunk:
                return False
            tail = chunk[-len(needle) :]
    return True


def _header_row(path: str, delimiter: str) -> list[str] | None:
    with open(path, newline="", encoding="utf-8-sig") as data_file:
        header = next(csv.reader(data_file, delimiter=delimiter), None)
    return header


def _first_json_record_keys(path: str) -> list[str] | None:
    decoder = json.JSONDecoder()
    text = ""
    with open(path, encoding="utf-8") as data_file:
        while len(text) < FIRST_RECORD_MAX_BYTES:
            chunk = data_file.read(READ_CHUNK_BYTES)
            text += chunk
            start = len(text) - len(text.lstrip())
            if text[start : start + 1] == "[":  # a list of records
                start = len(text) - len(text[start + 1 :].lstrip())
            try:
                record, _ = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                if not chunk:  # the whole file read, and still no record
                    return None
                continue
            return list(record) if isinstance(record, dict) else None
    return None
