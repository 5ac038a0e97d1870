"""Old name of :mod:`pyddstore.torch.adaptive.batchsize`, kept so that existing imports work.

``import pyddstore.torch.batchsize`` gives that module itself (one module object,
so its classes, private names and pickles are the same under both names).
"""

import sys

from .adaptive import batchsize

sys.modules[__name__] = batchsize
