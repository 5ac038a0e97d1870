"""examples/graph_ddp.py, briefly: a GIN trained with DDP on graphs from the store learns."""
import importlib.util
import os

import pytest

pytest.importorskip("torch_geometric")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_graph_ddp_example_learns(world):
    spec = importlib.util.spec_from_file_location("graph_ddp", os.path.join(ROOT, "examples", "graph_ddp.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    means = mod.main(world, graphs=240, epochs=3, verbose=False)
    assert len(set(world.allgather(tuple(means)))) == 1
    assert means[-1] < 0.5 * means[0], means
