"""Petastorm compatibility: its stored format, its own environment, Spark DataFrames.

* :mod:`pyddstore.torch.petastorm.format` reads Petastorm datasets without
  Petastorm and without unpickling anything (the Unischema and the codecs);
  its names are importable from here, as before this folder existed:
  ``from pyddstore.torch.petastorm import read_unischema, decode_column``.
* :mod:`pyddstore.torch.petastorm.spark`: Spark DataFrames as DistDatasets,
  in the spirit of Petastorm's ``make_spark_converter`` (needs pyspark on the
  driver).
* :mod:`pyddstore.torch.petastorm.env`: Petastorm's own virtual environment
  (made by ``petastorm_venv.sh``, shipped here), which
  ``pyddstore-throughput --vs petastorm`` runs Petastorm in.

Importing this package imports only the format module (numpy); spark and
env are imported when used.
"""

from .format import *  # noqa: F401,F403
from .format import __all__  # noqa: F401
