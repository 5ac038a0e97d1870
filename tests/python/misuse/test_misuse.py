"""The misuse table: what a new user gets wrong on some ranks only.

Each case runs as its own MPI job (cases.py) under a timeout, at
DDSTORE_NODE_LOCAL=1 and 0, for method 0 (and method 1 where libfabric is
built in). Every job must end within the timeout (never a hang) with, on
every rank, either success or the expected clear error.

Run plainly, not under mpiexec: ``python -m pytest tests/python/misuse``.
Environment:
  DDS_MISUSE_MPIEXEC  launcher prefix, split on blanks (default ``mpiexec``);
                      ``-n N`` and the Python command are appended, e.g.
                      DDS_MISUSE_MPIEXEC="tests/cluster/mpirun.sh --hosts 2"
                      runs the table across simulated hosts;
  DDS_MISUSE_RANKS    rank counts (default "2 3");
  DDS_MISUSE_TIMEOUT  seconds per job (default 120); the store's
                      DDSTORE_COLLECTIVE_TIMEOUT_S is set to a third of it;
  DDS_MISUSE_SPANS_HOSTS=1  the launcher puts ranks on several hosts, so
                      method-0 reads are collective with node-local on too.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "core"))
from core_helpers import subprocess_env  # noqa: E402  (variables tying us to this MPI job dropped)

LAUNCH = shlex.split(os.environ.get("DDS_MISUSE_MPIEXEC", "mpiexec"))
RANKS = [int(n) for n in os.environ.get("DDS_MISUSE_RANKS", "2 3").split()]
TIMEOUT = float(os.environ.get("DDS_MISUSE_TIMEOUT", "120"))
SPANS_HOSTS = os.environ.get("DDS_MISUSE_SPANS_HOSTS", "0") == "1"
BAD = 1


def _has_fabric():
    from pyddstore import _lib

    return bool(_lib.lib.dds_has_fabric())


def run_case(case, method, ranks, node_local, **extra):
    env = subprocess_env(extra)
    env.update(DDSTORE_NODE_LOCAL=str(node_local), DDSTORE_COLLECTIVE_TIMEOUT_S=str(int(TIMEOUT / 3)),
               PYTHONUNBUFFERED="1")
    if method == 1:
        env.setdefault("DDSTORE_FABRIC", "tcp")
    cmd = LAUNCH + ["-n", str(ranks), sys.executable, os.path.join(HERE, "cases.py"), case, str(method)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"{case} (method {method}, {ranks} ranks, node-local {node_local}) did not end "
                    f"within {TIMEOUT:.0f} s: a hang\n{out[-3000:]}")
    # mpiexec may join the ranks' lines without a newline between them.
    results = {int(m.group(1)): m.group(2).strip()
               for m in re.finditer(r"RESULT (\d+) (.*?)(?=RESULT |FREE-FAILED |\n|$)", p.stdout)}
    assert sorted(results) == list(range(ranks)), (
        f"{case}: not every rank reported (exit {p.returncode})\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    assert "FREE-FAILED" not in p.stdout, p.stdout
    return results


def expect_ok(res):
    assert all(v == "ok" for v in res.values()), res


def expect_all(res, *needles):
    """Every rank raised, naming rank BAD's mistake."""
    for r, v in res.items():
        assert v.startswith("error "), (r, res)
        for n in needles:
            assert n in v, (r, n, v)


def expect_bad_only(res, *needles):
    for r, v in res.items():
        if r == BAD:
            assert v.startswith("error "), res
            for n in needles:
                assert n in v, (n, v)
        else:
            assert v == "ok", res


# (case, what every rank gets where method-0 reads are collective, where they are not)
BAD_ARGS = {
    "bad_name": ("'y'",),
    "bad_rows": ("outside",),
    "bad_dtype": ("float32",),
    "bad_output": ("output has 1 rows",),
}


ALL_CASES = ("unequal_free", "unequal_epoch_end", *BAD_ARGS, "raise_between", "loader_break")


def _params():
    """Every case at the first rank count, node-local on and off; at further
    rank counts (more than one healthy rank to name) the cases whose message
    lists ranks, with reads collective; method 1 (reads never collective)
    for the cases whose outcome differs from method 0's."""
    out = []
    for nl in (1, 0):
        for case in ALL_CASES:
            out.append(pytest.param(case, 0, RANKS[0], nl, id=f"{case}-m0-n{RANKS[0]}-nl{nl}"))
    # Across hosts node-local stays on: the reads are collective there anyway,
    # and node peers then read each other through shared memory, not through
    # Open MPI 4.1's osc/ucx between ranks of one node, which can hang
    # (docs/clusters.rst).
    nl = 1 if SPANS_HOSTS else 0
    for ranks in RANKS[1:]:
        for case in ("unequal_free", "unequal_epoch_end", "bad_name"):
            out.append(pytest.param(case, 0, ranks, nl, id=f"{case}-m0-n{ranks}-nl{nl}"))
    for case in ("unequal_epoch_end", "bad_name"):
        out.append(pytest.param(case, 1, RANKS[0], 0, id=f"{case}-m1-n{RANKS[0]}-nl0"))
    return out


@pytest.mark.parametrize("case,method,ranks,node_local", _params())
def test_misuse(case, method, ranks, node_local):
    if method == 1 and not _has_fabric():
        pytest.skip("libddstore built without libfabric")
    res = run_case(case, method, ranks, node_local)
    # Method-0 reads are collective unless the whole group shares node memory.
    collective = method == 0 and (node_local == 0 or SPANS_HOSTS)
    if case == "unequal_free" or case == "loader_break":
        expect_ok(res)
    elif case == "unequal_epoch_end":
        if collective:
            expect_all(res, "out of step", f"rank {BAD} (read 4) in get_batch", "in epoch_end")
        else:
            expect_ok(res)
    elif case in BAD_ARGS:
        if collective:
            expect_all(res, *BAD_ARGS[case])
            for r, v in res.items():
                if r != BAD:
                    assert f"rank {BAD}:" in v, v
                    assert "negative row count" not in v, v
        else:
            expect_bad_only(res, *BAD_ARGS[case])
    elif case == "raise_between":
        expect_bad_only(res, "user code failed between reads")


@pytest.mark.skipif(SPANS_HOSTS, reason="simulates two nodes on this host; across hosts /tmp is per host")
def test_window_lock_with_shared_tmpdir(tmp_path):
    """Two nodes whose TMPDIR is one shared directory (as on clusters whose
    TMPDIR is on a shared file system): DDSTORE_TEST_NODES=2 makes each half
    of the ranks a node of its own on this host. The window lock used to be
    an flock on $TMPDIR/ddstore-winlock-<uid>, which the two node leaders of
    the group could never both hold: store creation waited out the lock's
    300 s limit (here: the job's timeout). Now it is keyed by node and lives
    in /dev/shm."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    res = run_case("read", 0, 2, 1, TMPDIR=str(shared), DDSTORE_TEST_NODES="2")
    expect_ok(res)
    assert not any(p.name.startswith("ddstore-winlock") for p in shared.iterdir()), list(shared.iterdir())
