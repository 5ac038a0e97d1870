"""Old name of :mod:`pyddstore.torch.tools.throughput`, kept so that existing imports work.

``import pyddstore.torch.throughput`` gives that module itself (one module
object under both names); ``python -m pyddstore.torch.throughput`` runs it, as
``pyddstore-throughput`` does.
"""

import sys

from .tools import throughput

if __name__ == "__main__":
    sys.exit(throughput.cli())
sys.modules[__name__] = throughput
