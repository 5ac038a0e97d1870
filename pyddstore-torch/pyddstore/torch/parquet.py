"""Parquet (and Petastorm) datasets as map-style sources for DistDataset.

:class:`ParquetSource` presents a Parquet file or a directory of Parquet files
(local path, ``file://``/``s3://``/... URL that pyarrow understands, or any fsspec
URL) as a map-style dataset whose samples are dicts ``column -> value``. It is
built for loading into the distributed store:

* ``len(source)`` comes from the Parquet footers; no data page is read. With a
  ``filter`` the number of kept rows must be counted: that is one pass at
  construction over the filter's columns only (the expression's own columns are
  pruned by Arrow, which also skips row groups by their statistics; a Python
  predicate reads ``filter_columns``, default the selected columns).
* ``source.read_range(start, stop)`` is the bulk protocol DistDataset uses to load
  each rank's contiguous share: one dict ``column -> array`` whose arrays are
  stacked along a leading dimension of ``stop - start`` rows (scalars as 1-D arrays).
  It reads only the row groups that cover ``[start, stop)``, all at once through
  Arrow, then converts each column with numpy, never row by row in Python (except
  for codecs that must decode each value, such as images). The last row group read
  is kept, so consecutive chunks (``DistDataset(chunk_size=...)``) and sequential
  ``source[i]`` do not read a row group twice.
* ``source[i]`` returns one sample: numpy scalars for scalar columns, arrays for
  list/array columns, ``str`` for strings.

Column conversion: numeric and bool columns give numbers; fixed-size list columns,
and list columns whose lists all have the same length, give arrays (nested lists
give multi-dimensional arrays; ``field_shapes`` reshapes); binary columns give uint8
arrays when all values have the same length, or whatever their codec decodes
(``codecs=`` per column, or Petastorm's codecs read from the dataset's metadata).
Null values are an error (filter them out): the store holds one fixed-shape value
per row and field.

Petastorm datasets are recognised by the Unischema in ``_common_metadata``; it is
a pickle and is *never* unpickled (see :mod:`pyddstore.torch.petastorm`).
"""

import os
import re
import threading

import numpy as np

from . import petastorm as _pst

__all__ = ["ParquetSource", "PetastormSource", "CountingFileSystem"]


# ---------------------------------------------------------------- filesystems

def _pa():
    # Imported on use so that `import pyddstore.torch` does not need the parquet extra.
    try:
        import pyarrow  # noqa: F401
        import pyarrow.dataset  # noqa: F401
        import pyarrow.fs  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("ParquetSource needs pyarrow: pip install 'pyddstore-torch[parquet]'") from exc
    return pyarrow


def _as_arrow_fs(filesystem):
    pa = _pa()
    if isinstance(filesystem, pa.fs.FileSystem):
        return filesystem
    try:
        import fsspec
    except ImportError:
        fsspec = None
    if fsspec is not None and isinstance(filesystem, fsspec.AbstractFileSystem):
        return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(filesystem))
    raise TypeError("filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, "
                    f"got {type(filesystem).__name__}")


def _resolve(path_or_url, filesystem):
    """(arrow filesystem, path inside it) for a local path or URL."""
    pa = _pa()
    path = os.fspath(path_or_url)
    if filesystem is not None:
        fs = _as_arrow_fs(filesystem)
        if "://" in path:
            # A URL with an explicit filesystem: the filesystem decides, the path part is what it
            # reads (file:///a/b -> /a/b, s3://bucket/key -> bucket/key).
            path = path.split("://", 1)[1]
        return fs, path
    if "://" not in path:
        return pa.fs.LocalFileSystem(), os.path.abspath(path)
    try:
        return pa.fs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass
    try:
        import fsspec
    except ImportError as exc:
        raise ValueError(f"pyarrow does not handle the URL {path!r} and fsspec is not installed: "
                         "pip install fsspec (plus the fsspec backend for that scheme)") from exc
    fs, inner = fsspec.core.url_to_fs(path)
    return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(fs)), inner


