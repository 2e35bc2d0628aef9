"""bestk._records.iter_jsonl: rows numbered from 1, blank lines skipped, bad rows named."""

from __future__ import annotations

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
