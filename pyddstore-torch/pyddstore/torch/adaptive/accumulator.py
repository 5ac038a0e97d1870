"""AdaptDL's Accumulator: sums of statistics over all replicas."""

import collections.abc
import contextlib

import torch.distributed as dist


# ----------------------------------------------------------- accumulator
class Accumulator(collections.abc.MutableMapping):
    """AdaptDL's ``Accumulator``: sums of statistics over all replicas.

    **Accumulation mode** (the default): ``acc["loss"] += x``, ``acc["n"] -= 1``,
    ``acc.update(loss=x)``, ``acc.subtract(n=1)``, ``acc += {"loss": x}`` and
    ``acc -= {...}`` add to (subtract from) this replica's pending updates;
    every replica may make different ones. Reads see an empty dict
    (``len(acc) == 0``, ``"loss" not in acc``, ``acc.get("loss")`` is None);
    assigning a value (``acc["loss"] = x``) raises ``TypeError``.

    **Synchronized mode**, inside ``with acc.synchronized():`` (collective over
    torch.distributed, or this process alone without it): every replica's
    pending updates are summed into the values, and ``acc`` is a dict with
    the same contents on every replica (writes there must be the same on
    every replica too). ``update``/``subtract``/``+=``/``-=`` stay additive.
    ``Accumulator(*args, **kwargs)``: initial values, as ``dict()`` takes
    them (the same on every replica; not summed over replicas).
    """

    def __init__(self, *args, **kwargs):
        self._values = dict(*args, **kwargs)  # synchronized values, the same on every replica
        self._updates = {}                     # this replica's pending updates
        self._synced = False

    def __getitem__(self, key):
        """The value inside ``synchronized()``; outside, a placeholder that only ``+=``/``-=`` accept."""
        if self._synced:
            return self._values[key]
        return _PendingUpdate(self, key)

    def __setitem__(self, key, value):
        if self._synced:
            self._values[key] = value
            return
        if not isinstance(value, _PendingUpdate):
            raise TypeError(f"Accumulator[{key!r}] = ...: outside synchronized() an Accumulator only "
                            f"adds (acc[key] += x, acc.update(...), acc.subtract(...)); assign "
                            f"inside `with acc.synchronized():`")
        if value.accum is not self or value.key != key:
            # As AdaptDL: the update of another accumulator or key (acc[a] = acc[b] + x).
            raise ValueError(f"Accumulator[{key!r}] = ...: an update of "
                             f"{'another Accumulator' if value.accum is not self else repr(value.key)}"
                             f"; add to a key with acc[key] += x")
        self._updates[key] = self._updates.get(key, 0) + value.delta

    def __delitem__(self, key):
        if not self._synced:
            raise KeyError(key)
        del self._values[key]

    def __iter__(self):
        return iter(self._values if self._synced else ())

    def __len__(self):
        return len(self._values) if self._synced else 0

    def __contains__(self, key):
        return self._synced and key in self._values

    def get(self, key, default=None):
        """``acc[key]`` inside ``synchronized()`` if present, else ``default`` (always outside)."""
        return self._values.get(key, default) if self._synced else default

    def __repr__(self):
        return repr(self._values if self._synced else {})

    def update(self, *args, **kwargs):
        """Add the given values (a mapping, pairs or keywords, as ``dict()`` takes) to the accumulated ones."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = self.get(key, 0) + value if self._synced else self[key] + value

    def subtract(self, *args, **kwargs):
        """Subtract the given values (as :meth:`update` takes them) from the accumulated ones."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = self.get(key, 0) - value if self._synced else self[key] - value

    def __iadd__(self, other):
        """``acc += {key: value, ...}``: :meth:`update`."""
        self.update(other)
        return self

    def __isub__(self, other):
        """``acc -= {key: value, ...}``: :meth:`subtract`."""
        self.subtract(other)
        return self

    @contextlib.contextmanager
    def synchronized(self):
        """Sum every replica's pending updates into the values; read them inside this context.

        Collective: every replica enters it at the same point. Entering it
        again inside it does nothing more.
        """
        if self._synced:
            yield self
            return
        updates, self._updates = self._updates, {}
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, updates)
        else:
            gathered = [updates]
        for upd in gathered:                  # rank order: the same sums on every replica
            for key, value in upd.items():
                self._values[key] = self._values[key] + value if key in self._values else value
        self._synced = True
        try:
            yield self
        finally:
            self._synced = False


class _PendingUpdate:
    """What ``acc[key]`` gives outside ``synchronized()``: collects ``+ x``/``- x`` for ``acc[key] = ...``."""

    __slots__ = ("accum", "key", "delta")

    def __init__(self, accum, key):
        self.accum, self.key, self.delta = accum, key, 0

    def __add__(self, value):
        if isinstance(value, _PendingUpdate):
            raise TypeError("an Accumulator's pending update cannot be added to another")
        self.delta = self.delta + value
        return self

    def __sub__(self, value):
        if isinstance(value, _PendingUpdate):
            raise TypeError("an Accumulator's pending update cannot be subtracted from another")
        self.delta = self.delta - value
        return self

    def __repr__(self):
        return f"<pending Accumulator update of {self.key!r}: {self.delta!r}>"
