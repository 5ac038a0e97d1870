"""Old name of :mod:`pyddstore.torch.petastorm.env`, kept so that existing imports work.

``import pyddstore.torch.petastorm_env`` gives that module itself (one module
object under both names); ``python -m pyddstore.torch.petastorm_env`` runs it.
"""

import sys

from .petastorm import env

if __name__ == "__main__":
    sys.exit(env.main())
sys.modules[__name__] = env
