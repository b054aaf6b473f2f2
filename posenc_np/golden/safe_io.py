"""Files treated as hostile: bounded reads, bounded JSON, atomic writes, printable text.

Everything a golden suite reads goes through :func:`read_file` (regular files only, never
through a symbolic link, size checked before and while reading) and :func:`parse_json`
(UTF-8, nesting depth, integer-literal length, finite floats, no duplicate keys). Each
problem raises :class:`GoldenFormatError` naming the file, so that a caller can turn it
into one report row and go on. Writers use :func:`atomic_write`: a temporary name in the
same directory, ``fsync``, then ``os.replace``, so a reader (or a kill) only ever sees the
old file or the new one. :func:`printable` escapes control and format characters in
anything printed, so a file name cannot rewrite the terminal.

POSIX only (``dir_fd``, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
import unicodedata

#: Largest nesting depth of any JSON document (a case needs 4).
MAX_JSON_DEPTH = 32
#: Longest integer literal, in characters: every int64 fits in a sign and 19 digits.
MAX_INT_LITERAL = 20
#: Directory entries examined before a directory is declared not a suite.
MAX_DIR_ENTRIES = 10_000
#: Temporary files written by :func:`atomic_write` (hidden, recognisable, never listed).
TEMP_RE = re.compile(r"^\.posenc-np-tmp-[0-9a-f]{8}-")
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class GoldenFormatError(ValueError):
    """A golden file that cannot be read safely or does not follow the format."""


# --------------------------------------------------------------------------- printing

_ESCAPED = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def printable(text) -> str:
    """``text`` with control, format, surrogate and unassigned characters escaped.

    ESC, CR, backspace, bidi overrides and the like become ``\\x1b``, ``\\u202e``, ...;
    ordinary letters (including non-ASCII ones) are kept.
    """
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in _ESCAPED:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def short(value, limit: int = 60) -> str:
    """A one-line, length-limited rendering of a (JSON) value for an error message."""
    if isinstance(value, list) and len(value) > limit:
        value = value[:limit]  # the rendering is cut below anyway; do not serialise a huge list
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- reading

def kind(mode: int) -> str:
    """What a file mode describes ("a directory", "a FIFO", ..., "a regular file")."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_dir(path) -> int:
    """A read-only descriptor of the directory ``path`` (the caller closes it).

    Raises ``FileNotFoundError`` / ``NotADirectoryError`` with a plain message.
    """
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a directory (it does not exist)") from None
    except NotADirectoryError:
        raise NotADirectoryError(f"{path} is not a directory") from None


def list_dir(dir_fd: int) -> tuple[dict[str, tuple[int, int]], bool]:
    """Entries of a directory as ``{name: (lstat mode, size)}``; ``True`` when there were more than
    :data:`MAX_DIR_ENTRIES` (the listing stops there)."""
    entries: dict[str, tuple[int, int]] = {}
    limit = MAX_DIR_ENTRIES
    with os.scandir(dir_fd) as it:
        for entry in it:
            if len(entries) >= limit:
                return entries, True
            try:
                st = entry.stat(follow_symlinks=False)
                entries[entry.name] = (st.st_mode, st.st_size)
            except OSError:  # vanished while listing: reading it later reports the problem
                entries[entry.name] = (0, 0)
    return entries, False


def read_file(name: str, *, limit: int, dir_fd: int | None = None, size: int | None = None) -> bytes:
    """The bytes of the regular file ``name`` (relative to ``dir_fd`` when given).

    Refused before reading: a symbolic link (never followed), anything but a regular file
    (directory, FIFO, device, socket), a file larger than ``limit`` bytes or, when ``size``
    is given, of another size. The read itself stops at ``limit + 1`` bytes, so a file that
    grows while being read cannot exhaust memory.
    """
    try:
        st = os.lstat(name, dir_fd=dir_fd)
        if not stat.S_ISREG(st.st_mode):
            raise GoldenFormatError(f"{name}: is {kind(st.st_mode)}, not a regular file"
                                    + (" (symbolic links are never followed)" if stat.S_ISLNK(st.st_mode) else ""))
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GoldenFormatError(f"{name}: is a symbolic link, not a regular file "
                                    "(symbolic links are never followed)") from None
        raise GoldenFormatError(f"{name}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after lstat
            raise GoldenFormatError(f"{name}: is {kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise GoldenFormatError(f"{name}: {st.st_size} bytes, more than the limit of {limit}")
        if size is not None and st.st_size != size:
            raise GoldenFormatError(f"{name}: {st.st_size} bytes, but the index lists {size}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise GoldenFormatError(f"{name}: grew beyond the limit of {limit} bytes while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise GoldenFormatError(f"{name}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- JSON

def _int(literal: str) -> int:
    if len(literal) > MAX_INT_LITERAL:
        raise GoldenFormatError(f"integer literal of {len(literal)} characters (limit {MAX_INT_LITERAL})")
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise GoldenFormatError(f"number {literal[:30]} overflows a float64")
    return value


def _constant(name: str):
    raise GoldenFormatError(f"non-standard JSON constant {name} (NaN and Infinity are not allowed)")


def _object(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise GoldenFormatError(f"duplicate key {dup!r} in an object")
    return obj


def parse_json(data: bytes, where: str):
    """Parse UTF-8 JSON within the module's limits; :class:`GoldenFormatError` otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GoldenFormatError(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant,
                           object_pairs_hook=_object)
    except RecursionError:
        raise GoldenFormatError(f"{where}: JSON nested too deeply (limit {MAX_JSON_DEPTH})") from None
    except ValueError as exc:
        raise GoldenFormatError(f"{where}: not valid JSON: {exc}") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise GoldenFormatError(f"{where}: JSON nested too deeply (limit {MAX_JSON_DEPTH})")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


# --------------------------------------------------------------------------- writing

def atomic_write(dir_fd: int, name: str, data: bytes) -> None:
    """Write ``data`` to ``name`` in the directory ``dir_fd``: temporary file, fsync, rename.

    The temporary name matches :data:`TEMP_RE`; it is removed if anything fails before the
    rename. The caller fsyncs the directory once a group of renames is done.
    """
    tmp = f".posenc-np-tmp-{secrets.token_hex(4)}-{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644,
                 dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
