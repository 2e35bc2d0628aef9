"""bestk._records.iter_jsonl: rows numbered from 1, blank lines skipped, bad rows named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bestk._records import iter_jsonl


def test_rows_are_numbered_as_an_editor_numbers_lines_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n\n  \n{"a": "\xc3\xa9"}\n')
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (4, {"a": "\u00e9"})]


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": 1}\n\xff\n', r"'.*r\.jsonl' is not UTF-8 text \(row 2: byte 0xff\)"),
    (b'{"a": 1}\n{oops\n', r"r\.jsonl: row 2: invalid JSON"),
    (b'[1]\n', r"r\.jsonl: row 1: expected a JSON object, got list"),
])
def test_a_bad_row_is_one_line_naming_file_and_row(tmp_path, data, message):
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message):
        list(iter_jsonl(path))


def test_a_path_that_is_not_a_regular_file_is_refused_before_any_byte_is_read(tmp_path):
    """``/dev/zero`` (an endless line: once read into memory until the process was OOM-killed),
    ``/dev/null``, a FIFO (whose open would wait for a writer) and a directory."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/null"), Path("/dev/zero"), fifo):  # /dev/null first: an old
        # reader fails there (no rows), before /dev/zero and the FIFO, which it would read
        # without end or wait on
        with pytest.raises(ValueError, match="is not a regular file"):
            list(iter_jsonl(path))
    with pytest.raises(ValueError, match="is a directory"):
        list(iter_jsonl(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        list(iter_jsonl(tmp_path / "missing.jsonl"))


def test_a_line_longer_than_the_bound_is_refused_naming_its_row(tmp_path, monkeypatch):
    import bestk._records as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 64)
    path = tmp_path / "r.jsonl"
    fits = '{"a": "' + "x" * 50 + '"}\n'  # 59 bytes with its newline
    path.write_text(fits + '{"a": "' + "x" * 100 + '"}\n')
    rows = iter_jsonl(path)
    assert next(rows)[0] == 1
    with pytest.raises(ValueError, match=r"r\.jsonl: row 2 is longer than"):
        next(rows)
    path.write_bytes(b"\x00" * 1000)  # no newline at all
    with pytest.raises(ValueError, match="row 1 is longer than"):
        list(iter_jsonl(path))
