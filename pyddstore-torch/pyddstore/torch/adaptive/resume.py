"""Loader position that survives a kill and a restart on any number of ranks.

:class:`ResumableLoader` wraps a DataLoader-like object (torch's
``DataLoader``, :class:`~pyddstore.torch.ThreadDataLoader`, ...) whose
sampler is an :class:`~pyddstore.torch.sampler.ElasticSampler`, counts the
batches it hands out, and turns them into the number of samples consumed by
all replicas together. Its :meth:`~ResumableLoader.state_dict` therefore
says where the epoch stands, independently of the number of replicas and of
the local batch size, and a job restarted from it continues at the next
unseen batch.
"""

import operator

from ..sampler import ElasticSampler
from .batchsize import GlobalBatchSize

__all__ = ["ResumableLoader"]

_STATE_VERSION = 1


def _find_sampler(loader):
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, ElasticSampler):
        return sampler
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    if isinstance(inner, ElasticSampler):
        return inner
    raise TypeError(
        "ResumableLoader needs a loader built with sampler=ElasticSampler(...) "
        f"(found sampler {type(sampler).__name__}); e.g. "
        "DataLoader(ds, batch_size=b, sampler=ElasticSampler(ds))"
    )


def _find_batching(loader):
    # Position arithmetic needs the local batch size and whether the last
    # short batch is dropped; both live on the BatchSampler that DataLoader
    # builds from batch_size/drop_last (and that AdaptDL also resizes).
    batch_sampler = getattr(loader, "batch_sampler", None)
    size = getattr(batch_sampler, "batch_size", None)
    if batch_sampler is None or size is None:
        raise TypeError(
            "ResumableLoader needs a loader with automatic batching "
            "(batch_size=int, no custom batch_sampler): it counts samples as "
            "batches * batch_size * replicas"
        )
    return batch_sampler


