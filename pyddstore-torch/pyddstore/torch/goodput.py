"""Old name of :mod:`pyddstore.torch.adaptive.goodput`, kept so that existing imports work.

``import pyddstore.torch.goodput`` gives that module itself (one module object,
so its classes, private names and pickles are the same under both names).
"""

import sys

from .adaptive import goodput

sys.modules[__name__] = goodput
