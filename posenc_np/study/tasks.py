r"""Synthetic tasks of the study and the training options (how a cell's examples are drawn).

Tasks (alphabet of ``A`` symbols ``2 .. A+1``; token 0 = BOS, 1 = SEP; a task of *size*
:math:`n` is a sequence of :math:`2n + 1` input tokens):

``copy``
    ``BOS x1..xn SEP x1..xn``: after SEP the model must reproduce the :math:`n` symbols
    (scored: the :math:`n` answer tokens).
``reverse``
    ``BOS x1..xn SEP xn..x1`` (scored: the :math:`n` answer tokens).
``lag``
    a local pattern where only *relative* position matters: ``BOS x1..x2n`` and at every
    position :math:`i > k` the target is the symbol :math:`k = 3` positions back,
    :math:`x_{i-k}` (scored: every such position).

Training options (:data:`TRAINING_OPTIONS`, one entry each; the grid runs every option named
in ``StudyConfig.training``):

``fixed``
    every training example has size :math:`L`.
``varying``
    Kazemnejad et al. 2023: each example's size is drawn uniformly from
    :math:`\{n_{min}, \dots, L\}` (:class:`VaryingLength`), right-padded to the longest
    (padding is never scored and, in a causal decoder, never seen by a scored position).
``randomized``
    Ruoss et al. 2023: sizes as ``varying`` (their tasks train on lengths up to :math:`N`), and
    each batch's positions are a sorted sample without replacement from :math:`0 \dots M-1`,
    :math:`M` the study's ``randomized_range`` (2048 by default, far beyond every test length;
    ``position_options['randomized_max_len']``; a learned table gets :math:`M` rows), in
    training and in evaluation alike. Only for the encodings that take positions (embedding and
    rotation entries: the logit-level ones compute offsets from the shapes). Compare with
    ``varying``: the same examples, the same initial weights, only the positions differ.

A new option is one more :class:`TrainingOption` in the dict: it may change the model's
configuration for training and for evaluation separately (``model_kwargs``), draw examples
differently (``varying_length``), sample positions over the evaluation range
(``randomized_positions``), and say which encodings it applies to (``applies``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_alloc, check_int

__all__ = ["BOS", "IGNORE", "SEP", "TASKS", "TRAINING_OPTIONS", "CopyTask", "LagTask", "ReverseTask",
           "TrainingOption", "VaryingLength"]

BOS, SEP, FIRST_SYMBOL = 0, 1, 2
IGNORE = -100


@dataclass
class _Task:
    """A synthetic task of size ``n >= 1`` over ``alphabet >= 2`` symbols; ``sample`` draws a batch."""

    n: int
    alphabet: int = 16

    name = "task"

    def __post_init__(self):
        self.n = check_int(self.n, "n", minimum=1)
        self.alphabet = check_int(self.alphabet, "alphabet", minimum=2)  # one symbol carries no information

    @classmethod
    def min_size(cls) -> int:
        """The smallest size ``n`` that scores at least one position."""
        return 1

    @property
    def vocab_size(self) -> int:
        return FIRST_SYMBOL + self.alphabet

    @property
    def seq_len(self) -> int:
        return 2 * self.n + 1

    def _symbols(self, rng, batch, length):
        return rng.integers(FIRST_SYMBOL, FIRST_SYMBOL + self.alphabet, size=(batch, length))

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, targets)``, integer arrays ``(batch_size, seq_len)`` drawn with ``rng``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        check_alloc((batch_size, self.seq_len + 1), np.int64, "task batch (batch_size, sequence length)")
        return self._sample(rng, batch_size)

    def _sample(self, rng, batch_size):
        raise NotImplementedError


def _seq2seq(prefix_and_answer: np.ndarray, n: int):
    """``BOS x SEP y`` (length 2n+2) to next-token ``(tokens, targets)``, scoring only ``y``."""
    tokens, targets = prefix_and_answer[:, :-1], prefix_and_answer[:, 1:].copy()
    targets[:, : n + 1] = IGNORE  # positions 0..n predict x2..xn, SEP: not scored
    return tokens, targets


class CopyTask(_Task):
    """``BOS x1..xn SEP x1..xn``; the n answer tokens are scored.

    Examples
    --------
    >>> from posenc_np.study.tasks import CopyTask
    >>> task = CopyTask(3, alphabet=4)            # symbols 2..5; BOS = 0, SEP = 1
    >>> task.seq_len, task.vocab_size             # 2n + 1 input tokens, 2 + alphabet
    (7, 6)
    >>> tokens, targets = task.sample(np.random.default_rng(0), 1)
    >>> tokens.tolist(), targets.tolist()         # BOS x1 x2 x3 SEP x1 x2; only the answer x1 x2 x3 is scored
    ([[0, 5, 4, 4, 1, 5, 4]], [[-100, -100, -100, -100, 5, 4, 4]])
    """

    name = "copy"

    def _sample(self, rng, batch_size):
        x = self._symbols(rng, batch_size, self.n)
        col = np.full((batch_size, 1), BOS), np.full((batch_size, 1), SEP)
        return _seq2seq(np.concatenate([col[0], x, col[1], x], axis=1), self.n)


class ReverseTask(_Task):
    """``BOS x1..xn SEP xn..x1``; the n answer tokens are scored.

    Examples
    --------
    >>> from posenc_np.study.tasks import ReverseTask
    >>> tokens, targets = ReverseTask(3, alphabet=4).sample(np.random.default_rng(0), 1)
    >>> tokens.tolist(), targets.tolist()         # BOS x1 x2 x3 SEP x3 x2; scored: x3 x2 x1
    ([[0, 5, 4, 4, 1, 4, 4]], [[-100, -100, -100, -100, 4, 4, 5]])
    """

    name = "reverse"

    def _sample(self, rng, batch_size):
        x = self._symbols(rng, batch_size, self.n)
        col = np.full((batch_size, 1), BOS), np.full((batch_size, 1), SEP)
        return _seq2seq(np.concatenate([col[0], x, col[1], x[:, ::-1]], axis=1), self.n)


@dataclass
class LagTask(_Task):
    """``BOS x1..x2n``; position i > lag predicts x_{i-lag} (a purely relative pattern).

    ``1 <= lag <= 2n - 1``, so that at least one position is scored.

    Examples
    --------
    >>> from posenc_np.study.tasks import LagTask
    >>> tokens, targets = LagTask(3, alphabet=4, lag=2).sample(np.random.default_rng(0), 1)
    >>> tokens.tolist(), targets.tolist()         # position i > 2 predicts the token 2 back
    ([[0, 5, 4, 4, 3, 3, 2]], [[-100, -100, -100, 5, 4, 4, 3]])
    >>> LagTask.min_size()                        # the default lag 3 needs 2n - 1 >= 3
    2
    """

    lag: int = 3
    name = "lag"

    def __post_init__(self):
        super().__post_init__()
        self.lag = check_int(self.lag, "lag", minimum=1, maximum=2 * self.n - 1)

    @classmethod
    def min_size(cls) -> int:
        return (cls.lag + 2) // 2  # the default lag needs 2n - 1 >= lag

    def _sample(self, rng, batch_size):
        tokens = np.concatenate([np.full((batch_size, 1), BOS), self._symbols(rng, batch_size, 2 * self.n)], axis=1)
        targets = np.full_like(tokens, IGNORE)
        targets[:, self.lag + 1:] = tokens[:, 1:-self.lag]  # position i predicts x_{i-lag}, i - lag >= 1
        return tokens, targets


TASKS = {"copy": CopyTask, "reverse": ReverseTask, "lag": LagTask}


class VaryingLength:
    """Examples of ``task_cls`` with sizes drawn uniformly from ``min_size .. max_size`` per example
    (Kazemnejad et al. 2023 train on lengths up to the training maximum).

    A batch is right-padded with BOS to the longest example's length, with unscored
    (``IGNORE``) targets on the padding; in a causal decoder no scored position attends to it,
    so each example is trained exactly as if it were alone (up to the float summation order of
    the batch). The size is drawn before the example's symbols, all from the one ``rng``.

    Examples
    --------
    >>> from posenc_np.study.tasks import CopyTask, VaryingLength
    >>> task = VaryingLength(CopyTask, max_size=3, alphabet=4)
    >>> task.min_size, task.seq_len
    (1, 7)
    >>> tokens, targets = task.sample(np.random.default_rng(0), 2)
    >>> tokens                                  # sizes 3 and 2; the second row padded with BOS
    array([[0, 3, 2, 2, 1, 3, 2],
           [0, 4, 3, 1, 4, 0, 0]])
    >>> targets                                 # the padding is never scored
    array([[-100, -100, -100, -100,    3,    2,    2],
           [-100, -100, -100,    4,    3, -100, -100]])
    """

    def __init__(self, task_cls, max_size: int, alphabet: int, min_size: int | None = None):
        if not (isinstance(task_cls, type) and issubclass(task_cls, _Task)):
            raise TypeError(f"task_cls must be one of the task classes {sorted(TASKS)}, got {task_cls!r}")
        self.task_cls = task_cls
        self.max_size = check_int(max_size, "max_size", minimum=task_cls.min_size())
        self.min_size = check_int(task_cls.min_size() if min_size is None else min_size, "min_size",
                                  minimum=task_cls.min_size(), maximum=self.max_size)
        self.alphabet = check_int(alphabet, "alphabet", minimum=2)
        self.longest = task_cls(self.max_size, self.alphabet)

    @property
    def vocab_size(self) -> int:
        return self.longest.vocab_size

    @property
    def seq_len(self) -> int:
        return self.longest.seq_len

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, targets)`` of shape ``(batch_size, seq_len of max_size)``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        check_alloc((batch_size, self.seq_len + 1), np.int64, "task batch (batch_size, sequence length)")
        sizes = rng.integers(self.min_size, self.max_size + 1, size=batch_size)
        tokens = np.full((batch_size, self.seq_len), BOS, dtype=np.int64)
        targets = np.full((batch_size, self.seq_len), IGNORE, dtype=np.int64)
        for n in np.unique(sizes):  # one draw per size, in increasing order: deterministic given rng
            rows = np.flatnonzero(sizes == n)
            tok, tgt = self.task_cls(int(n), self.alphabet).sample(rng, len(rows))
            tokens[rows, : tok.shape[1]] = tok
            targets[rows, : tgt.shape[1]] = tgt
        return tokens, targets


# --------------------------------------------------------------------------- training options

def _same(kwargs: dict, phase: str) -> dict:
    return kwargs


def _every_encoding(encoding: str) -> bool:
    return True


@dataclass(frozen=True)
class TrainingOption:
    """How a cell is trained; one entry of :data:`TRAINING_OPTIONS` per option.

    Attributes
    ----------
    description : str
        One line for the reports.
    varying_length : bool
        Draw training examples with :class:`VaryingLength` instead of at size ``L``.
    model_kwargs : callable ``(kwargs, phase) -> kwargs``
        The :class:`~posenc_np.model.ModelConfig` keyword arguments to use in ``phase``
        (``"train"`` or ``"eval"``), given the study's; evaluation copies the trained
        parameters into a model built from the ``"eval"`` arguments. Default: unchanged.
    applies : callable ``(encoding) -> bool``
        Whether the option makes sense for an encoding (cells are made only where it does).
    randomized_positions : bool
        Train and evaluate with positions sampled from ``0 .. M-1``, ``M`` the study's
        ``randomized_range`` (Ruoss et al. 2023; the cell sets
        ``position_options['randomized_max_len'] = M`` and ``max_len >= M`` in both phases).

    Examples
    --------
    >>> from posenc_np.study.tasks import TRAINING_OPTIONS, TrainingOption
    >>> randomized = TRAINING_OPTIONS["randomized"]
    >>> randomized.varying_length, randomized.randomized_positions
    (True, True)
    >>> randomized.applies("rope"), randomized.applies("alibi")    # alibi's bias is built from the shapes
    (True, False)
    >>> TrainingOption("every example has size L").model_kwargs({"d_model": 16}, "train")   # default: unchanged
    {'d_model': 16}
    """

    description: str
    varying_length: bool = False
    model_kwargs: object = _same
    applies: object = _every_encoding
    randomized_positions: bool = False


def _takes_positions(encoding: str) -> bool:
    from ..registry import REGISTRY

    return "randomized_max_len" in REGISTRY[encoding].options


#: Training option name -> :class:`TrainingOption`.
TRAINING_OPTIONS: dict[str, TrainingOption] = {
    "fixed": TrainingOption("every training example has size L"),
    "varying": TrainingOption("sizes drawn uniformly up to L per example (Kazemnejad et al. 2023)",
                              varying_length=True),
    "randomized": TrainingOption("sizes as varying; positions a sorted sample from the longest evaluation range "
                                 "(Ruoss et al. 2023)", varying_length=True, applies=_takes_positions,
                                 randomized_positions=True),
}


def training_task(option: str, task_name: str, size: int, alphabet: int):
    """The task a cell trains on under training option ``option``."""
    cls = TASKS[task_name]
    if TRAINING_OPTIONS[option].varying_length:
        return VaryingLength(cls, size, alphabet)
    return cls(size, alphabet)
