"""WindowedDataset (samples made of several stored rows) and row_of()."""

import numpy as np
import torch

from . import _structure as st
from ._loader_protocol import Columns, SampleBatch
from ._errors import WindowRangeError


class WindowedDataset(torch.utils.data.Dataset):
    """Samples made of several stored rows of ds: time windows, clips, sequences.

    ds is a DistDataset or DistDatasetReader. Each stored row is held once,
    however many windows use it: windows are index arithmetic over the store.

    Sample i is rows s, s + dilation, ..., s + (window - 1) * dilation with
    s = starts[i] if starts is given, else s = i * stride. Use starts to keep
    only windows that don't cross a boundary between trajectories or files.
    Each field comes back stacked, shaped (window, *field_shape), in the
    structure of ds's samples (tensor fields as tensors, the others as numpy
    arrays; numbers as 1-D arrays), or as a dict of the selected fields when
    fields is given. decode is not applied (rows come back as stored).

    __getitems__ reads a whole batch of windows with one read_rows() (one
    get_batch() per field), so with method=0 the same collective rule applies
    as for ds. ws[i] uses non-collective get()s.

    Implements ThreadDataLoader's contract (_loader_protocol.LoaderDataset)
    for the dataset it reads: its ordered_reads() are ds's.
    """

    def __init__(self, ds, window, stride=1, dilation=1, starts=None, fields=None):
        if not callable(getattr(ds, "read_rows", None)) or not hasattr(ds, "structure"):
            raise TypeError(f"ds must be a DistDataset or DistDatasetReader, not {type(ds).__name__}")
        for label, v in (("window", window), ("stride", stride), ("dilation", dilation)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{label} must be a positive int, got {v!r}")
        self.ds = ds
        self.window, self.stride, self.dilation = int(window), int(stride), int(dilation)
        self.span = (self.window - 1) * self.dilation + 1
        n = len(ds)
        last = n - self.span   # the largest valid start
        if starts is not None:
            s = np.array(starts, dtype=np.int64).reshape(-1) if not isinstance(starts, torch.Tensor) \
                else starts.detach().cpu().numpy().astype(np.int64).reshape(-1)
            bad = np.flatnonzero((s < 0) | (s > last))
            if bad.size:
                raise WindowRangeError(
                    f"starts[{int(bad[0])}] = {int(s[bad[0]])}: a window of {self.window} rows with "
                    f"dilation {self.dilation} spans {self.span} rows, so starts must lie in "
                    f"[0, {last}] for ds of {n} rows")
            self.starts = s
            self._len = int(s.size)
        else:
            self.starts = None
            self._len = 0 if last < 0 else last // self.stride + 1
        self.fields = None if fields is None else list(fields)
        # ds's own check of a fields= selection (KeyError naming unknown ones).
        self._keys = ds._keys(self.fields)
        self._offsets = np.arange(self.window, dtype=np.int64) * self.dilation

    def __len__(self):
        return self._len

    def start_of(self, i):
        """First stored row of window i."""
        i = int(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"window index {i} out of range for {self._len} windows")
        return int(self.starts[i]) if self.starts is not None else i * self.stride

    def rows_of(self, i):
        """Stored rows of window i, in order."""
        return self.start_of(i) + self._offsets

    def _sample(self, vals, j):
        values = [vals[k][j] for k in self._keys]
        if self.fields is not None:
            return dict(zip(self._keys, values))
        return st.build(self.ds.structure, values)

    @staticmethod
    def _as_tensor(v):
        return v if isinstance(v, torch.Tensor) else torch.from_numpy(v)

    def __getitem__(self, i):
        """Window i (not collective: one get() per run of consecutive rows per field)."""
        rows = self.rows_of(i)
        vals = self.ds._read_rows_apart(rows, self._keys)
        return self._sample({k: v[None] for k, v in vals.items()}, 0)

    def __getitems__(self, indices):
        """A batch of windows with one read_rows() (one get_batch() per field)."""
        idx = list(indices)
        rows = np.concatenate([self.rows_of(i) for i in idx]) if idx else np.empty(0, np.int64)
        flat = self.ds.read_rows(rows, fields=self._keys)
        b = len(idx)
        vals = {k: v.reshape((b, self.window) + tuple(v.shape[1:])) for k, v in flat.items()}
        samples = [self._sample(vals, j) for j in range(b)]
        if any(self.ds.structure.by_key[k].record is not None for k in self._keys):
            return SampleBatch(samples)  # records: no tensor columns
        if self.fields is not None:
            return SampleBatch(samples, Columns(None, {k: self._as_tensor(vals[k]) for k in self._keys}))
        return SampleBatch(samples, Columns(self.ds.structure,
                                            [self._as_tensor(vals[f.key]) for f in self.ds.structure.fields]))

    # ---- the loader contract (_loader_protocol.LoaderDataset) -----------------
    def ordered_reads(self):
        """ds's dataset whose batched reads are collective, or None (read_rows() reads ds)."""
        return self.ds.ordered_reads()

    def read_batch(self, indices, collate_fn, out=None):
        """None: windows are read with __getitems__ (which hands over its columns)."""
        return None


def row_of(concat, source, index):
    """The row of sample `index` of source `source` in ConcatDataset `concat`.

    That is its index in a DistDataset built over concat. source is one of
    concat.datasets (the object) or its position in concat.datasets; index
    may be negative (from the end of that source). Use it to map
    (file, trajectory, step) to a row when several sources share one store.
    """
    if not isinstance(concat, torch.utils.data.ConcatDataset):
        raise TypeError(f"concat must be a torch.utils.data.ConcatDataset, not {type(concat).__name__}")
    dsets = concat.datasets
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        pos = int(source)
        if pos < 0:
            pos += len(dsets)
        if not 0 <= pos < len(dsets):
            raise IndexError(f"source position {source} out of range for {len(dsets)} sources")
    else:
        hits = [p for p, d in enumerate(dsets) if d is source]
        if not hits:
            raise ValueError("source is not one of concat.datasets (compared by identity); pass the "
                             "dataset object itself or its position")
        if len(hits) > 1:
            raise ValueError(f"source appears {len(hits)} times in concat.datasets (positions {hits}); "
                             "pass its position instead")
        pos = hits[0]
    n = len(dsets[pos])
    i = int(index)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"index {index} out of range for source {pos} of {n} samples")
    first = 0 if pos == 0 else concat.cumulative_sizes[pos - 1]
    return first + i

