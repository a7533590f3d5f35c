"""Where rows go: Parquet (pyarrow, written in batches) and JSONL (line by line), one file per table
and split; or nowhere, only counted (`ktree dataset stats`). Memory holds one batch per open file."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.dataset.columns import names, schema

BATCH_ROWS = 512
FORMATS = ("parquet", "jsonl")


def file_name(table: str, split: str | None, fmt: str) -> str:
    return f"{table}-{split}.{fmt}" if split else f"{table}.{fmt}"


class Counting:
    """Counts rows per table and split; writes nothing."""

    def __init__(self, splits: tuple[str, ...] | None = None):
        self.splits = splits  # None: one file per table, no split in its name
        self.rows: Counter[tuple[str, str | None]] = Counter()

    def write(self, table: str, row: dict[str, Any]) -> None:
        self.rows[(table, row["split"] if self.splits else None)] += 1

    def open_table(self, table: str) -> None:
        for split in self.splits or (None,):
            self.rows[(table, split)] += 0

    def files(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


class Files(Counting):
    """Rows written to DIR as Parquet and/or JSONL, a file per table and split."""

    def __init__(self, out: Path, formats: tuple[str, ...], splits: tuple[str, ...] | None = None):
        super().__init__(splits)
        self.out, self.formats = out, formats
        self._batches: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
        self._parquet: dict[tuple[str, str | None], pq.ParquetWriter] = {}
        self._jsonl: dict[tuple[str, str | None], Any] = {}
        self._names: dict[str, list[str]] = {}

    def open_table(self, table: str) -> None:
        """Every split's files exist once a table is written, empty ones too (with the schema)."""
        super().open_table(table)
        for split in self.splits or (None,):
            key = (table, split)
            if key in self._batches:
                continue
            self._batches[key] = []
            if "parquet" in self.formats:
                self._parquet[key] = pq.ParquetWriter(self.out / file_name(table, split, "parquet"),
                                                      schema(table), compression="zstd")
            if "jsonl" in self.formats:
                self._jsonl[key] = open(self.out / file_name(table, split, "jsonl"), "w", encoding="utf-8")  # noqa: SIM115

    def write(self, table: str, row: dict[str, Any]) -> None:
        super().write(table, row)
        columns = self._names.get(table) or self._names.setdefault(table, names(table))
        row = {k: row.get(k) for k in columns}  # the schema's columns, in its order
        key = (table, row["split"] if self.splits else None)
        if key not in self._batches:
            self.open_table(table)
        if key in self._jsonl:
            self._jsonl[key].write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        batch = self._batches[key]
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            self._flush(key)

    def _flush(self, key: tuple[str, str | None]) -> None:
        batch = self._batches[key]
        if batch and key in self._parquet:
            self._parquet[key].write_table(pa.Table.from_pylist(batch, schema=schema(key[0])))
        batch.clear()

    def files(self) -> dict[str, int]:
        return {file_name(table, split, fmt): n for (table, split), n in sorted(self.rows.items(),
                key=lambda kv: (kv[0][0], kv[0][1] or "")) for fmt in self.formats}

    def close(self) -> None:
        for key in list(self._batches):
            self._flush(key)
        for writer in self._parquet.values():
            writer.close()
        for f in self._jsonl.values():
            f.close()
        self._parquet.clear()
        self._jsonl.clear()
