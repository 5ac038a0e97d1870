"""Command-line tools built on pyddstore.torch; not imported by the library itself.

* :mod:`pyddstore.torch.tools.throughput`: ``pyddstore-throughput``, how fast a
  Parquet dataset trains from the distributed store (optionally against Petastorm).
"""
