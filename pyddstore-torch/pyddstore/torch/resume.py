"""Old name of :mod:`pyddstore.torch.adaptive.resume`, kept so that existing imports work.

``import pyddstore.torch.resume`` gives that module itself (one module object,
so its classes, private names and pickles are the same under both names).
"""

import sys

from .adaptive import resume

sys.modules[__name__] = resume
