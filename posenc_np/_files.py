"""Safe file writing, shared by checkpoints (:mod:`posenc_np.train`) and the study's result store.

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
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

__all__ = ["atomic_write", "check_target", "sweep_stale_temps", "temp_path"]


def temp_path(path: str) -> str:
    """The temporary name :func:`atomic_write` uses for ``path`` in this process."""
    return f"{path}.tmp{os.getpid()}"


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


def sweep_stale_temps(path) -> list[str]:
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


def check_target(path, what: str) -> str:
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


def atomic_write(path, write, *, mode: str = "wb", encoding: str | None = None) -> None:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it to ``path``.

    See the module docstring; ``mode`` is ``"wb"`` or ``"w"`` (then ``encoding``, default UTF-8).
    """
    path = os.fspath(path)
    sweep_stale_temps(path)
    tmp = temp_path(path)
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
