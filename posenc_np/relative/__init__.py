"""Relative position encodings: T5 buckets, Shaw et al., BERT relative_key, Transformer-XL,
DeBERTa, KERPLE, Sandwich. One module per scheme; the public API is flat
(``posenc_np.relative.<name>``).

Sign conventions differ between papers and are part of each function's name or arguments:
T5 and Shaw use ``key - query``; BERT ``relative_key`` and DeBERTa use ``query - key``.
Every scheme is available as a :class:`posenc_np.attention.Hook` so that one call to
:func:`posenc_np.attention.forward` gives attention with that encoding, forward and backward.
"""

from .t5 import *  # noqa: F401,F403
from .shaw import *  # noqa: F401,F403
from .bert import *  # noqa: F401,F403
from .transformer_xl import *  # noqa: F401,F403
from .deberta import *  # noqa: F401,F403
from .cope import *  # noqa: F401,F403
from .fire import *  # noqa: F401,F403
from .dpb import *  # noqa: F401,F403
from .kerple import *  # noqa: F401,F403
from .sandwich import *  # noqa: F401,F403
from . import bert, cope, deberta, dpb, fire, kerple, sandwich, shaw, t5, transformer_xl

__all__ = [*t5.__all__, *shaw.__all__, *bert.__all__, *transformer_xl.__all__, *deberta.__all__, *cope.__all__,
           *fire.__all__, *dpb.__all__, *kerple.__all__, *sandwich.__all__]
