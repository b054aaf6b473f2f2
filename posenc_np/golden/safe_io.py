"""Files treated as hostile: bounded reads, bounded JSON, atomic writes, printable text.

A suite is read through :func:`read_file` (the library's bounded reader
:func:`posenc_np._files.read_bounded`: regular files only, never through a symbolic link, size
checked before and while reading) and :func:`parse_json` (UTF-8, nesting depth, integer-literal
length, finite floats, no duplicate keys); each problem is a :class:`GoldenFormatError` naming the
file, so a caller can make it one report row and go on. :func:`atomic_write`: temporary name in the
same directory, ``fsync``, ``os.replace`` (a reader or a kill sees the old file or the new one).
:func:`printable` escapes control and format characters, so a file name cannot rewrite the terminal.
POSIX only (``dir_fd``, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import unicodedata

from .._files import read_bounded

#: Largest nesting depth of any JSON document (a case needs 4).
MAX_JSON_DEPTH = 32
#: Longest integer literal, in characters: every int64 fits in a sign and 19 digits.
MAX_INT_LITERAL = 20
#: Directory entries examined before a directory is declared not a suite.
MAX_DIR_ENTRIES = 10_000
#: Temporary files written by :func:`atomic_write` (hidden, recognisable, never listed).
TEMP_RE = re.compile(r"^\.posenc-np-tmp-[0-9a-f]{8}-")


class GoldenFormatError(ValueError):
    """A golden file that cannot be read safely or does not follow the format."""


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


def read_file(name: str, *, limit: int, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file ``name`` (relative to ``dir_fd`` when given), read with the
    library's bounded reader :func:`posenc_np._files.read_bounded` under the suite's policy: a
    symbolic link is never followed (a suite holds only regular files), and every problem is a
    :class:`GoldenFormatError` naming the file."""
    return read_bounded(name, limit, dir_fd=dir_fd, follow_links=False, error=GoldenFormatError)


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


def atomic_write(dir_fd: int, name: str, data: bytes) -> None:
    """Write ``data`` to ``name`` in the directory ``dir_fd``: temporary file, fsync, rename.

    The temporary name matches :data:`TEMP_RE`; it is removed if anything fails before the
    rename. The caller fsyncs the directory once a group of renames is done.
    """
    tmp = f".posenc-np-tmp-{secrets.token_hex(4)}-{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
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
