r"""Adam with decoupled weight decay (AdamW), global-norm gradient clipping, a cosine schedule.

All three work on flat dicts of named arrays (``model.params`` / ``model.grads``) and update
parameters **in place**, so layers holding the same arrays see the new values.

Adam (Kingma & Ba 2015) with decoupled weight decay (Loshchilov & Hutter 2019, "AdamW";
the update order of ``torch.optim.AdamW``), at step :math:`t = 1, 2, \dots`:

.. math::

    m &\leftarrow \beta_1 m + (1 - \beta_1) g, \qquad v \leftarrow \beta_2 v + (1 - \beta_2) g^2 \\
    \theta &\leftarrow \theta\,(1 - \eta\lambda) \quad\text{(only parameters selected for decay)} \\
    \theta &\leftarrow \theta - \frac{\eta}{1 - \beta_1^t}\,
        \frac{m}{\sqrt{v}/\sqrt{1 - \beta_2^t} + \epsilon}

The decay is *decoupled*: it shrinks the weights directly instead of being added to the
gradient (which Adam's normalisation would rescale). By default matrices (``ndim >= 2``:
linear weights, embeddings, position tables) decay and vectors (biases, LayerNorm gains) do not.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import check_choice, check_int, check_real
from ._util import kernel_dtype
from .layers import LAYER_BACKENDS, _kernels

__all__ = ["Adam", "AdamW", "clip_grad_norm", "cosine_schedule", "global_norm"]


def _default_decay(name: str, value: np.ndarray) -> bool:
    return value.ndim >= 2


def _check_betas(betas) -> tuple[float, float]:
    if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    out = tuple(check_real(b, f"betas[{i}]", nonnegative=True) for i, b in enumerate(betas))
    if not all(b < 1 for b in out):
        raise ValueError(f"betas must lie in [0, 1), got {out}")
    return out


def _check_grads(grads, params: dict, name: str = "grads", kernel: bool = False) -> None:
    """``grads`` must be a dict with the keys of ``params``, same shapes, finite values (``kernel``:
    tested through their fused sums of squares)."""
    if not isinstance(grads, dict):
        raise TypeError(f"{name} must be a dict of named arrays (model.grads), got {type(grads).__name__}")
    if set(grads) != set(params):
        raise ValueError(f"{name} keys differ from params: missing {sorted(set(params) - set(grads))}, "
                         f"unexpected {sorted(set(grads) - set(params))}")
    for k, p in params.items():
        g = grads[k]
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f" or g.shape != p.shape:
            raise ValueError(f"{name}[{k!r}] must be a float array of shape {p.shape}, got "
                             f"{type(g).__name__} {getattr(g, 'dtype', '')} {getattr(g, 'shape', '')}")
    _check_finite(grads, name, _sums_of_squares(grads, True) if kernel else None)


def _flat_ready(*arrays) -> bool:
    """One dtype (float32 or float64), all C-contiguous and writeable: flat views of the arrays
    are the arrays, and the kernel may write them."""
    return kernel_dtype(*arrays) and all(a.flags.c_contiguous and a.flags.writeable for a in arrays)


def _check_arrays(grads, name: str) -> None:
    """A dict of float ndarrays (gradients are scaled in place, so they must be arrays)."""
    if not isinstance(grads, dict):
        raise TypeError(f"{name} must be a dict of named arrays, got {type(grads).__name__}")
    for k, g in grads.items():
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
            raise TypeError(f"{name}[{k!r}] must be a float ndarray, got {type(g).__name__} {getattr(g, 'dtype', '')}")


def _sums_of_squares(grads: dict, kernel: bool) -> list:
    """:math:`\\sum g^2` of every array in float64 (NaN and inf propagate): with ``kernel``, one
    fused pass per C-contiguous float32/float64 array (:func:`posenc_np.kernels.layers.sum_squares`),
    else ``np.dot`` of a float64 copy. The sums also answer the finiteness test: a finite sum
    means finite elements."""
    sums = []
    for g in grads.values():
        if kernel and g.flags.c_contiguous and kernel_dtype(g):
            sums.append(_kernels().sum_squares(g, check=False))
        else:
            x = g.ravel().astype(np.float64)
            with np.errstate(over="ignore"):
                sums.append(float(np.dot(x, x)))
    return sums


def _check_finite(grads: dict, name: str, sums=None) -> None:
    """Every array finite; ``sums`` (of :func:`_sums_of_squares`) spares the test of the arrays whose
    sum is finite (an inf sum may be an overflow of finite squares: those are tested)."""
    for i, (k, g) in enumerate(grads.items()):
        if sums is not None and math.isfinite(sums[i]):
            continue
        if not np.all(np.isfinite(g)):
            raise ValueError(f"{name}[{k!r}] holds NaN or inf (a diverged step: lower the learning rate or clip); "
                             "nothing was updated")


class Adam:
    """Adam with decoupled weight decay (AdamW); see the module docstring.

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place by :meth:`step`.
    lr : float
        Default learning rate :math:`\\eta` (a schedule passes its own to :meth:`step`).
    betas : (float, float)
    eps : float
    weight_decay : float
        :math:`\\lambda`, decoupled.
    decay : callable ``(name, array) -> bool``, optional
        Which parameters decay; default: arrays with ``ndim >= 2``.
    backend : {"auto", "numpy", "numba"}
        ``"numpy"``: the NumPy update below. ``"auto"``/``"numba"``: the fused kernel of
        :func:`posenc_np.kernels.layers.adamw_update` (the same operations in the same order
        and dtype, bit-identical, ~3x faster per parameter) for every parameter whose
        ``p``, gradient and moments are C-contiguous arrays of one float32/float64 dtype; the
        NumPy update for the others. The flat views it takes are made once per parameter and
        its scalars once per step (:func:`~posenc_np.kernels.layers.adamw_flat`), so a call costs
        ~1 us of Python instead of ~4.5 us.

    Attributes
    ----------
    t : int
        Number of steps taken.
    m, v : dict of str to ndarray
        First and second moments, same dtypes as the parameters.
    """

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decay=None, backend: str = "auto"):
        if not isinstance(params, dict) or not params:
            raise TypeError("params must be a non-empty dict of named arrays (model.params)")
        for k, v in params.items():
            if not isinstance(v, np.ndarray) or v.dtype.kind != "f":
                raise TypeError(f"params[{k!r}] must be a float ndarray (updated in place), got "
                                f"{type(v).__name__} {getattr(v, 'dtype', '')}")
            if not v.flags.writeable:
                raise ValueError(f"params[{k!r}] must be writeable (it is updated in place), got a read-only array")
        self.params = params
        self.lr = check_real(lr, "lr", nonnegative=True)
        self.betas = _check_betas(betas)
        self.eps = check_real(eps, "eps", positive=True)
        self.weight_decay = check_real(weight_decay, "weight_decay", nonnegative=True)
        self.backend = check_choice(backend, "backend", LAYER_BACKENDS)
        if decay is not None and not callable(decay):
            raise TypeError(f"decay must be a callable (name, array) -> bool or None, got {type(decay).__name__}")
        rule = decay or _default_decay
        self.decay = {k: bool(rule(k, v)) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0
        self._flat = {}  # name -> (p, m, v, their flat views), see _flat_views

    def step(self, grads: dict, lr: float | None = None) -> None:
        """One update of every parameter from ``grads`` (same keys and shapes as ``params``).

        Gradients holding NaN or inf raise ``ValueError`` before anything is updated.
        """
        _check_grads(grads, self.params, kernel=self.backend != "numpy")
        lr = self.lr if lr is None else check_real(lr, "lr", nonnegative=True)
        b1, b2 = self.betas
        self.t += 1
        step_size = lr / (1.0 - b1 ** self.t)
        root_bc2 = math.sqrt(1.0 - b2 ** self.t)
        scalars = {}  # (dtype, decay) -> the kernel's scalar arguments, rounded once per step
        for k, p in self.params.items():
            g, m, v = grads[k], self.m[k], self.v[k]
            decay = 1.0 - lr * self.weight_decay if self.weight_decay and self.decay[k] else 1.0
            flat = self._flat_views(k, p, m, v) if self.backend != "numpy" else None
            if flat is not None and g.dtype == p.dtype and g.flags.c_contiguous:
                key = (p.dtype, decay)
                if key not in scalars:
                    scalars[key] = _kernels().adamw_scalars(p.dtype, b1=b1, b2=b2, decay=decay, step_size=step_size,
                                                            root_bc2=root_bc2, eps=self.eps)
                _kernels().adamw_flat(flat[0], g.reshape(-1), flat[1], flat[2], scalars[key])
                continue
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            if decay != 1.0:
                p *= decay
            denom = np.sqrt(v)
            denom /= root_bc2
            denom += self.eps
            p -= step_size * (m / denom)

    def _flat_views(self, k: str, p: np.ndarray, m: np.ndarray, v: np.ndarray):
        """Flat views ``(p, m, v)`` of parameter ``k`` for the fused update, or ``None`` when its
        arrays do not allow one (not C-contiguous, read-only, or not one float32/float64 dtype). Made once
        and reused while ``params[k]``, ``m[k]`` and ``v[k]`` are the same arrays (checking
        that is cheaper than making the views and checking the flags on every step)."""
        seen = self._flat.get(k)
        if seen is None or seen[0] is not p or seen[1] is not m or seen[2] is not v:
            views = tuple(a.reshape(-1) for a in (p, m, v)) if _flat_ready(p, m, v) else None
            seen = self._flat[k] = (p, m, v, views)
        return seen[3]

    def state_dict(self) -> dict:
        """Arrays only (for NPZ): ``t``, ``m.<name>``, ``v.<name>`` and hyper-parameters as JSON-able values."""
        state = {"t": self.t, "lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                 "weight_decay": self.weight_decay, "decay": self.decay}
        arrays = {**{f"m.{k}": v for k, v in self.m.items()}, **{f"v.{k}": v for k, v in self.v.items()}}
        return {"hyper": state, "arrays": arrays}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned. Everything is checked (keys, shapes and
        dtypes of the moments, finite values, hyper-parameters) before anything is assigned."""
        hyper, arrays = self.check_state(state)
        for k in self.params:
            self.m[k][...] = arrays[f"m.{k}"]
            self.v[k][...] = arrays[f"v.{k}"]
        self.t = hyper["t"]
        self.lr, self.betas, self.eps = hyper["lr"], hyper["betas"], hyper["eps"]
        self.weight_decay, self.decay = hyper["weight_decay"], hyper["decay"]

    def check_state(self, state) -> tuple[dict, dict]:
        """Validate a :meth:`state_dict` for these parameters without changing anything.

        Returns ``(hyper, arrays)`` normalised; raises ``ValueError``/``TypeError`` naming the
        first problem (a missing, unexpected, misshapen, mistyped or non-finite moment; a
        hyper-parameter out of range).
        """
        if not isinstance(state, dict) or set(state) != {"hyper", "arrays"}:
            raise TypeError("state must be a dict with keys 'hyper' and 'arrays' (from Adam.state_dict)")
        hyper, arrays = state["hyper"], state["arrays"]
        if not isinstance(hyper, dict) or not isinstance(arrays, dict):
            raise TypeError("state['hyper'] and state['arrays'] must be dicts")
        expected = {f"{name}.{k}" for k in self.params for name in ("m", "v")}
        if set(arrays) != expected:
            raise ValueError(f"optimizer state arrays differ from the parameters: missing "
                             f"{sorted(expected - set(arrays))}, unexpected {sorted(set(arrays) - expected)}")
        for key, a in arrays.items():
            p = self.params[key[2:]]
            if not isinstance(a, np.ndarray) or a.dtype != p.dtype or a.shape != p.shape:
                raise ValueError(f"optimizer state {key} must be a {p.dtype} array of shape {p.shape}, got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
        _check_finite(arrays, "optimizer state")
        if any(np.any(arrays[f"v.{k}"] < 0) for k in self.params):
            raise ValueError("optimizer state v (second moments) must be >= 0")
        missing = {"t", "lr", "betas", "eps", "weight_decay", "decay"} - set(hyper)
        if missing:
            raise ValueError(f"optimizer hyper-parameters lack {sorted(missing)}")
        decay = hyper["decay"]
        if not isinstance(decay, dict) or set(decay) != set(self.params) or not all(
                isinstance(d, bool) for d in decay.values()):
            raise ValueError("optimizer hyper-parameter 'decay' must map every parameter name to a bool")
        out = {"t": check_int(hyper["t"], "optimizer t", minimum=0),
               "lr": check_real(hyper["lr"], "optimizer lr", nonnegative=True),
               "betas": _check_betas(hyper["betas"]),
               "eps": check_real(hyper["eps"], "optimizer eps", positive=True),
               "weight_decay": check_real(hyper["weight_decay"], "optimizer weight_decay", nonnegative=True),
               "decay": dict(decay)}
        return out, arrays


AdamW = Adam


def global_norm(grads: dict, *, backend: str = "auto") -> float:
    r""":math:`\sqrt{\sum_k \lVert g_k \rVert^2}` over every array, accumulated in float64.

    Finite gradients whose squares would overflow float64 are rescaled by their largest
    magnitude first, so the norm is finite whenever it is representable. ``backend``:
    ``"numpy"`` sums each array with ``np.dot`` of a float64 copy; ``"auto"``/``"numba"`` with
    the one-pass kernel :func:`posenc_np.kernels.layers.sum_squares` where the array is
    C-contiguous float32/float64 (the same sum in another order: within a few ulps).
    """
    _check_arrays(grads, "grads")
    backend = check_choice(backend, "backend", LAYER_BACKENDS)
    return _norm(grads, _sums_of_squares(grads, backend != "numpy"))


def _norm(grads: dict, sums: list) -> float:
    """The global norm from the per-array sums of squares (see :func:`global_norm`)."""
    total = sum(sums)
    if math.isinf(total) and all(np.all(np.isfinite(g)) for g in grads.values()):
        flats = [g.ravel().astype(np.float64) for g in grads.values()]
        big = max(float(np.max(np.abs(x))) for x in flats if x.size)
        return big * math.sqrt(sum(float(np.dot(x / big, x / big)) for x in flats))
    return math.sqrt(total)


def clip_grad_norm(grads: dict, max_norm: float, *, backend: str = "auto") -> float:
    r"""Scale every gradient in place by :math:`\min(1, c / (\lVert g \rVert + 10^{-6}))` (as
    ``torch.nn.utils.clip_grad_norm_``) and return the norm *before* clipping.

    A gradient holding NaN or inf raises ``ValueError`` naming it, before anything is scaled
    (a non-finite norm cannot be clipped; torch's ``error_if_nonfinite=True``). ``backend`` as
    in :func:`global_norm`; one pass per array serves the norm and the finiteness test.
    """
    max_norm = check_real(max_norm, "max_norm", positive=True)
    _check_arrays(grads, "grads")
    backend = check_choice(backend, "backend", LAYER_BACKENDS)
    sums = _sums_of_squares(grads, backend != "numpy")
    _check_finite(grads, "grads", sums)
    total = _norm(grads, sums)
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= np.asarray(coef, dtype=g.dtype)
    return total


def cosine_schedule(step: int, *, total: int, lr: float, warmup: int = 0, min_lr: float = 0.0) -> float:
    r"""Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr`` at ``total``.

    For 0-based ``step``: :math:`\eta = \eta_0 (s+1)/w` while :math:`s < w`, else
    :math:`\eta_{min} + \tfrac12(\eta_0 - \eta_{min})(1 + \cos(\pi\,\min(1, (s-w)/(T-w))))`.
    ``lr`` and ``min_lr`` are finite with ``0 <= min_lr <= lr``.
    """
    step = check_int(step, "step", minimum=0)
    total = check_int(total, "total", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    lr, min_lr = _check_lrs(lr, min_lr)
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * frac))


def _check_lrs(lr, min_lr) -> tuple[float, float]:
    lr = check_real(lr, "lr", nonnegative=True)
    min_lr = check_real(min_lr, "min_lr", nonnegative=True)
    if min_lr > lr:
        raise ValueError(f"min_lr ({min_lr}) must be <= lr ({lr})")
    return lr, min_lr
