"""Write rows as parquet that any verl/datasets/pyarrow version reads, atomically.

Parquet written by `datasets` carries a `huggingface` schema-metadata blob naming its feature types; an
older `datasets` that meets a newer type name fails with "Feature type 'List' not found" (verl issue
#2723). We write with pyarrow alone: plain Arrow types and no `datasets` metadata, which every
`datasets` version infers features from.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Types old readers may not know (large offsets, string/list views): never in our files.
_NON_PORTABLE = (pa.types.is_large_string, pa.types.is_large_list, pa.types.is_large_binary)


def non_portable_fields(schema: pa.Schema) -> list[str]:
    """Names of fields (dotted paths) whose Arrow type an older reader may reject."""
    found: list[str] = []

    def visit(name: str, typ: pa.DataType) -> None:
        if any(check(typ) for check in _NON_PORTABLE) or "view" in str(typ):
            found.append(name)
        if pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                visit(f"{name}.{typ.field(i).name}", typ.field(i).type)
        elif pa.types.is_list(typ):
            visit(f"{name}[]", typ.value_type)

    for field in schema:
        visit(field.name, field.type)
    return found


def rows_to_table(rows: list[dict]) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    bad = non_portable_fields(table.schema)
    if bad:
        raise TypeError(f"non-portable parquet types in fields: {bad}")
    return table.replace_schema_metadata(None)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write next to the target, fsync, then rename over it: readers see the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            pq.write_table(table, f, compression="snappy")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
