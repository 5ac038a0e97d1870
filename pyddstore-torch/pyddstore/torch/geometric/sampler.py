"""BudgetBatchSampler: batches of about equal total nodes or edges."""

import torch

from .. import _loader_protocol as loader_protocol
from .dataset import _GraphDataset


# ------------------------------------------------------------------ cost-aware batches

_SAMPLER_VERSION = 1


class BudgetBatchSampler(torch.utils.data.Sampler):
    """Batches of about equal total nodes or edges, the same number on every rank.

    ``BudgetBatchSampler(dataset, max_num_nodes=None, max_num_edges=None, *,
    shuffle=True, seed=0, num_replicas=None, rank=None)``; pass it as
    ``batch_sampler=`` to :class:`DataLoader`.

    Every epoch has one global plan, a function of (seed, epoch) and the
    stored sizes only (``dataset.graph_sizes()``, read once from the store's
    per-graph meta): the graphs in a shuffled order (ElasticSampler's) are
    cut into consecutive batches, each as many graphs as fit the budget (a
    graph over the budget on its own is a batch by itself). Replicas take the
    batches round-robin; the last round is completed with batches from the
    start of the plan, so every replica has ``len(sampler)`` batches (DDP and
    method-0 reads need equal step counts).

    Position: ``set_epoch(epoch, index=0)`` where ``index`` counts batches of
    the plan consumed by all replicas together; ``index_after(local_steps)``
    gives it after each replica took ``local_steps`` batches; ``state_dict()``
    / ``load_state_dict()`` save and restore (epoch, index, seed), also on
    another number of replicas (the remaining batches are split among the
    current ones)::

        state = sampler.state_dict()
        state["index"] = sampler.index_after(steps_done_this_epoch)
        torch.save({"sampler": state, ...}, "ckpt.pt")

    dataset: a geometric DistDataset/DistDatasetReader or a Subset of one.
    """

    def __init__(self, dataset, max_num_nodes=None, max_num_edges=None, *, shuffle=True, seed=0,
                 num_replicas=None, rank=None):
        from ..sampler import as_int, default_replicas

        if max_num_nodes is None and max_num_edges is None:
            raise ValueError("BudgetBatchSampler needs max_num_nodes= and/or max_num_edges=")
        for what, v in (("max_num_nodes", max_num_nodes), ("max_num_edges", max_num_edges)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{what} must be a positive int, got {v!r}")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        target = loader_protocol.find(dataset)
        if not isinstance(target, _GraphDataset):
            raise TypeError("BudgetBatchSampler reads the graph sizes from the store: pass a "
                            f"pyddstore.torch.geometric dataset (or a Subset of one), not "
                            f"{type(dataset).__name__}")
        rows = loader_protocol.rows_of(dataset, target, list(range(len(dataset))))
        sizes = target.graph_sizes()[torch.as_tensor(rows, dtype=torch.int64)]
        if num_replicas is None or rank is None:
            dn, dr = default_replicas(target)
            num_replicas = dn if num_replicas is None else num_replicas
            rank = dr if rank is None else rank
        num_replicas, rank = as_int(num_replicas, "num_replicas"), as_int(rank, "rank")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}, "
                             f"got {rank}")
        self.dataset = dataset
        self.max_num_nodes, self.max_num_edges = max_num_nodes, max_num_edges
        self.shuffle, self.seed = shuffle, as_int(seed, "seed")
        self.num_replicas, self.rank = num_replicas, rank
        self._nodes = sizes[:, 0].tolist()
        self._edges = sizes[:, 1].tolist()
        self._len = len(self._nodes)
        self.epoch, self.index = 0, 0
        self._plan_key, self._plan = None, None

    def _order(self):
        from ..sampler import elastic_seed

        if not self.shuffle:
            return list(range(self._len))
        g = torch.Generator()
        g.manual_seed(elastic_seed(self.seed, self.epoch))
        return torch.randperm(self._len, generator=g).tolist()

    def plan(self):
        """The epoch's global batches: a list of lists of dataset indices (cached per epoch)."""
        if self._plan_key != (self.seed, self.epoch):
            mn = self.max_num_nodes if self.max_num_nodes is not None else float("inf")
            me = self.max_num_edges if self.max_num_edges is not None else float("inf")
            nodes, edges = self._nodes, self._edges
            batches, cur, cn, ce = [], [], 0, 0
            for i in self._order():
                n, e = nodes[i], edges[i]
                if cur and (cn + n > mn or ce + e > me):
                    batches.append(cur)
                    cur, cn, ce = [], 0, 0
                cur.append(i)
                cn += n
                ce += e
            if cur:
                batches.append(cur)
            self._plan, self._plan_key = batches, (self.seed, self.epoch)
        return self._plan

    def _steps(self):
        remaining = len(self.plan()) - min(self.index, len(self.plan()))
        return -(-remaining // self.num_replicas) if remaining > 0 else 0

    def __len__(self):
        """Batches this replica yields from the set position (equal on every replica)."""
        return self._steps()

    def __iter__(self):
        plan = self.plan()
        nb = len(plan)
        for k in range(self._steps()):
            yield list(plan[(self.index + self.rank + k * self.num_replicas) % nb])

    def set_epoch(self, epoch, index=0):
        """Select the epoch's plan and the number of its batches already consumed by all replicas."""
        from ..sampler import as_int

        epoch, index = as_int(epoch, "epoch"), as_int(index, "index")
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        self.epoch, self.index = epoch, index

    def index_after(self, local_steps):
        """Global position after every replica took `local_steps` more batches of this iteration."""
        from ..sampler import as_int

        local_steps = as_int(local_steps, "local_steps")
        if not 0 <= local_steps <= self._steps():
            raise ValueError(f"local_steps must be in [0, {self._steps()}] (len of this sampler), "
                             f"got {local_steps}")
        return self.index + local_steps * self.num_replicas

    def _fingerprint(self):
        import hashlib

        plan = self.plan()
        head = [len(b) for b in plan[:64]] + [i for b in plan[:4] for i in b]
        return hashlib.blake2b(repr((len(plan), head)).encode(), digest_size=8).hexdigest()

    def state_dict(self):
        """epoch, index (batches of the plan consumed by all replicas), seed, and for
        checking on load: budgets, shuffle, dataset length, plan fingerprint."""
        return {"version": _SAMPLER_VERSION, "epoch": self.epoch, "index": self.index,
                "seed": self.seed, "shuffle": self.shuffle, "max_num_nodes": self.max_num_nodes,
                "max_num_edges": self.max_num_edges, "dataset_len": self._len,
                "num_replicas": self.num_replicas, "plan_fingerprint": self._fingerprint()}

    def load_state_dict(self, state):
        """Restore a state_dict(); the replicas stay this sampler's own. ValueError when the
        state was saved with other budgets, shuffle or dataset, or gives another plan."""
        if not isinstance(state, dict) or any(k not in state for k in ("epoch", "index", "seed")):
            raise ValueError("state must be a dict from BudgetBatchSampler.state_dict()")
        for key, mine in (("shuffle", self.shuffle), ("max_num_nodes", self.max_num_nodes),
                          ("max_num_edges", self.max_num_edges), ("dataset_len", self._len)):
            if key in state and state[key] != mine:
                raise ValueError(f"state was saved with {key}={state[key]!r} but this sampler has "
                                 f"{key}={mine!r}: build the sampler with the saved settings")
        old = (self.seed, self.epoch, self.index)
        self.seed = int(state["seed"])
        try:
            self.set_epoch(state["epoch"], state["index"])
            if "plan_fingerprint" in state and state["plan_fingerprint"] != self._fingerprint():
                raise ValueError("the saved epoch's batch plan differs from the one this process "
                                 "computes (other sizes or torch version?): resuming would lose and "
                                 "repeat graphs")
        except Exception:
            self.seed, self.epoch, self.index = old
            raise

    def __repr__(self):
        return (f"BudgetBatchSampler(len={self._len}, max_num_nodes={self.max_num_nodes}, "
                f"max_num_edges={self.max_num_edges}, num_replicas={self.num_replicas}, rank={self.rank}, "
                f"epoch={self.epoch}, index={self.index})")
