"""``bestk.train.runtime.errors.as_os_error``: a safetensors I/O failure becomes an
``OSError`` naming the path (what the run's one-line error shows); anything else is kept."""

from __future__ import annotations

import errno
from pathlib import Path

from bestk.train.runtime.errors import as_os_error


class SafetensorError(Exception):
    """Stands for ``safetensors.SafetensorError`` (matched by its name, as the real one)."""


def test_an_os_error_code_becomes_that_os_error_with_the_path():
    e = as_os_error(SafetensorError("Error while serializing: IoError(Os { code: 28, kind: "
                                    "StorageFull, message: \"No space left on device (os error "
                                    "28)\" })"), Path("/r/ckpt.safetensors"))
    assert isinstance(e, OSError) and e.errno == errno.ENOSPC
    assert e.filename == "/r/ckpt.safetensors" and e.strerror == "No space left on device"


def test_a_failure_without_a_code_still_names_the_path():
    e = as_os_error(SafetensorError("header too large"), Path("/r/x.safetensors"))
    assert isinstance(e, OSError)
    assert str(e) == "cannot write checkpoint '/r/x.safetensors': header too large"


def test_other_exceptions_are_returned_unchanged():
    original = ValueError("os error 28")  # not a SafetensorError: not reworded
    assert as_os_error(original, Path("p")) is original