class _CountingFile:
    """A read-only file object that counts the bytes it returns (for pa.PythonFile)."""

    def __init__(self, inner, counter):
        self._f, self._c = inner, counter
        self.closed = False
        self.mode = "rb"

    def read(self, nbytes=-1):
        data = self._f.read() if nbytes is None or nbytes < 0 else self._f.read(nbytes)
        self._c._add(len(data))
        return data

    def seek(self, pos, whence=0):
        return self._f.seek(pos, whence)

    def tell(self):
        return self._f.tell()

    def size(self):
        return self._f.size()

    def readable(self):
        return True

    def seekable(self):
        return True

    def writable(self):
        return False

    def close(self):
        self.closed = True
        self._f.close()


class CountingFileSystem:
    """Wrap a filesystem so that every byte read from its files is counted.

    ``cfs = CountingFileSystem(pyarrow.fs.LocalFileSystem())`` (or any pyarrow/fsspec
    filesystem); pass ``cfs.filesystem`` as ``ParquetSource(filesystem=...)``;
    ``cfs.bytes_read`` / ``cfs.read_calls`` are the totals since the last ``reset()``.
    Read-only: writing through it raises. Use it to check what a rank really reads
    from storage (each rank reading close to its share of the dataset).
    """

    def __init__(self, base):
        pa = _pa()
        self._base = _as_arrow_fs(base)
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.read_calls = 0
        outer = self

        class _Handler(pa.fs.FileSystemHandler):
            # Only what reading needs is delegated; the rest raises, which is what a
            # read-only view should do.
            def get_type_name(self):
                return "counting+" + outer._base.type_name

            def normalize_path(self, path):
                return outer._base.normalize_path(path)

            def get_file_info(self, paths):
                return outer._base.get_file_info(paths)

            def get_file_info_selector(self, selector):
                return outer._base.get_file_info(selector)

            def open_input_stream(self, path):
                return pa.PythonFile(_CountingFile(outer._base.open_input_file(path), outer), mode="r")

            def open_input_file(self, path):
                return pa.PythonFile(_CountingFile(outer._base.open_input_file(path), outer), mode="r")

            def _ro(self, *args, **kwargs):
                raise OSError("CountingFileSystem is read-only")

            create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _ro
            delete_file = move = copy_file = open_output_stream = open_append_stream = _ro

            def equals(self, other):
                return self is other

        self.filesystem = pa.fs.PyFileSystem(_Handler())

    def _add(self, n):
        with self._lock:
            self.bytes_read += n
            self.read_calls += 1

    def reset(self):
        """Set the counters back to zero."""
        with self._lock:
            self.bytes_read = 0
            self.read_calls = 0


# ---------------------------------------------------------------- column conversion

def _to_numpy(arr, name):
    """Arrow Array -> numpy array stacked over rows (no codec)."""
    pa = _pa()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if arr.null_count:
        raise ValueError(f"column {name!r} has null values in the rows read; the store needs a value in "
                         f"every row: filter them out, e.g. filter=pyarrow.compute.field({name!r}).is_valid()")
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        n = len(arr)
        if pa.types.is_fixed_size_list(t):
            length = t.list_size
        else:
            offs = np.asarray(arr.offsets)
            lens = np.diff(offs)
            if n and not np.all(lens == lens[0]):
                raise ValueError(f"list column {name!r} has lists of different lengths "
                                 f"({int(lens.min())}..{int(lens.max())}); the store needs one shape per "
                                 "field: pad them when writing, or select/filter them out")
            length = int(lens[0]) if n else 0
        inner = _to_numpy(arr.flatten(), name)
        return inner.reshape((n, length) + inner.shape[1:])
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _pst.decode_column(arr, "raw", name=name)
    if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_union(t):
        raise TypeError(f"column {name!r} has nested type {t}; select its scalar/list children "
                        "when writing, or leave the column out (columns=...)")
    if pa.types.is_decimal(t):
        raise TypeError(f"column {name!r} is a decimal; cast it to float or integer when writing, "
                        "or leave it out (columns=...)")
    return arr.to_numpy(zero_copy_only=False)


