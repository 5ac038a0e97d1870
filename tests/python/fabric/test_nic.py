"""Which NIC (libfabric domain) each process opens, with the suite's real
provider (shm, tcp): the choice is reported by info() with its reason, the
overrides (DDSTORE_FABRIC_DOMAIN, nic_map=, DDSTORE_NIC_MAP) are obeyed in
that order, reads stay bit-exact, and an override that cannot be honoured is
an error on every rank. The choice among several NICs by NUMA topology is
tested on faked sysfs trees in tests/c/test_nic.c."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import pyddstore
from pyddstore import DDStoreValueError, PyDDStore

from fabric_helpers import PROVIDER, environ, local_values, offsets, shared_tmpdir, through_fabric, values

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")

HOW = ("DDSTORE_FABRIC_DOMAIN", "nic_map", "DDSTORE_NIC_MAP", "only", "topology", "spread")
NIC_VARS = ("DDSTORE_FABRIC_DOMAIN", "DDSTORE_NIC_MAP")


def make(comm, method=1, hs=None, **kw):
    with through_fabric():
        return PyDDStore(comm, method, fabric=PROVIDER, handshake_dir=hs, **kw)


def reads_bit_exact(comm, s):
    """Every rank reads every row (other ranks' through the opened domain)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    s.add("nic", local_values(rank, size, (7,), "float64", 11))
    total = int(offsets(size)[-1])
    rows = np.arange(total)[::-1].copy()
    out = np.zeros((total, 7))
    s.get_batch("nic", out, rows)
    assert out.tobytes() == values(rows, (7,), "float64", 11).tobytes()


@pytest.fixture(scope="module")
def auto():
    """info() of a method-1 store with no override: the automatic choice."""
    with environ(**dict.fromkeys(NIC_VARS)):
        s = make(MPI.COMM_WORLD)
        d = s.info()
        s.free()
    return d


@pytest.mark.parametrize("method", [1, 2])
def test_choice_reported_and_reads_work(comm, method):
    hs = os.path.join(shared_tmpdir(comm, "ddstore-nic-"), "hs") if method == 2 else None
    with environ(**dict.fromkeys(NIC_VARS)):
        s = make(comm, method, hs)
    try:
        d = s.info()
        assert d["transport"] == "libfabric:" + d["transport"].split(":", 1)[1]
        assert d["domain"], d
        assert d["domain_choice"].startswith(HOW), d["domain_choice"]
        # Every rank names its domain (they may differ on a multi-NIC node).
        assert all(comm.allgather(bool(d["domain"])))
        reads_bit_exact(comm, s)
    finally:
        s.free()
    comm.Barrier()
    if hs and comm.Get_rank() == 0:
        os.rmdir(os.path.dirname(hs))


def test_fabric_domain_overrides_every_map(comm, auto):
    dom = auto["domain"]
    with environ(DDSTORE_FABRIC_DOMAIN=dom, DDSTORE_NIC_MAP="nosuch0=0-8191"):
        s = make(comm, nic_map="nosuch1=0-8191")
    try:
        d = s.info()
        assert (d["domain"], d["domain_choice"]) == (dom, f"DDSTORE_FABRIC_DOMAIN={dom}")
        reads_bit_exact(comm, s)
    finally:
        s.free()


def test_nic_map_argument_then_environment(comm, auto):
    """nic_map= (the original DDStore's argument) wins over DDSTORE_NIC_MAP,
    which wins over the topology; both in the original's format."""
    dom = auto["domain"]
    cpus = sorted(os.sched_getaffinity(0))
    with environ(DDSTORE_FABRIC_DOMAIN=None, DDSTORE_NIC_MAP="nosuch0=0-8191"):
        s = make(comm, nic_map=f"{dom}=0-8191;")
    try:
        d = s.info()
        assert d["domain"] == dom
        assert d["domain_choice"].startswith(f"nic_map: {dom} has {len(cpus)} of this process's "
                                             f"{len(cpus)} CPUs"), d["domain_choice"]
        reads_bit_exact(comm, s)
    finally:
        s.free()
    with environ(DDSTORE_FABRIC_DOMAIN=None, DDSTORE_NIC_MAP=f"{dom}={','.join(map(str, cpus))}"):
        s = make(comm, nic_map="")  # "" is unset, as in the original
    try:
        d = s.info()
        assert d["domain"] == dom and d["domain_choice"].startswith(f"DDSTORE_NIC_MAP: {dom} has")
    finally:
        s.free()


@pytest.mark.parametrize("case", ["domain", "malformed map on rank 0", "map without my CPUs",
                                  "map naming another NIC"])
def test_unusable_override_fails_on_every_rank(comm, auto, case):
    dom, rank = auto["domain"], comm.Get_rank()
    env = dict.fromkeys(NIC_VARS)
    kw = {}
    if case == "domain":
        env["DDSTORE_FABRIC_DOMAIN"], want = "nosuch0", "DDSTORE_FABRIC_DOMAIN='nosuch0' is not a domain"
    elif case == "malformed map on rank 0":
        kw["nic_map"] = f"{dom}" if rank == 0 else None
        want = "is not <interface>=<cpus>"
    elif case == "map without my CPUs":
        assert 8191 not in os.sched_getaffinity(0)
        kw["nic_map"], want = f"{dom}=8191", "gives none of this process's CPUs"
    else:
        kw["nic_map"], want = "nosuch0=0-8191", "CPUs to 'nosuch0', which is not a domain"
    with environ(**env):
        with pytest.raises(DDStoreValueError, match=want):
            make(comm, **kw)
    comm.Barrier()
    s = make(comm)  # the communicator and the provider are still usable
    s.free()


def test_method2_reader_takes_its_nic_from_the_environment(comm, auto):
    rank, size = comm.Get_rank(), comm.Get_size()
    dom = auto["domain"]
    hs = os.path.join(shared_tmpdir(comm, "ddstore-nic-"), "hs")
    s = make(comm, 2, hs)
    s.add("nic", local_values(rank, size, (7,), "float64", 11))
    comm.Barrier()
    if rank == 0:
        with pytest.raises(DDStoreValueError, match="export DDSTORE_NIC_MAP"):
            PyDDStore(None, method=2, handshake_dir=hs, n_core=size, nic_map=f"{dom}=0-8191")
        with environ(DDSTORE_FABRIC_DOMAIN=None, DDSTORE_NIC_MAP=f"{dom}=0-8191"):
            r = pyddstore.join("nic", handshake_dir=hs, n_core=size, timeout=30)
        try:
            d = r.info()
            assert d["is_reader"] and d["domain"] == dom
            assert d["domain_choice"].startswith(f"DDSTORE_NIC_MAP: {dom} has"), d["domain_choice"]
            total = int(offsets(size)[-1])
            out = np.zeros((total, 7))
            r.get("nic", out, 0)
            assert out.tobytes() == values(np.arange(total), (7,), "float64", 11).tobytes()
        finally:
            r.free()
        with environ(DDSTORE_FABRIC_DOMAIN="nosuch0"):
            with pytest.raises(DDStoreValueError, match="nosuch0"):
                pyddstore.join("nic", handshake_dir=hs, n_core=size, timeout=30)
    comm.Barrier()
    s.free()
    comm.Barrier()
    if rank == 0:
        os.rmdir(os.path.dirname(hs))
