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

from ._checks import check_int, check_real

__all__ = ["Adam", "AdamW", "clip_grad_norm", "cosine_schedule", "global_norm"]


def _default_decay(name: str, value: np.ndarray) -> bool:
    return value.ndim >= 2


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

    Attributes
    ----------
    t : int
        Number of steps taken.
    m, v : dict of str to ndarray
        First and second moments, same dtypes as the parameters.
    """

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decay=None):
        if not isinstance(params, dict) or not params:
            raise TypeError("params must be a non-empty dict of named arrays (model.params)")
        self.params = params
        self.lr = check_real(lr, "lr", nonnegative=True)
        if len(betas) != 2:
            raise ValueError(f"betas must be a pair, got {betas!r}")
        self.betas = tuple(check_real(b, f"betas[{i}]", nonnegative=True) for i, b in enumerate(betas))
        if not all(b < 1 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {self.betas}")
        self.eps = check_real(eps, "eps", positive=True)
        self.weight_decay = check_real(weight_decay, "weight_decay", nonnegative=True)
        rule = decay or _default_decay
        self.decay = {k: bool(rule(k, v)) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict, lr: float | None = None) -> None:
        """One update of every parameter from ``grads`` (same keys as ``params``)."""
        if set(grads) != set(self.params):
            raise ValueError(f"grads keys differ from params: missing {sorted(set(self.params) - set(grads))}, "
                             f"unexpected {sorted(set(grads) - set(self.params))}")
        lr = self.lr if lr is None else check_real(lr, "lr", nonnegative=True)
        b1, b2 = self.betas
        self.t += 1
        step_size = lr / (1.0 - b1 ** self.t)
        root_bc2 = math.sqrt(1.0 - b2 ** self.t)
        for k, p in self.params.items():
            g, m, v = grads[k], self.m[k], self.v[k]
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            if self.weight_decay and self.decay[k]:
                p *= 1.0 - lr * self.weight_decay
            denom = np.sqrt(v)
            denom /= root_bc2
            denom += self.eps
            p -= step_size * (m / denom)

    def state_dict(self) -> dict:
        """Arrays only (for NPZ): ``t``, ``m.<name>``, ``v.<name>`` and hyper-parameters as JSON-able values."""
        state = {"t": self.t, "lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                 "weight_decay": self.weight_decay, "decay": self.decay}
        arrays = {**{f"m.{k}": v for k, v in self.m.items()}, **{f"v.{k}": v for k, v in self.v.items()}}
        return {"hyper": state, "arrays": arrays}

    def load_state_dict(self, state: dict) -> None:
        hyper, arrays = state["hyper"], state["arrays"]
        for k in self.params:
            for name, store in (("m", self.m), ("v", self.v)):
                a = np.asarray(arrays[f"{name}.{k}"])
                if a.shape != store[k].shape:
                    raise ValueError(f"optimizer state {name}.{k} has shape {a.shape}, expected {store[k].shape}")
                store[k][...] = a
        self.t = check_int(hyper["t"], "t", minimum=0)
        self.lr = float(hyper["lr"])
        self.betas = tuple(float(b) for b in hyper["betas"])
        self.eps = float(hyper["eps"])
        self.weight_decay = float(hyper["weight_decay"])
        self.decay = {k: bool(hyper["decay"][k]) for k in self.params}


AdamW = Adam


def global_norm(grads: dict) -> float:
    r""":math:`\sqrt{\sum_k \lVert g_k \rVert^2}` over every array, accumulated in float64."""
    return math.sqrt(sum(float(np.dot(g.ravel().astype(np.float64), g.ravel().astype(np.float64)))
                         for g in grads.values()))


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    r"""Scale every gradient in place by :math:`\min(1, c / (\lVert g \rVert + 10^{-6}))` (as
    ``torch.nn.utils.clip_grad_norm_``) and return the norm *before* clipping."""
    max_norm = check_real(max_norm, "max_norm", positive=True)
    total = global_norm(grads)
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= np.asarray(coef, dtype=g.dtype)
    return total


def cosine_schedule(step: int, *, total: int, lr: float, warmup: int = 0, min_lr: float = 0.0) -> float:
    r"""Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr`` at ``total``.

    For 0-based ``step``: :math:`\eta = \eta_0 (s+1)/w` while :math:`s < w`, else
    :math:`\eta_{min} + \tfrac12(\eta_0 - \eta_{min})(1 + \cos(\pi\,\min(1, (s-w)/(T-w))))`.
    """
    step = check_int(step, "step", minimum=0)
    total = check_int(total, "total", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * frac))
