"""Old name of :mod:`pyddstore.torch.petastorm.spark`, kept so that existing imports work.

``import pyddstore.torch.spark`` gives that module itself (one module object
under both names).
"""

import sys

from .petastorm import spark

sys.modules[__name__] = spark