class _Column:
    """How one selected column is turned into numpy: codec, dtype, per-row shape."""

    __slots__ = ("name", "codec", "dtype", "shape")

    def __init__(self, name, codec, dtype, shape):
        self.name, self.codec, self.dtype, self.shape = name, codec, dtype, shape

    def convert(self, arr):
        pa = _pa()
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        n = len(arr)
        if self.codec is None:
            out = _to_numpy(arr, self.name)
            if self.dtype is not None and out.dtype != self.dtype:
                out = out.astype(self.dtype)
        else:
            out = _pst.decode_column(arr, self.codec, name=self.name, dtype=self.dtype, shape=self.shape)
        if self.shape is not None and all(s is not None for s in self.shape) \
                and out.shape[1:] != tuple(self.shape):
            want = int(np.prod(self.shape, dtype=np.int64))
            have = int(np.prod(out.shape[1:], dtype=np.int64))
            if want != have and n:
                raise ValueError(f"column {self.name!r}: a value has {have} elements {out.shape[1:]}, "
                                 f"field shape {tuple(self.shape)} needs {want}")
            out = out.reshape((n,) + tuple(self.shape))
        return out


# ---------------------------------------------------------------- the source

def _is_expression(x):
    pa = _pa()
    return isinstance(x, pa.compute.Expression)


def _parse_filter(filt):
    """(arrow expression or None, list of predicates) from the filter= argument."""
    pa = _pa()
    if filt is None:
        return None, []
    if _is_expression(filt):
        return filt, []
    if callable(filt):
        return None, [filt]
    if isinstance(filt, (list, tuple)) and filt and all(_is_expression(f) or callable(f) for f in filt):
        exprs = [f for f in filt if _is_expression(f)]
        preds = [f for f in filt if not _is_expression(f)]
        expr = None
        for e in exprs:
            expr = e if expr is None else (expr & e)
        return expr, preds
    if isinstance(filt, (list, tuple)):
        try:  # pyarrow.parquet's DNF form: [("col", ">", 3), ...] or [[...], [...]]
            return pa.parquet.filters_to_expression(filt), []
        except (TypeError, ValueError) as exc:
            raise ValueError(f"filter {filt!r} is not a pyarrow expression, a predicate, a list of "
                             f"them, nor pyarrow.parquet's DNF filter list: {exc}") from exc
    raise TypeError("filter must be a pyarrow.compute.Expression, a predicate row_dict -> bool, a list "
                    f"of them, or a DNF list of (column, op, value) tuples; got {type(filt).__name__}")


def _select(names, columns):
    """Petastorm-style schema_fields selection: exact names or regexes (full match)."""
    if columns is None:
        return list(names)
    if isinstance(columns, (str, bytes)) or not hasattr(columns, "__iter__"):
        raise TypeError("columns must be a list of column names or regular expressions, e.g. "
                        f"['id', 'img_.*'], got {columns!r}")
    chosen = []
    for entry in columns:
        if isinstance(entry, re.Pattern):
            pattern, exact = entry, None
        elif isinstance(entry, str):
            pattern, exact = None, entry
        else:
            raise TypeError(f"columns entries must be str or re.Pattern, got {entry!r}")
        if exact is not None and exact in names:
            hits = [exact]
        else:
            rx = pattern if pattern is not None else re.compile(exact)
            hits = [n for n in names if rx.fullmatch(n)]
        if not hits:
            raise ValueError(f"columns entry {getattr(entry, 'pattern', entry)!r} matches no column; "
                             f"the dataset has {list(names)}")
        for h in hits:
            if h not in chosen:
                chosen.append(h)
    return chosen


def column_type(source, column):
    """The Arrow type of `column` in the files of ParquetSource `source` (their
    physical schema, before any decoding), for tools that check columns first."""
    return source._schema.field(column).type


