"""One writer per run directory: an exclusive lock on ``DIR/.lock`` for the life of a run.

:class:`RunLock` holds an exclusive ``flock`` (``msvcrt.locking`` on Windows) on
``DIR/.lock``, which stores the holder's pid; a second writer gets :class:`RunDirectoryBusy`
naming that pid. The kernel drops the lock when the process dies, so a ``kill -9`` never
leaves a stale lock.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

__all__ = ["RunLock", "RunDirectoryBusy", "LOCK_NAME", "directory_names"]

#: The lock file of a run directory.
LOCK_NAME = ".lock"


class RunDirectoryBusy(ValueError):
    """Another process holds the run directory's lock."""


class RunLock:
    """An exclusive lock on a run directory (``DIR/.lock``, holding the holder's pid).

    ``fcntl.flock`` on POSIX (``msvcrt.locking`` on Windows): it belongs to the open file, so
    it is released by :meth:`release`, when this object is garbage-collected, or by the
    kernel when the process dies.

    A lock file this lock created in a directory the run then wrote nothing to (a refused
    ``--out .``, a config error found under the lock) is removed on :meth:`release`: a refused
    command leaves no trace. Otherwise the file stays (its content is meaningful only while
    locked).
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None
        self._found: set[str] | None = None  # names in the directory when this lock created it

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`RunDirectoryBusy` naming the holder's pid."""
        if self._fd is not None:
            return self
        while True:
            found: set[str] | None = directory_names(self.directory)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                fd, found = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), None
            try:
                _lock_fd(fd)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK):
                    os.close(fd)
                    raise
                holder = _read_pid(fd)
                os.close(fd)
                who = f"pid {holder}" if holder is not None else "pid unknown"
                raise RunDirectoryBusy(
                    f"run directory {str(self.directory)!r} is in use by another bestk process "
                    f"({who}); two writers would mix their runs: wait for it to finish, or "
                    "choose another --out"
                ) from None
            if _is_file_at(fd, self.path):
                break
            # its previous holder removed the file between our open and our lock: lock the
            # file now at the path (or create it) instead
            _unlock_fd(fd)
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        self._found = found
        return self

    def release(self) -> None:
        """Drop the lock; remove the lock file if this lock created it and nothing else was
        written to the directory meanwhile."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if self._found is not None and directory_names(self.directory) <= {*self._found,
                                                                          LOCK_NAME}:
                    self.path.unlink(missing_ok=True)  # still held: no one else can take it
            except OSError:
                pass
            finally:
                try:
                    _unlock_fd(fd)
                finally:
                    os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # at interpreter exit modules may already be gone; the OS unlocks
            pass


if sys.platform != "win32":  # POSIX
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

else:  # pragma: no cover - Windows
    import msvcrt

    _WIN_LOCK_OFFSET = 1 << 20  # lock a byte past the pid so others can still read it

    def _lock_fd(fd: int) -> None:
        os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

    def _unlock_fd(fd: int) -> None:
        os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def directory_names(directory: Path) -> set[str]:
    """The names in ``directory`` (empty when it cannot be listed)."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the file at ``path`` (not one removed since)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return os.path.samestat(os.fstat(fd), st)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
