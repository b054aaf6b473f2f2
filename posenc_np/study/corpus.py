r"""The language-model corpus (the running Python's standard library source) and perplexity
versus evaluation length (Press et al. 2022's measure).

Corpus: a fixed list of pure-Python standard-library modules (:data:`TRAIN_FILES`,
:data:`HELD_OUT_FILES`), read as bytes from ``sysconfig.get_paths()["stdlib"]`` and
concatenated in list order; tokens are the byte values (vocabulary 256). Every machine with a
CPython install has these files, so the study needs no download. Their content differs between
Python releases: :func:`load_corpus` records each file's size and SHA-256 and the SHA-256 of
both concatenations, every LM cell carries the digests it expects and refuses to run on a
worker whose files differ (a Dask worker on another Python version, say), and results from
different digests are different experiments (the store recomputes such cells rather than
mixing them).

Perplexity of a model on the held-out bytes :math:`x_0 \dots x_N` at evaluation length
:math:`T` (every one of the :math:`N` next-byte predictions is scored exactly once, so lengths
are compared on the same bytes; :math:`N` must be a multiple of every :math:`T`):

non-overlapping
    the text is cut into :math:`N/T` independent windows of :math:`T` tokens (Press et al.'s
    default): the first token of every window has no context, so a longer :math:`T` also
    means fewer context-starved tokens (their "early token curse").
sliding
    windows of :math:`T` tokens starting every :math:`S` tokens; the first window scores all
    of its tokens, every later one only its last :math:`S`, so each of those has at least
    :math:`T - S` tokens of context. The study uses :math:`S = T/2`.

Perplexity :math:`= \exp(\frac1N \sum_i -\log p(x_{i+1} \mid \text{window}))` per byte.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sysconfig

import numpy as np

from .._checks import as_int_array, check_alloc, check_int
from .._files import read_bounded
from .tasks import IGNORE

__all__ = ["HELD_OUT_FILES", "TRAIN_FILES", "LMWindows", "eval_windows", "load_corpus", "load_corpus_file"]

#: Training text: modules present, as plain ``.py`` files, in CPython 3.10 to 3.13.
TRAIN_FILES = (
    "argparse.py", "ast.py", "calendar.py", "csv.py", "dataclasses.py", "difflib.py", "enum.py", "fractions.py",
    "functools.py", "gettext.py", "heapq.py", "inspect.py", "ipaddress.py", "json/decoder.py", "json/encoder.py",
    "logging/__init__.py", "optparse.py", "pprint.py", "shlex.py", "statistics.py", "string.py", "textwrap.py",
    "tokenize.py", "queue.py", "copy.py", "contextlib.py", "abc.py", "reprlib.py", "weakref.py", "selectors.py",
    "fileinput.py", "graphlib.py", "base64.py", "types.py", "numbers.py", "operator.py",
)
#: Held-out text (other modules than the training text); the evaluation reads its first bytes.
HELD_OUT_FILES = ("random.py", "bisect.py", "glob.py", "colorsys.py", "sched.py")
VOCAB_SIZE = 256


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=2)
def _read(root: str) -> tuple[bytes, bytes, tuple]:
    files, parts = [], {"train": [], "held_out": []}
    for split, names in (("train", TRAIN_FILES), ("held_out", HELD_OUT_FILES)):
        for name in names:
            path = os.path.join(root, *name.split("/"))
            try:
                data = read_bounded(path, 8 << 20, follow_links=False)  # the largest of these is ~100 kB
            except ValueError as exc:
                raise ValueError(f"the LM corpus needs the standard-library source file {path!r} ({exc}); "
                                 "this Python installation does not ship it (run without the 'lm' and "
                                 "'rope_scaling' parts, or use a full CPython install)") from exc
            parts[split].append(data)
            files.append({"split": split, "path": name, "bytes": len(data), "sha256": _sha(data)})
    return b"".join(parts["train"]), b"".join(parts["held_out"]), tuple(files)


def load_corpus(root: str | None = None) -> dict:
    """Read the corpus: ``{"train": uint8 array, "held_out": uint8 array, "identity": dict}``.

    ``identity`` holds the Python version and implementation, every file's path relative to the
    standard-library directory, size and SHA-256, and ``train_sha256`` / ``held_out_sha256`` of the two
    concatenations (what the cells check). ``ValueError`` names a missing file.

    Examples
    --------
    >>> from posenc_np.study.corpus import HELD_OUT_FILES, TRAIN_FILES, load_corpus
    >>> corpus = load_corpus()             # this Python's standard-library sources (sizes differ between versions)
    >>> sorted(corpus), corpus["train"].dtype
    (['held_out', 'identity', 'train'], dtype('uint8'))
    >>> ident = corpus["identity"]
    >>> len(ident["files"]) == len(TRAIN_FILES) + len(HELD_OUT_FILES)
    True
    >>> ident["held_out_bytes"] == corpus["held_out"].size
    True
    """
    root = sysconfig.get_paths()["stdlib"] if root is None else os.fspath(root)
    train, held, files = _read(root)
    identity = {"source": "CPython standard library source, files concatenated in list order",
                "python": platform.python_version(), "implementation": platform.python_implementation(),
                "files": [dict(f) for f in files],
                "train_bytes": len(train), "train_sha256": _sha(train),
                "held_out_bytes": len(held), "held_out_sha256": _sha(held)}
    return {"train": np.frombuffer(train, dtype=np.uint8), "held_out": np.frombuffer(held, dtype=np.uint8),
            "identity": identity}


#: Largest corpus file ``--corpus FILE`` reads.
MAX_CORPUS_BYTES = 256 << 20
#: Fraction of a corpus file held out (its last bytes).
HELD_OUT_FRACTION = 0.1


def load_corpus_file(path: str | os.PathLike, *, min_held_out: int = 1) -> dict:
    """A corpus from one file (``--corpus FILE``): its bytes read with the bounded reader (a regular
    file, no symbolic link, at most :data:`MAX_CORPUS_BYTES`), the last :data:`HELD_OUT_FRACTION`
    held out. ``identity`` names the file by its base name only, with its size and digests.
    ``min_held_out``: the evaluation needs this many held-out bytes (``lm_eval_tokens + 1``).

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.corpus import load_corpus_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "text.txt")
    ...     with open(path, "wb") as fh:
    ...         _ = fh.write(bytes(range(100)))
    ...     corpus = load_corpus_file(path, min_held_out=5)
    >>> corpus["train"].size, corpus["held_out"].tolist()     # the last 10 % held out
    (90, [90, 91, 92, 93, 94, 95, 96, 97, 98, 99])
    >>> corpus["identity"]["name"], corpus["identity"]["bytes"]
    ('text.txt', 100)
    """
    path = os.fspath(path)
    data = read_bounded(path, MAX_CORPUS_BYTES, "--corpus", follow_links=False)
    cut = len(data) - max(int(len(data) * HELD_OUT_FRACTION), 0)
    train, held = data[:cut], data[cut:]
    if len(held) < min_held_out or len(train) < 2 * min_held_out:
        raise ValueError(f"--corpus {os.path.basename(path)!r}: {len(data)} bytes; the LM needs at least "
                         f"{min_held_out} held-out bytes (the last {HELD_OUT_FRACTION:.0%}) and more training text")
    identity = {"source": f"the file {os.path.basename(path)}, last {HELD_OUT_FRACTION:.0%} held out",
                "name": os.path.basename(path), "bytes": len(data), "sha256": _sha(data),
                "python": platform.python_version(), "implementation": platform.python_implementation(),
                "files": [], "train_bytes": len(train), "train_sha256": _sha(train),
                "held_out_bytes": len(held), "held_out_sha256": _sha(held)}
    return {"train": np.frombuffer(train, dtype=np.uint8), "held_out": np.frombuffer(held, dtype=np.uint8),
            "identity": identity}


def corpus_digests(identity: dict) -> dict:
    """The part of a corpus identity that a cell checks (the two concatenations' digests)."""
    return {k: identity[k] for k in ("train_sha256", "held_out_sha256")}


class LMWindows:
    """A next-byte task: ``sample`` draws windows of ``length + 1`` bytes at uniform random offsets
    of ``data`` and returns ``(tokens, targets)`` of shape ``(batch, length)``.

    Examples
    --------
    >>> from posenc_np.study.corpus import LMWindows
    >>> task = LMWindows(np.arange(100, 110), 3)
    >>> tokens, targets = task.sample(np.random.default_rng(0), 2)
    >>> tokens.tolist(), targets.tolist()          # targets: the tokens shifted by one
    ([[105, 106, 107], [104, 105, 106]], [[106, 107, 108], [105, 106, 107]])
    """

    def __init__(self, data: np.ndarray, length: int):
        self.data = as_int_array(data, "data")
        if self.data.ndim != 1 or self.data.size < 2:
            raise ValueError(f"data must be a 1-D array of at least 2 tokens, got shape {self.data.shape}")
        self.length = check_int(length, "length", minimum=1, maximum=len(self.data) - 1)

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        check_alloc((batch_size, self.length + 1), np.int64, "LM batch (batch_size, length + 1)")
        starts = rng.integers(0, len(self.data) - self.length, size=batch_size)
        windows = self.data[starts[:, None] + np.arange(self.length + 1)].astype(np.int64)
        return windows[:, :-1], windows[:, 1:]


def eval_windows(data: np.ndarray, n_tokens: int, length: int, mode: str,
                 stride: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, targets)`` that score each of the first ``n_tokens`` next-byte predictions of
    ``data`` once, at evaluation length ``length`` (see the module docstring).

    ``mode="nonoverlapping"``: ``n_tokens / length`` windows (``length`` must divide
    ``n_tokens``). ``mode="sliding"``: windows starting every ``stride`` tokens
    (``stride`` must divide ``n_tokens - length`` and be ``<= length``), scoring all of the
    first and the last ``stride`` of each later one; unscored targets are ``IGNORE``.
    ``data`` is a 1-D integer array of at least ``n_tokens + 1`` tokens.

    Examples
    --------
    >>> from posenc_np.study.corpus import eval_windows
    >>> tokens, targets = eval_windows(np.arange(10), 8, 4, "nonoverlapping")
    >>> tokens.tolist(), targets.tolist()          # 8 / 4 windows; predictions 1..8 scored once
    ([[0, 1, 2, 3], [4, 5, 6, 7]], [[1, 2, 3, 4], [5, 6, 7, 8]])
    >>> tokens, targets = eval_windows(np.arange(10), 8, 4, "sliding", stride=2)
    >>> tokens.tolist()                            # a window every 2 tokens
    [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7]]
    >>> targets.tolist()                           # later windows score their last 2 only: 1..8 once each
    [[1, 2, 3, 4], [-100, -100, 5, 6], [-100, -100, 7, 8]]
    """
    data = as_int_array(data, "data")
    if data.ndim != 1 or data.size < 2:
        raise ValueError(f"data must be a 1-D array of at least 2 tokens, got shape {data.shape}")
    n_tokens = check_int(n_tokens, "n_tokens", minimum=1, maximum=len(data) - 1)
    length = check_int(length, "length", minimum=1, maximum=n_tokens)
    if mode == "nonoverlapping":
        if n_tokens % length:
            raise ValueError(f"length {length} must divide n_tokens {n_tokens}")
        starts = np.arange(0, n_tokens, length)
    elif mode == "sliding":
        stride = check_int(stride, "stride", minimum=1, maximum=length)
        if (n_tokens - length) % stride:
            raise ValueError(f"stride {stride} must divide n_tokens - length = {n_tokens - length}")
        starts = np.arange(0, n_tokens - length + 1, stride)
    else:
        raise ValueError(f"mode must be 'nonoverlapping' or 'sliding', got {mode!r}")
    check_alloc((len(starts), length + 1), np.int64, "evaluation windows")
    windows = data[starts[:, None] + np.arange(length + 1)].astype(np.int64)
    tokens, targets = windows[:, :-1], windows[:, 1:].copy()
    if mode == "sliding":
        targets[1:, : length - stride] = IGNORE  # later windows score only their last `stride` tokens
    return tokens, targets