class ParquetSource:
    """A Parquet file or directory as a map-style dataset of dict samples.

    Parameters:

    * path_or_url: a file or a directory (all files below it whose names do not start
      with ``_`` or ``.``, in path order; Spark/Petastorm ``part-*`` files sort in
      write order), as a local path, a URL pyarrow understands (``file://``,
      ``s3://``, ``gs://``, ``hdfs://``) or any fsspec URL (``memory://``, ...).
    * columns: the columns to load, by name or regular expression (full match), as
      Petastorm's ``schema_fields``; default all columns (Petastorm datasets: all
      Unischema fields). Exact names keep the order given.
    * filter: rows to keep, applied while loading: a ``pyarrow.compute.Expression``
      (e.g. ``pc.field("label") < 5``), pyarrow.parquet's DNF list
      (``[("label", "<", 5)]``), a predicate ``row_dict -> bool`` (on decoded values),
      or a list of expressions and predicates that must all hold. Counting the kept
      rows for ``len`` takes one pass at construction (see the module doc);
      predicates run in Python, once per row.
    * filter_columns: the columns a predicate looks at (default: the selected
      columns); it may name columns that are not selected.
    * field_shapes: ``{column: shape}`` reshapes each value (e.g. a flat list of 784
      floats to ``(28, 28)``; a uniform binary column to its array shape).
    * codecs: ``{column: codec}`` decodes binary columns: 'ndarray'
      (``np.save`` bytes), 'compressed_ndarray' (``np.savez_compressed``), 'png',
      'jpeg', 'raw' (bytes as uint8) or a callable ``bytes -> np.ndarray``. Overrides
      what Petastorm's metadata says.
    * dtypes: ``{column: dtype}`` casts decoded values (e.g. int16 to int32 where the
      store does not hold int16, float64 to float32 to halve memory).
    * petastorm: None (default) detects a Petastorm Unischema and decodes its codecs;
      True requires one; False reads the columns as plain Parquet.
    * filesystem: a ``pyarrow.fs.FileSystem`` or fsspec filesystem to read through
      (e.g. :class:`CountingFileSystem`); then ``path_or_url`` is a path in it.

    Samples are dicts ``column -> value``. See :meth:`read_range` for bulk reads.
    ``stats()`` reports what was read.
    """

    def __init__(self, path_or_url, *, columns=None, filter=None, filter_columns=None, field_shapes=None,
                 codecs=None, dtypes=None, petastorm=None, filesystem=None):
        pa = _pa()
        if not isinstance(path_or_url, (str, os.PathLike)):
            raise TypeError(f"path_or_url must be a path or URL string, got {type(path_or_url).__name__}")
        if field_shapes is not None and not isinstance(field_shapes, dict):
            raise TypeError("field_shapes must be a dict {column: shape tuple}")
        if codecs is not None and not isinstance(codecs, dict):
            raise TypeError("codecs must be a dict {column: codec name or callable}")
        if dtypes is not None and not isinstance(dtypes, dict):
            raise TypeError("dtypes must be a dict {column: numpy dtype}")
        dtypes = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
        if petastorm not in (None, True, False):
            raise TypeError("petastorm must be None (detect), True or False")
        for col, c in (codecs or {}).items():
            if not callable(c) and c not in _pst.CODECS:
                raise ValueError(f"codecs[{col!r}] = {c!r}: use one of {_pst.CODECS} or a callable")
        for col, s in (field_shapes or {}).items():
            if not isinstance(s, (tuple, list)) or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in s):
                raise ValueError(f"field_shapes[{col!r}] = {s!r}: give a tuple of non-negative ints")
        self._expr, self._preds = _parse_filter(filter)
        if filter_columns is not None and not self._preds:
            raise ValueError("filter_columns is for predicate filters; an Expression finds its own columns")

        self.url = os.fspath(path_or_url)
        self._fs, root = _resolve(path_or_url, filesystem)
        self._root = root
        self._paths = self._discover(root)
        fmt = pa.dataset.ParquetFileFormat()
        self._frags = [fmt.make_fragment(p, filesystem=self._fs) for p in self._paths]
        self._schema = self._frags[0].physical_schema

        # Petastorm: the Unischema (if any) says which columns exist and how to decode them.
        self.petastorm_fields = None
        if petastorm is not False:
            blob = self._find_unischema(root)
            if blob is not None:
                self.petastorm_fields = _pst.read_unischema(blob)
            elif petastorm:
                raise ValueError(f"{self.url!r} has no Petastorm Unischema (_common_metadata key "
                                 f"{_pst.UNISCHEMA_METADATA_KEY.decode()}); use petastorm=None/False")
        names = list(self._schema.names)
        pfields = {f.name: f for f in (self.petastorm_fields or [])}
        default = [n for n in names if n in pfields] if pfields else names
        self.columns = _select(names, columns) if columns is not None else default
        for extra in set(field_shapes or {}) | set(codecs or {}) | set(dtypes):
            if extra not in self.columns:
                raise ValueError(f"{extra!r} in field_shapes/codecs/dtypes is not a selected column "
                                 f"{self.columns}")
        self._dtypes = dtypes
        self._cols = []
        for n in self.columns:
            pf = pfields.get(n)
            codec = (codecs or {}).get(n, pf.codec if pf is not None else None)
            dtype = pf.dtype if pf is not None else None
            shape = tuple((field_shapes or {}).get(n)) if n in (field_shapes or {}) else (
                pf.shape if pf is not None and pf.codec not in (None, "scalar") else None)
            if pf is not None and pf.codec == "scalar":
                shape = None
            self._cols.append(_Column(n, codec, dtype, shape))

        if filter_columns is not None:
            self._filter_columns = _select(names, filter_columns)
        else:
            self._filter_columns = list(self.columns)
        self._read_columns = list(self.columns) + [c for c in (self._filter_columns if self._preds else [])
                                                   if c not in self.columns]
        self._filter_cols = {c.name: c for c in self._cols}
        for n in self._filter_columns:
            if n not in self._filter_cols:
                pf = pfields.get(n)
                shape = pf.shape if pf is not None and pf.codec not in (None, "scalar") else None
                self._filter_cols[n] = _Column(n, pf.codec if pf else None, pf.dtype if pf else None, shape)

        # Row groups: (fragment index, row group id, rows), and bytes per (rg, column) from the footers.
        self._rgs = []
        self._rg_bytes = []
        for fi, frag in enumerate(self._frags):
            md = frag.metadata
            if frag.physical_schema.names != self._schema.names:
                raise ValueError(f"{self._paths[fi]} has columns {frag.physical_schema.names}, "
                                 f"{self._paths[0]} has {self._schema.names}: all files must agree")
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                self._rgs.append((fi, g, rg.num_rows))
                per_col = {}
                for j in range(rg.num_columns):
                    c = rg.column(j)
                    top = c.path_in_schema.split(".")[0]
                    per_col[top] = per_col.get(top, 0) + c.total_compressed_size
                self._rg_bytes.append(per_col)
        self._masks = None
        if self._expr is None and not self._preds:
            kept = np.array([r for (_, _, r) in self._rgs], dtype=np.int64)
        else:
            kept = self._count_filtered()
        self._kept = kept
        self._offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        self._lock = threading.Lock()
        self._cache = None  # (rg index, pyarrow Table of its kept rows, read columns)
        self._stats = {"row_groups_read": 0, "rows_read": 0, "bytes_planned": 0, "read_calls": 0}
        self._spec = None

    # ------------------------------------------------------------ discovery

    def _discover(self, root):
        pa = _pa()
        info = self._fs.get_file_info(root)
        if info.type == pa.fs.FileType.File:
            return [root]
        if info.type != pa.fs.FileType.Directory:
            raise FileNotFoundError(f"no Parquet file or directory at {self.url!r}")
        sel = pa.fs.FileSelector(root, recursive=True)
        base = root.rstrip("/")
        paths = []
        for fi in self._fs.get_file_info(sel):
            if fi.type != pa.fs.FileType.File:
                continue
            rel = fi.path[len(base):].lstrip("/") if fi.path.startswith(base) else fi.base_name
            # Spark's _SUCCESS/_metadata/_common_metadata and .crc files are not data.
            if any(part.startswith(("_", ".")) for part in rel.split("/")):
                continue
            paths.append(fi.path)
        if not paths:
            raise FileNotFoundError(f"{self.url!r} holds no data files (names starting with _ or . are skipped)")
        return sorted(paths)

    def _find_unischema(self, root):
        pa = _pa()
        key = _pst.UNISCHEMA_METADATA_KEY
        info = self._fs.get_file_info(root)
        d = root if info.type == pa.fs.FileType.Directory else root.rsplit("/", 1)[0]
        for name in ("_common_metadata", "_metadata"):
            p = f"{d.rstrip('/')}/{name}"
            if self._fs.get_file_info(p).type == pa.fs.FileType.File:
                with self._fs.open_input_file(p) as f:
                    md = pa.parquet.read_schema(f).metadata or {}
                if key in md:
                    return md[key]
        md = self._schema.metadata or {}
        return md.get(key)

    # ------------------------------------------------------------ filtering

    def _predicate_mask(self, table):
        cols = {n: self._filter_cols[n].convert(table.column(n)) for n in self._filter_columns}
        n = table.num_rows
        mask = np.ones(n, dtype=bool)
        for i in range(n):
            row = {k: (v[i].item() if v.dtype == object else v[i]) for k, v in cols.items()}
            for p in self._preds:
                if not p(row):
                    mask[i] = False
                    break
        return mask

    def _count_filtered(self):
        kept = np.zeros(len(self._rgs), dtype=np.int64)
        masks = [] if self._preds else None
        for k, (fi, g, _rows) in enumerate(self._rgs):
            frag = self._frags[fi].subset(row_group_ids=[g])
            if not self._preds:
                kept[k] = frag.count_rows(filter=self._expr)
                continue
            t = frag.to_table(schema=self._schema, columns=self._filter_columns, filter=self._expr)
            m = self._predicate_mask(t)
            kept[k] = int(m.sum())
            masks.append(None if m.all() else (np.packbits(m), len(m)))
        self._masks = masks
        return kept

    # ------------------------------------------------------------ reading

    def __len__(self):
        return int(self._offsets[-1])

    def _read_rgs(self, ks):
        """pyarrow Table of the kept rows of row groups ks (consecutive global indices)."""
        pa = _pa()
        parts = []
        k = 0
        while k < len(ks):
            fi = self._rgs[ks[k]][0]
            j = k
            while j < len(ks) and self._rgs[ks[j]][0] == fi:
                j += 1
            group = ks[k:j]
            frag = self._frags[fi].subset(row_group_ids=[self._rgs[x][1] for x in group])
            t = frag.to_table(schema=self._schema, columns=self._read_columns, filter=self._expr)
            if self._masks is not None:
                ms = []
                for x in group:
                    m = self._masks[x]
                    ms.append(np.ones(int(self._kept[x]), dtype=bool) if m is None
                              else np.unpackbits(m[0], count=m[1]).astype(bool))
                t = t.filter(pa.array(np.concatenate(ms)))
            parts.append(t)
            with self._lock:
                self._stats["row_groups_read"] += len(group)
                self._stats["read_calls"] += 1
                self._stats["rows_read"] += sum(self._rgs[x][2] for x in group)
                self._stats["bytes_planned"] += sum(self._rg_bytes[x].get(c, 0)
                                                    for x in group for c in set(self._read_columns))
            k = j
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _convert(self, table):
        out = {}
        for c in self._cols:
            v = c.convert(table.column(c.name))
            want = self._dtypes.get(c.name)
            if want is not None and v.dtype != want:
                if not np.can_cast(v.dtype, want, "same_kind") and not (v.dtype.kind in "iub" and want.kind in "iuf"):
                    raise TypeError(f"column {c.name!r}: cannot cast {v.dtype} to {want}")
                v = v.astype(want)
            out[c.name] = v
        return out

    def read_range(self, start, stop):
        """Rows ``[start, stop)`` as one dict ``column -> array`` whose arrays have a
        leading dimension of ``stop - start`` (scalar columns: 1-D arrays).

        Reads only the row groups that overlap the range, in one Arrow read per file,
        and keeps the last one for the next call. This is the bulk protocol DistDataset
        uses to load a rank's contiguous share.
        """
        n = len(self)
        if isinstance(start, bool) or isinstance(stop, bool) or not all(
                isinstance(v, (int, np.integer)) for v in (start, stop)):
            raise TypeError(f"read_range needs integer start and stop, got {start!r}, {stop!r}")
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= n:
            raise IndexError(f"read_range({start}, {stop}) is outside [0, {n}] or has stop < start")
        if start == stop:
            return self._empty()
        off = self._offsets
        first = int(np.searchsorted(off, start, side="right")) - 1
        last = int(np.searchsorted(off, stop, side="left"))  # exclusive
        ks = [k for k in range(first, last) if self._kept[k] > 0]
        with self._lock:
            cache = self._cache
        parts = []
        todo = ks
        if cache is not None and ks and ks[0] == cache[0]:
            parts.append(cache[1])
            todo = ks[1:]
        if todo:
            parts.append(self._read_rgs(todo))
        pa = _pa()
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        base = int(off[ks[0]])
        out = self._convert(table.slice(start - base, stop - start))
        lk = ks[-1]
        if stop < off[lk + 1]:  # the last row group goes on: keep it for the next call
            lo = int(off[lk] - base)
            with self._lock:
                self._cache = (lk, table.slice(lo, int(self._kept[lk])))
        return out

    def __getitem__(self, index):
        """Sample ``index`` as a dict: numpy scalars for scalar columns, arrays for
        array columns, str for strings. Negative indices count from the end."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"ParquetSource indices are integers, got {type(index).__name__}")
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} rows")
        return {k: v[0] for k, v in self.read_range(i, i + 1).items()}

    def _empty(self):
        spec = self.field_info()
        return {k: np.empty((0,) + shape, dtype=dtype) for k, (dtype, shape) in spec.items()}

    def field_info(self):
        """``{column: (numpy dtype, per-row shape)}`` of the samples (reads the first row
        once when the metadata alone cannot tell; an empty source gives what the
        metadata says, with unknown list lengths as 0)."""
        if self._spec is not None:
            return self._spec
        if len(self):
            one = self.read_range(0, 1)
            spec = {k: (v.dtype, v.shape[1:]) for k, v in one.items()}
        else:
            spec = {}
            pa = _pa()
            for c in self._cols:
                if c.shape is not None and all(s is not None for s in c.shape):
                    spec[c.name] = (np.dtype(c.dtype or np.uint8), tuple(c.shape))
                else:
                    t = self._schema.field(c.name).type
                    try:
                        dt = np.dtype(c.dtype) if c.dtype is not None else np.dtype(t.to_pandas_dtype())
                    except (NotImplementedError, TypeError):
                        dt = np.dtype(object)
                    spec[c.name] = (dt, (0,) if (pa.types.is_list(t) or pa.types.is_binary(t)) else ())
        self._spec = spec
        return spec

    @property
    def files(self):
        """The data files read, in row order."""
        return list(self._paths)

    @property
    def num_row_groups(self):
        """Number of row groups over all files."""
        return len(self._rgs)

    def row_group_offsets(self):
        """int64 array: first (kept) row of each row group, plus the total at the end."""
        return self._offsets.copy()

    def stats(self):
        """What reads did so far: row_groups_read, rows_read (before filtering), read_calls,
        bytes_planned (compressed column-chunk bytes of the row groups and columns read,
        from the footers)."""
        with self._lock:
            return dict(self._stats)

    def reset_stats(self):
        """Set the counters of stats() back to zero."""
        with self._lock:
            for k in self._stats:
                self._stats[k] = 0

    def total_bytes(self, columns=None):
        """Compressed bytes of the given columns (default: the read columns) over all row groups."""
        cols = set(columns or self._read_columns)
        return sum(b.get(c, 0) for b in self._rg_bytes for c in cols)

    def __repr__(self):
        return (f"ParquetSource({self.url!r}, rows={len(self)}, files={len(self._paths)}, "
                f"row_groups={len(self._rgs)}, columns={self.columns})")


class PetastormSource(ParquetSource):
    """A Petastorm dataset: ParquetSource with ``petastorm=True`` (the Unischema must be
    there, read without unpickling). ``schema_fields`` is Petastorm's name for
    ``columns`` (names or regexes). Values decode to what Petastorm's ``make_reader``
    returns (images through Pillow; see :mod:`pyddstore.torch.petastorm`)."""

    def __init__(self, dataset_url, *, schema_fields=None, columns=None, **kwargs):
        if schema_fields is not None and columns is not None:
            raise ValueError("give schema_fields or columns, not both (they mean the same)")
        kwargs.setdefault("petastorm", True)
        super().__init__(dataset_url, columns=schema_fields if schema_fields is not None else columns, **kwargs)
