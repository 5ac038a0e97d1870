"""The module paths from before pyddstore.torch had sub-packages still import, as the moved modules."""

import importlib

import pytest

import pyddstore.torch

MOVED = {
    "pyddstore.torch.goodput": "pyddstore.torch.adaptive.goodput",
    "pyddstore.torch.batchsize": "pyddstore.torch.adaptive.batchsize",
    "pyddstore.torch.resume": "pyddstore.torch.adaptive.resume",
    "pyddstore.torch.spark": "pyddstore.torch.petastorm.spark",
    "pyddstore.torch.petastorm_env": "pyddstore.torch.petastorm.env",
    "pyddstore.torch.throughput": "pyddstore.torch.tools.throughput",
}


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_old_module_path_is_the_moved_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_every_public_name_resolves():
    for name in pyddstore.torch.__all__:
        assert getattr(pyddstore.torch, name) is not None, name


def test_adaptive_names_resolve_lazily():
    import pyddstore.torch.adaptive as adl

    for name in adl.__all__:
        assert getattr(adl, name).__module__.startswith("pyddstore.torch.adaptive."), name


def test_petastorm_names_as_before():
    from pyddstore.torch.petastorm import decode_column, read_unischema  # noqa: F401
    from pyddstore.torch import petastorm

    assert set(petastorm.__all__) >= {"read_unischema", "decode_column", "decode_value", "CODECS"}