class ResumableLoader:
    """Wrap a loader so that its position can be saved and resumed mid-epoch.

    Parameters
    ----------
    loader : DataLoader-like
        Iterable over batches, with ``loader.sampler`` (or
        ``loader.batch_sampler.sampler``) an
        :class:`~pyddstore.torch.sampler.ElasticSampler` and
        ``loader.batch_sampler`` a ``BatchSampler`` (what ``DataLoader`` builds
        from ``batch_size=`` and ``drop_last=``). Every replica must use the
        same local batch size, as DDP needs anyway.
    global_batch_size : GlobalBatchSize, optional, keyword-only
        If given, the loader's local batch size is set from it at the start of
        every iteration (so :meth:`GlobalBatchSize.set_batch_size` between
        epochs, or a restart on another number of replicas, changes it), and
        its ``is_accum_step()``/``is_optim_step()`` follow the batches.

    Each batch handed out counts as consumed (``batch_size * num_replicas``
    samples, fewer for a last short batch) as soon as it is yielded, so save
    :meth:`state_dict` after the training step on it (with the model, at an
    optimizer step when accumulating). Prefetched but unseen batches are not
    counted. Every replica computes the same state; save rank 0's.

    Epochs: :meth:`set_epoch` starts an epoch at its beginning, except right
    after :meth:`load_state_dict` for the saved epoch, where it keeps the
    saved position, so the usual loop resumes unchanged::

        sampler = ElasticSampler(ds, seed=7)              # replicas from the store / MPI
        loader = ResumableLoader(DataLoader(ds, batch_size=8, sampler=sampler))
        if os.path.exists("ckpt.pt"):
            ckpt = torch.load("ckpt.pt")
            model.load_state_dict(ckpt["model"])
            loader.load_state_dict(ckpt["loader"])         # may come from 4 ranks, now 2
        for epoch in range(loader.epoch, num_epochs):
            loader.set_epoch(epoch)                        # keeps a restored position
            for batch in loader:                           # starts at the next unseen batch
                train_step(batch)
                if rank == 0 and want_checkpoint():
                    torch.save({"model": model.state_dict(),
                                "loader": loader.state_dict()}, "ckpt.pt")

    An iteration started by ``for batch in loader`` begins at the position set
    by :meth:`set_epoch` or :meth:`load_state_dict`; if the restored epoch was
    already finished, that first iteration yields nothing. Iterating again
    without :meth:`set_epoch` replays from that same position, as a
    DataLoader replays its epoch. Other attributes (``dataset``,
    ``batch_size``, ``close()``, ...) are the wrapped loader's; note that
    ``batch_size`` is the one the loader was built with, and the local size in
    use is ``loader.batch_sampler.batch_size``.
    """

    def __init__(self, loader, *, global_batch_size=None):
        sampler = _find_sampler(loader)
        _find_batching(loader)
        if global_batch_size is not None:
            if not isinstance(global_batch_size, GlobalBatchSize):
                raise TypeError("global_batch_size must be a GlobalBatchSize (or None)")
            if global_batch_size.num_replicas != sampler.num_replicas:
                raise ValueError(
                    f"global_batch_size is for {global_batch_size.num_replicas} replicas but "
                    f"the sampler has {sampler.num_replicas}: build both with the same "
                    f"num_replicas (or call set_num_replicas)"
                )
        self.loader = loader
        self.sampler = sampler
        self.global_batch_size = global_batch_size
        self._start = sampler.index        # sampler position when the iteration began
        self._local_len = None             # sampler length for that iteration
        self._batch = None                 # local batch size of that iteration
        self._batches = 0                  # batches handed out in that iteration
        self._complete = False
        self._restored = None              # (epoch, complete) from load_state_dict

    def __getattr__(self, name):
        # Only reached for names this class lacks: behave like the loader.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    @property
    def epoch(self):
        """The current epoch (the restored one after :meth:`load_state_dict`)."""
        return self.sampler.epoch

    @property
    def index(self):
        """Samples of the current epoch consumed by all replicas together (padding included)."""
        if self._local_len is None:
            return self.sampler.index
        consumed = min(self._batches * self._batch, self._local_len)
        return self._start + consumed * self.sampler.num_replicas

    @property
    def batches_seen(self):
        """Batches handed out by the current iteration on this replica."""
        return self._batches

    def set_epoch(self, epoch):
        """Start ``epoch`` from its beginning, or keep the restored position if it is the restored epoch."""
        epoch = operator.index(epoch)
        if self._restored is not None and self._restored[0] == epoch:
            return
        self._restored = None
        self.sampler.set_epoch(epoch, 0)
        self._reset(complete=False)

    def _reset(self, complete):
        self._start = self.sampler.index
        self._local_len = None
        self._batch = None
        self._batches = 0
        self._complete = complete

    def _check_buffer_rows(self, local):
        # ThreadDataLoader(reuse_buffers=True) allocates its buffers once for
        # the batch_size it was built with: a larger local batch would not fit.
        loader = self.loader
        reuse = getattr(loader, "reuse_buffers", None)
        if reuse is None:
            reuse = getattr(getattr(loader, "_core", None), "reuse", False)
        built = getattr(loader, "batch_size", None)
        if reuse and built is not None and local > built:
            raise ValueError(
                f"the global batch size needs a local batch of {local} but this loader's reused "
                f"buffers hold batch_size={built} rows: build the loader with batch_size >= the "
                "largest local batch, or without reuse_buffers"
            )

    def _num_batches(self, local_len, batch, drop_last):
        return local_len // batch if drop_last else -(-local_len // batch)

    def __len__(self):
        """Batches the next iteration will yield on this replica (the same on every replica)."""
        if self._restored is not None and self._restored[1]:
            return 0
        batch_sampler = _find_batching(self.loader)
        batch = batch_sampler.batch_size
        if self.global_batch_size is not None:
            batch = self.global_batch_size.next_local_bsz
        return self._num_batches(len(self.sampler), batch, batch_sampler.drop_last)

    def __iter__(self):
        """Yield the batches from the current position to the end of the epoch."""
        restored, self._restored = self._restored, None
        self._reset(complete=False)
        if restored is not None and restored[1]:
            self._complete = True
            return
        batch_sampler = _find_batching(self.loader)
        if self.global_batch_size is not None:
            gbs = self.global_batch_size
            if gbs.num_replicas != self.sampler.num_replicas:
                gbs.set_num_replicas(self.sampler.num_replicas)
            local = gbs.next_local_bsz
            self._check_buffer_rows(local)
            batch_sampler.batch_size = gbs.begin_epoch()
        batch = batch_sampler.batch_size
        local_len = len(self.sampler)
        total = self._num_batches(local_len, batch, batch_sampler.drop_last)
        if self.global_batch_size is not None:
            self.global_batch_size.begin_epoch(total)
        self._batch, self._local_len = batch, local_len
        for count, item in enumerate(self.loader, 1):
            if count > total:
                raise RuntimeError(
                    f"the loader yielded more than the {total} batches its sampler and batch "
                    "size allow: do not change the sampler or batch size during an iteration"
                )
            if count > 1 and self.global_batch_size is not None:
                self.global_batch_size.advance()
            self._batches = count
            if count == total:
                # Mark the epoch finished before handing out the last batch:
                # a checkpoint taken inside the loop body after it must not
                # replay a tail the loader would drop (drop_last).
                self._complete = True
            yield item
        self._complete = True

    def state_dict(self):
        """Position as a dict: the sampler's state at the consumed index, plus completion and batch size."""
        sampler_state = self.sampler.state_dict()
        sampler_state["index"] = self.index
        complete = self._complete
        if self._restored is not None:
            complete = self._restored[1]
        state = {
            "version": _STATE_VERSION,
            "sampler": sampler_state,
            "epoch_complete": bool(complete),
        }
        if self.global_batch_size is not None:
            state["global_batch_size"] = self.global_batch_size.state_dict()
        return state

    def load_state_dict(self, state):
        """Restore a position saved by :meth:`state_dict`, possibly with another number of replicas.

        The next :meth:`set_epoch` for the saved epoch keeps the position and
        the next iteration starts at the first batch not consumed before.
        """
        if not isinstance(state, dict) or "sampler" not in state:
            raise ValueError("state must be a dict from ResumableLoader.state_dict()")
        self.sampler.load_state_dict(state["sampler"])
        gbs_state = state.get("global_batch_size")
        if gbs_state is not None and self.global_batch_size is not None:
            self.global_batch_size.load_state_dict(gbs_state)
        complete = bool(state.get("epoch_complete", False))
        self._reset(complete=complete)
        self._restored = (self.sampler.epoch, complete)

    def __repr__(self):
        return f"ResumableLoader(epoch={self.epoch}, index={self.index}, loader={self.loader!r})"
