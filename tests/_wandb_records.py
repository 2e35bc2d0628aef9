"""Read the history rows of an offline W&B run file (``run-<id>.wandb``) without a network.

The file is W&B's record log: a 7-byte header (``:W&B``, magic 0xBEE1, version) and then
LevelDB-log framing (32 KiB blocks; each chunk has a 7-byte header: CRC32, little-endian
uint16 length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4) around serialised
``wandb_internal_pb2.Record`` protobufs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = 7


def read_records(path: str | Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    records, chunk, pos = [], b"", _HEADER
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        if kind == 0:  # zero padding to the end of the block
            pos += left
            continue
        chunk += data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(chunk)
            records.append(rec)
            chunk = b""
    return records


def history(path: str | Path) -> list[dict[str, Any]]:
    """The rows ``run.log`` wrote, as dicts of key -> value."""
    rows = []
    for rec in read_records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                         for i in rec.history.item})
    return rows


def run_config(path: str | Path) -> dict[str, Any]:
    """The run config of the file's run record (nested keys as W&B stores them)."""
    for rec in read_records(path):
        if rec.WhichOneof("record_type") == "run":
            return {u.key: json.loads(u.value_json) for u in rec.run.config.update}
    return {}
