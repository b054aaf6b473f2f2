"""Safe file reading and writing, shared by the whole library.

``read_bounded(path, limit, what)``
    The one reader of every file the library opens: the bytes of a regular file, at most
    ``limit`` of them. A directory, FIFO, socket or device (also behind a symbolic link) is
    refused before it is opened, so a FIFO never blocks and ``/dev/zero`` is never read; a
    file larger than ``limit`` is refused before reading, and the read stops at ``limit + 1``
    bytes, so a file that grows cannot exhaust memory. Every problem raises one exception
    (``ValueError`` unless the caller names another) whose message names the file.
``open_regular(path, what)``
    The same checks, returning the open file, for a reader that bounds each read itself.
``atomic_write(path, write)``
    Writes through a temporary file in the same directory (``<path>.tmp<pid>``), flushes and
    fsyncs it, then ``os.replace``-s it into place: readers see the old file or the new one,
    never a partial one. On any failure (an exception, ``KeyboardInterrupt``, a full disk) the
    temporary file is removed before the error propagates.
``sweep_stale_temps(path)``
    A writer killed between creating and renaming its temporary file (SIGKILL, power loss)
    cannot clean up. Every ``atomic_write`` therefore first removes ``<path>.tmp<pid>`` files
    whose process ``pid`` no longer exists (POSIX; on other systems nothing is removed). A
    temporary file of a live writer is left alone.
``check_target(path, what)``
    Fails early (``ValueError`` naming the path) when ``path`` could not be written: missing or
    unwritable directory, or ``path`` is a directory.
``npz_bytes(members)``
    The bytes of an NPZ archive of named arrays, never pickled, the same bytes for the same
    arrays (fixed member dates and order), with the same layout on every supported NumPy
    (``np.savez`` takes ``allow_pickle`` only from NumPy 2.2 on; before, it stored it as an
    array).

POSIX only (``O_NONBLOCK``, ``O_NOFOLLOW``, ``O_NOCTTY``, ``dir_fd``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
import tempfile
import zipfile
from collections.abc import Callable
from typing import IO

import numpy as np

__all__ = ["atomic_write", "check_target", "kind", "npz_bytes", "open_regular", "read_bounded", "sweep_stale_temps"]

#: The date every NPZ member carries, so that equal arrays give equal archives.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


# --------------------------------------------------------------------------- reading

def kind(mode: int) -> str:
    """What a file mode describes ("a directory", "a FIFO", ..., "a regular file")."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path: str | os.PathLike, what: str = "", *, dir_fd: int | None = None, follow_links: bool = True,
                 error: type[Exception] = ValueError) -> io.BufferedReader:
    """``path`` opened for binary reading after checking that it is a regular file.

    Anything but a regular file (a directory, a FIFO, a socket, a device; with
    ``follow_links=False`` also any symbolic link) is refused before it is opened; the file is
    opened non-blocking (a FIFO swapped in after the check does not block) and checked again.
    Every problem raises ``error`` with a message naming the file (``what`` before the path).
    :func:`read_bounded` reads through it; a caller that reads parts of a large file (a
    checkpoint's ZIP members) uses it directly and bounds every read itself.
    """
    name = os.fspath(path)
    label = f"{what} {name}" if what else name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_links)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{label}: is {kind(st.st_mode)}, not a regular file"
                        + (" (symbolic links are never followed)" if stat.S_ISLNK(st.st_mode) else ""))
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise error(f"{label}: is a symbolic link, not a regular file "
                        "(symbolic links are never followed)") from None
        raise error(f"{label}: cannot open: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped after the check
        os.close(fd)
        raise error(f"{label}: is {kind(st.st_mode)}, not a regular file")
    return os.fdopen(fd, "rb")


def read_bounded(path: str | os.PathLike, limit: int, what: str = "", *, dir_fd: int | None = None, follow_links: bool = True,
                 error: type[Exception] = ValueError) -> bytes:
    """The bytes of the regular file ``path`` (relative to ``dir_fd`` when given), at most ``limit``.

    Opened with :func:`open_regular` (same ``what``, ``dir_fd``, ``follow_links``, ``error``); a
    file larger than ``limit`` bytes is refused before reading, and the read stops at
    ``limit + 1`` bytes.
    """
    name = os.fspath(path)
    label = f"{what} {name}" if what else name
    with open_regular(name, what, dir_fd=dir_fd, follow_links=follow_links, error=error) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise error(f"{label}: {size} bytes, more than the limit of {limit}")
            chunks, total = [], 0
            while chunk := fh.read1(min(1 << 20, limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise error(f"{label}: grew beyond the limit of {limit} bytes while being read")
        except OSError as exc:
            raise error(f"{label}: cannot read: {exc.strerror}") from None
    return b"".join(chunks)


# --------------------------------------------------------------------------- writing


def _alive(pid: int) -> bool:
    """True unless process ``pid`` is known not to exist (POSIX ``kill(pid, 0)``)."""
    if os.name != "posix":  # os.kill would terminate the process on Windows: assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists but belongs to someone else
        return True
    return True


def sweep_stale_temps(path: str | os.PathLike) -> list[str]:
    """Remove ``<path>.tmp<pid>`` files left by writers that are no longer running; return them."""
    path = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(base) + r"\.tmp(\d+)\Z")
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    return removed


def check_target(path: str | os.PathLike, what: str) -> str:
    """Raise ``ValueError`` unless ``path`` can be written atomically; return it as a string.

    The directory must exist and accept a new file (probed with a temporary file that is
    removed at once) and ``path`` must not be a directory.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"{what} {path!r}: directory {directory!r} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a directory, not a file")
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise ValueError(f"{what} {path!r}: cannot write in {directory!r} ({exc.strerror or exc})") from exc
    return path


def atomic_write(path: str | os.PathLike, write: Callable[[IO], object], *, mode: str = "wb", encoding: str | None = None) -> None:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it to ``path``.

    See the module docstring; ``mode`` is ``"wb"`` or ``"w"`` (then ``encoding``, default UTF-8).
    """
    path = os.fspath(path)
    sweep_stale_temps(path)
    tmp = f"{path}.tmp{os.getpid()}"
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def npz_bytes(members: dict) -> bytes:
    """An NPZ archive (a ZIP of ``<name>.npy`` members, deflated at level 9) of ``members``,
    a dict of name -> array in the order given; object arrays are refused, nothing is pickled."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in members.items():
            npy = io.BytesIO()
            np.lib.format.write_array(npy, np.asarray(arr, order="C"), allow_pickle=False)  # keeps 0-d shape
            info = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, npy.getvalue(), compresslevel=9)
    return buf.getvalue()
