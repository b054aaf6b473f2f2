"""``python -m posenc_np``: the command line of :mod:`posenc_np.cli`."""

import sys

from .cli import main

sys.exit(main())
