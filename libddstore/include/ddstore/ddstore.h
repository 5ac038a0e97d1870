/*
 * libddstore: a distributed in-memory data store for data-parallel training.
 *
 * Each MPI rank holds a shard of every variable in memory; any rank of the
 * store's group (and, with method 2, a process of another job) reads any row
 * by one-sided remote memory access.
 *
 * Conventions (apply to every function below unless its comment says
 * otherwise):
 *  - Fallible calls return int: DDS_OK (0) on success or a negative DDS_E*
 *    code. dds_last_error() then holds a message with detail for the calling
 *    thread; dds_strerror() gives the static text of a code.
 *  - Out-parameters come first. An object obtained through `T **out` is owned
 *    by the caller and given back with its matching free/close, which accepts
 *    NULL.
 *  - Options and info structs start with a `size` field (set it to
 *    sizeof(struct), or call the matching *_init()); they only grow at the end.
 *  - "Collective" means every rank of the communicator passed to dds_create()
 *    calls the function, in the same order relative to the other collective
 *    calls. A collective call that fails on one rank fails on every rank with
 *    DDS_EPEER (or the local code on the rank that failed), so a bad argument
 *    never leaves ranks waiting for each other.
 *  - "Group-collective" means every rank of the caller's group (see width)
 *    calls it the same number of times, from one thread at a time.
 *  - Collective tags and bounded waits (stores from dds_create()): every
 *    group-collective and collective call begins with one agreement over
 *    the group that carries the kind of call each rank is in (read, i.e.
 *    dds_get_batch/dds_get_ranges/dds_read_fail where reads are collective;
 *    epoch_begin; epoch_end; sync; add/init; free), and every wait in it is
 *    bounded by DDSTORE_COLLECTIVE_TIMEOUT_S seconds (default 1800; 0 waits
 *    for ever). So out-of-step ranks never wait for ever:
 *      - ranks in different calls (one rank reading a batch more than the
 *        others while they are in epoch_end, say) all fail with
 *        DDS_EMISMATCH, a message naming each rank, its call and its count
 *        of collective reads; neither call takes effect (the read's data is
 *        complete, but reported as failed);
 *      - except dds_free(): a rank in it that meets reads of other ranks
 *        takes part in them (with nothing to read) until they call
 *        dds_free() too, so unequal numbers of reads before dds_free()
 *        simply work;
 *      - a rank whose peers make no collective call of the store within the
 *        timeout (they left the loop, or wait elsewhere) fails with
 *        DDS_ETIMEDOUT; the store is then unusable (later calls fail with
 *        DDS_ESTATE) and dds_free() releases only what needs no peer.
 *    The gets of a collective read itself complete with a flush, so where
 *    the MPI serves gets only while the target is inside MPI, a target that
 *    has stopped reading and never enters MPI again can still hold them up.
 *    Setting DDSTORE_RMA_BOUNDED_GETS to 1 bounds them too (request-based
 *    gets polled within the timeout); that is off by default because Open
 *    MPI 4.1 osc ucx over sm and cma returned wrong rows that way in tests.
 *    Across groups (width < size) only the group's own ranks are checked.
 *  - Thread safety: functions documented as thread-safe may be called from
 *    several threads on the same store at once (the MPI library must then be
 *    initialised with MPI_THREAD_MULTIPLE for method 0). Others need external
 *    serialisation per store.
 *  - Row indices and counts are int64_t; a row is `row_bytes` opaque bytes.
 *  - MPI communicators cross this ABI as Fortran handles (MPI_Comm_c2f(),
 *    or comm.py2f() in mpi4py), so callers need no MPI types. The library
 *    never calls MPI_Init or MPI_Finalize: MPI must be initialised before
 *    dds_create() and every store must be freed before MPI_Finalize.
 */
#ifndef DDSTORE_DDSTORE_H
#define DDSTORE_DDSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "ddstore/ddstore_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI major version: bumped on any incompatible change; the shared library's
 * soname carries it (libddstore.so.DDS_ABI_MAJOR). */
#define DDS_ABI_MAJOR 1

/* Release version of this header, MAJOR.MINOR.PATCH (libddstore/VERSION; the
 * build refuses to configure when they differ), for compile-time tests such
 * as `#if DDS_VERSION_MAJOR > 0 || DDS_VERSION_MINOR >= 2`. The library a
 * program runs with may be a later release: dds_version() tells which. Not
 * part of the ABI record (they change every release). */
#define DDS_VERSION_MAJOR 0
#define DDS_VERSION_MINOR 1
#define DDS_VERSION_PATCH 0

/* Longest variable name in bytes, not counting the terminating NUL. */
#define DDS_NAME_MAX 255

/* Error codes. Values are stable across releases: never renumbered, only
 * appended. */
enum dds_error {
    DDS_OK = 0,
    DDS_EINVAL = -1,     /* invalid argument (NULL pointer, bad name, bad size) */
    DDS_ENOMEM = -2,     /* out of memory */
    DDS_ENOENT = -3,     /* unknown variable */
    DDS_EEXIST = -4,     /* variable name already used */
    DDS_ERANGE = -5,     /* rows out of range */
    DDS_EMPI = -6,       /* an MPI call failed (message holds MPI's text) */
    DDS_EFABRIC = -7,    /* a libfabric call failed (message holds its text) */
    DDS_ENOTSUP = -8,    /* method/provider/feature not available in this build or here */
    DDS_ESTATE = -9,     /* call not valid in the store's current state (freed, ...) */
    DDS_EPEER = -10,     /* a collective call failed on another rank */
    DDS_ETIMEDOUT = -11, /* waited too long (handshake, remote peer) */
    DDS_EIO = -12,       /* file system error (handshake directory) */
    DDS_EPROTO = -13,    /* corrupt, truncated or foreign handshake data */
    DDS_EOVERFLOW = -14, /* a size does not fit (rows x row_bytes beyond 2^63) */
    DDS_EMISMATCH = -15, /* ranks disagree on a value that must agree */
    DDS_EAGAIN = -16     /* versioned rows changed during every read attempt; try again later */
};

/* Store methods. */
enum dds_method {
    DDS_METHOD_DEFAULT = -1, /* DDSTORE_METHOD from the environment, else 0 */
    DDS_METHOD_MPI = 0,      /* MPI one-sided (RMA) */
    DDS_METHOD_FABRIC = 1,   /* libfabric fi_read, addresses exchanged over MPI */
    DDS_METHOD_FILE = 2      /* libfabric fi_read, file handshake; readers from other jobs */
};

/* Dtype tags. The library moves bytes and never interprets a tag; it stores
 * it and checks that all ranks agree on it. Values are stable. */
enum dds_dtype {
    DDS_DTYPE_BYTES = 0,
    DDS_DTYPE_BOOL = 1,
    DDS_DTYPE_UINT8 = 2,
    DDS_DTYPE_INT8 = 3,
    DDS_DTYPE_INT16 = 4,
    DDS_DTYPE_UINT16 = 5,
    DDS_DTYPE_INT32 = 6,
    DDS_DTYPE_UINT32 = 7,
    DDS_DTYPE_INT64 = 8,
    DDS_DTYPE_UINT64 = 9,
    DDS_DTYPE_FLOAT16 = 10,
    DDS_DTYPE_FLOAT32 = 11,
    DDS_DTYPE_FLOAT64 = 12,
    DDS_DTYPE_BFLOAT16 = 13
};

/* Opaque store handle. */
typedef struct dds_store dds_store;

/* Options for dds_create(). Initialise with dds_options_init(). */
typedef struct dds_options {
    uint32_t size;             /* sizeof(dds_options) */
    int32_t method;            /* enum dds_method; DDS_METHOD_DEFAULT by default */
    int32_t width;             /* ranks per group; 0 (default): the whole communicator */
    const char *fabric;        /* libfabric provider; NULL: DDSTORE_FABRIC, else automatic */
    const char *handshake_dir; /* method 2; NULL: DDSTORE_HANDSHAKE_DIR, else ./ddstore_hs */
    /* Since ABI 1.2: */
    const char *nic_map;       /* methods 1 and 2: which NIC (libfabric domain) each rank opens,
                                  by its allowed CPUs: "iface=cpus;iface=cpus", e.g.
                                  "hsn0=0-15,64-79;hsn1=16-31,80-95" (the original DDStore's
                                  DDSTORE_NIC_MAP format; a name is a domain, or a network
                                  interface of one). NULL or "": DDSTORE_NIC_MAP, else the
                                  node's topology. DDSTORE_FABRIC_DOMAIN overrides both.
                                  Unused by method 0. See dds_store_property "domain". */
    const char *storage_dir;   /* keep shards in files under this directory, mapped into memory
                                  (see "File-backed stores" below); NULL: DDSTORE_STORAGE_DIR,
                                  and NULL or "" there: shards in memory (the default) */
} dds_options;

/* Store description, filled by dds_store_info_get(). */
typedef struct dds_store_info {
    uint32_t size;        /* sizeof(dds_store_info), set by the caller */
    int32_t method;       /* the method in use (never DDS_METHOD_DEFAULT) */
    int32_t rank;         /* rank in the communicator given to dds_create(); -1 for a reader */
    int32_t comm_size;    /* its size; 0 for a reader */
    int32_t group_rank;   /* rank within the group; -1 for a reader */
    int32_t group_size;   /* ranks in the group (the core ranks for a reader) */
    int32_t group_index;  /* which group (rank / width); -1 for a reader */
    int32_t n_groups;     /* comm_size / width; 0 for a reader */
    int32_t is_reader;    /* 1 for a store from dds_join() */
    int32_t node_local;   /* 1 when every rank of the group shares one node (reads are memory copies) */
    int32_t reads_collective; /* 1 when dds_get_batch/dds_get_ranges/dds_read_fail are
                                 group-collective (method 0, group of several ranks not all
                                 in one node's shared memory); 0 otherwise and for a reader,
                                 and then those reads are thread-safe (bindings read them from
                                 several threads exactly where this is 0) */
    /* Since ABI 1.2: */
    int32_t node_shm;     /* 1 when the shards of ranks on one node live in node shared memory:
                             reading a node peer's rows is then a memcpy, for every method
                             (DDSTORE_NODE_LOCAL=0 turns it off); 0 for a reader */
} dds_store_info;

/* Variable description, filled by dds_query(). */
typedef struct dds_var_info {
    uint32_t size;        /* sizeof(dds_var_info), set by the caller */
    uint32_t dtype;       /* dtype tag given to dds_add()/dds_init() */
    int64_t global_rows;  /* rows in the group, all shards together */
    int64_t local_rows;   /* rows held by the calling rank (0 for a reader) */
    int64_t row_bytes;    /* bytes per row */
    int64_t first_row;    /* global index of the calling rank's first row (0 for a reader) */
    int32_t group_size;   /* number of shards (entries of dds_var_offsets() minus one) */
} dds_var_info;

/* Read counters of a store (all variables), filled by dds_stats(). */
typedef struct dds_stats_info {
    uint32_t size;          /* sizeof(dds_stats_info), set by the caller */
    uint64_t read_calls;    /* get/get_batch/get_ranges calls */
    uint64_t rows_local;    /* rows served from this rank's own shard */
    uint64_t rows_remote;   /* rows read from another rank's shard */
    uint64_t bytes_local;
    uint64_t bytes_remote;
    double read_seconds;    /* wall time spent inside read calls */
    /* Since ABI 1.2: */
    uint64_t gather_requests; /* owner-side gather requests sent (one per owner per read) */
    uint64_t gather_bytes;    /* bytes of rows that came back in their replies */
} dds_stats_info;

/* ---- Library ---------------------------------------------------------- */

/* Release version string, e.g. "0.1.0". Static; thread-safe. */
DDS_API const char *dds_version(void);

/* ABI major of the loaded library (DDS_ABI_MAJOR it was built with).
 * Bindings compare it with the value they were written for. Thread-safe. */
DDS_API int dds_abi_version(void);

/* Static text for an error code; never NULL (unknown codes give a generic
 * text). Thread-safe. */
DDS_API const char *dds_strerror(int code);

/* Detail of the last error raised in the calling thread ("" when none).
 * Never NULL; valid until the next call into the library from this thread.
 * Thread-safe (the message is per thread). */
DDS_API const char *dds_last_error(void);

/* 1 when the library was built with libfabric (methods 1 and 2), else 0. */
DDS_API int dds_has_fabric(void);

/* ---- Store ------------------------------------------------------------ */

/* Fill *opts with defaults (method DDS_METHOD_DEFAULT, width 0, NULL
 * strings). Not fallible; opts must not be NULL. */
DDS_API void dds_options_init(dds_options *opts);

/* Create a store over a communicator.
 *   out     receives the store; caller frees it with dds_free().
 *   comm_f  Fortran handle of an MPI communicator (MPI_Comm_c2f). The store
 *           duplicates it, so the caller may free its own after this call.
 *   opts    NULL for defaults.
 * The communicator is split into groups of `width` consecutive ranks; each
 * group holds its own full copy of every variable and reads only from itself.
 * width must divide the communicator's size.
 * Methods 1 and 2 need libfabric (DDS_ENOTSUP otherwise, or when the provider
 * is absent). Method 2 also publishes the group's endpoints in the handshake
 * directory (one sub-directory per group when there are several groups:
 * <dir>/group<k>).
 * Method 0 over a group that is not wholly in node shared memory: a small
 * test window is created and read at create; DDS_ENOTSUP on every rank,
 * naming the settings to use, when the MPI's one-sided communication does
 * not work on this network (Open MPI's default osc/rdma over TCP; use
 * Open MPI's osc/ucx, or method 1 with libfabric's tcp provider, as
 * docs/clusters.rst says). DDS_EINVAL when DDSTORE_COLLECTIVE_TIMEOUT_S or
 * DDSTORE_TEST_NODES is malformed, and (methods 1 and 2) when a rank cannot
 * honour its NIC choice: a malformed opts->nic_map or DDSTORE_NIC_MAP, one
 * that gives none of the rank's CPUs to a NIC or names a NIC the provider
 * does not have, or a DDSTORE_FABRIC_DOMAIN that is not one of its domains
 * (see dds_store_property, "domain").
 * Collective over the communicator. */
DDS_API int dds_create(dds_store **out, int comm_f, const dds_options *opts);

/* Free a store and everything it holds (variables, windows, memory
 * registrations; method 2 withdraws its publication). NULL is accepted.
 * Collective over the communicator for a store from dds_create(); local for
 * a store from dds_join(). First finishes, with nothing to read, the
 * collective reads that other ranks of the group still make (unequal
 * numbers of dds_get_batch calls then simply work). Fails with
 * DDS_EMISMATCH, leaving the store live, when another rank is in another
 * collective call (epoch_end, add...); with DDS_ETIMEDOUT when the others
 * never arrive (see "Collective tags"). After it returns DDS_OK the handle
 * is invalid. */
DDS_API int dds_free(dds_store *store);

/* Describe a store. `info->size` must be set. Local; thread-safe. */
DDS_API int dds_store_info_get(const dds_store *store, dds_store_info *info);

/* Copy the text of store property `key` into buf[0..buflen), NUL-terminated.
 * Keys (more may be added; an unknown key gives DDS_ENOENT):
 *   "transport"  what moves rows between nodes: "mpi" (method 0) or
 *                "libfabric:<provider>" (methods 1 and 2, readers), e.g.
 *                "libfabric:tcp;ofi_rxm".
 *   "read_protocol"  how rows of other nodes are read (see "Read
 *                protocol" below): text starting with "owner-side gather",
 *                "one-sided reads" or "node shared memory".
 *   "domain"     methods 1 and 2, readers: the libfabric domain (NIC) this
 *                process opened, e.g. "cxi2", "mlx5_1", "eth0"; "" for
 *                method 0. On nodes with several NICs each process takes,
 *                in this order: DDSTORE_FABRIC_DOMAIN; the NIC that
 *                dds_options.nic_map (else DDSTORE_NIC_MAP) gives most of
 *                its allowed CPUs; the NIC on the NUMA node holding most of
 *                its allowed CPUs (else the nearest by NUMA distance), from
 *                sysfs. Ties are spread over the node-local ranks.
 *   "domain_choice"  why that domain: text starting with how it was
 *                chosen ("DDSTORE_FABRIC_DOMAIN", "nic_map",
 *                "DDSTORE_NIC_MAP", "only", "topology", "spread"); "" for
 *                method 0.
 *   "storage"    where this rank's shards live: "files" (a storage
 *                directory), "node-shm" (node shared memory, /dev/shm),
 *                "memory" (private memory), "remote" (a reader).
 *   "storage_dir"   the group's storage directory, "" when none.
 *   "storage_state" "memory", "written" (files not saved, or changed since
 *                the last dds_save), "saved", "reopened" (dds_open),
 *                "remote" (a reader).
 *   "shard_bytes"   bytes of this rank's shards, all variables (decimal).
 *   "resident_bytes" how many of them are in memory now (mincore; for
 *                files, what the page cache holds), decimal.
 *   "storage_free_bytes" room left where shards are put: the storage
 *                directory's file system, /dev/shm, or the memory
 *                available; -1 when unknown.
 * DDS_ERANGE when the text does not fit (buf then holds a truncated,
 * NUL-terminated prefix); DDS_EINVAL for a NULL key, or a NULL buf with
 * buflen > 0. Local; thread-safe. Since ABI 1.2 (symbol version
 * DDSTORE_1.2). */
DDS_API int dds_store_property(const dds_store *store, const char *key, char *buf, size_t buflen);

/* ---- File-backed stores ------------------------------------------------ */

/* A store created with a storage directory (dds_options.storage_dir or
 * DDSTORE_STORAGE_DIR) keeps each variable in a file there, v<i>.dds,
 * holding its rows in global row order; each rank writes its own rows into
 * it (dds_add, dds_update: pwrite, with dirty pages written back as it
 * goes) and maps its rows, read-only and shared, as its shard; with node
 * sharing on (DDSTORE_NODE_LOCAL, default) it also maps its node peers'
 * rows, so reading them is a memcpy. Remote ranks read a file-backed shard
 * through the transport like any other (method 0: an MPI window over the
 * mapping; methods 1/2: the mapping registered with libfabric). The
 * kernel's page cache decides what is in memory, so the shards may be
 * larger than memory; the store keeps no other copy. With several groups
 * (width < size) group k uses <storage_dir>/group<k>.
 * The directory is made if needed (mode 0700). dds_create takes an
 * exclusive lock on it (flock() of <dir>/lock, held until dds_free):
 * DDS_ESTATE on every rank when another job writes it or has it reopened;
 * DDS_ENOTSUP when its file system has no flock() (DDSTORE_STORAGE_LOCK=0
 * goes without). It removes an earlier store's files from it, and refuses
 * (DDS_EEXIST) a directory holding files of anything else. dds_add and
 * dds_init fail with DDS_EIO on every rank, naming the numbers, when the
 * directory lacks room for the variable. Versioned variables
 * (dds_init_versioned) cannot be file-backed (DDS_ENOTSUP).
 * dds_free removes the files of a store that was not saved (or was changed
 * after its last dds_save); a saved store's files stay. */

/* Save a file-backed store so that a later job can reopen it: write every
 * rank's rows to disk, record a CRC-32C per 16 MiB block of every shard
 * (<dir>/checksums) and the store's description (<dir>/manifest: format
 * version, variables, dtypes, row counts, per-rank offsets, each file's
 * size and time), both written atomically, the manifest last. A later
 * dds_add/dds_init/dds_update removes the manifest until the next save.
 * Costs one read of every shard (the checksums). DDS_ENOTSUP for a store
 * in memory, DDS_ESTATE for a reopened one. Collective over the
 * communicator. Since ABI 1.2 (symbol version DDSTORE_1.2). */
DDS_API int dds_save(dds_store *store);

/* Reopen the store saved in `storage_dir` over a communicator of any size:
 * every variable is there on return, read-only (dds_add, dds_init and
 * dds_update fail with DDS_ESTATE). No row is read or copied: each rank
 * maps a range of the saved files (the saved layout at the same rank
 * count, else an even split of each variable's rows), so the time does not
 * grow with the data. `opts` as for dds_create (method, width...; NULL for
 * defaults); opts->storage_dir must be NULL or equal storage_dir. Every
 * group of the new store maps the same files.
 * Errors, on every rank, naming the directory and what is wrong:
 * DDS_ENOENT no such directory, or no manifest (never saved, writer did
 * not finish, or written again since); DDS_EPROTO a truncated, corrupt or
 * foreign manifest, another format version, a missing, truncated, foreign
 * or stale variable file (changed after the save: size or time differs),
 * or rows saved in node-local directories (a volume per node) that this
 * job's ranks cannot map from their own node in order; DDS_EMISMATCH when
 * ranks see different saved stores; DDS_ESTATE while another job writes
 * the directory. Holds a shared lock on the directory until dds_free.
 * Collective over the communicator. Since ABI 1.2. */
DDS_API int dds_open(dds_store **out, int comm_f, const char *storage_dir, const dds_options *opts);

/* Check every row of a reopened store against the checksums saved with it
 * (reads every row once, each block on the rank that holds its first
 * row). *bad_blocks (may be NULL) receives the number of blocks that
 * differ, over all ranks; DDS_EPROTO on every rank when some do, naming the
 * first (variable, rows, file), DDS_ESTATE for a store not reopened.
 * Collective over the communicator. Since ABI 1.2. */
DDS_API int dds_verify_saved(dds_store *store, int64_t *bad_blocks);

/* ---- Variables -------------------------------------------------------- */

/* Add a variable holding this rank's `nrows` rows of `row_bytes` bytes read
 * from `data` (copied; the caller keeps ownership of `data`). `data` may be
 * NULL when nrows is 0. Ranks may hold zero rows; the global row space is the
 * concatenation of the group's shards in rank order.
 * Errors (on every rank): DDS_EINVAL for a NULL/empty/too long/non-UTF-8 name,
 * negative nrows, row_bytes < 1; DDS_EEXIST for a name in use; DDS_EMISMATCH
 * when ranks disagree on name, row_bytes or dtype; DDS_EOVERFLOW when
 * nrows x row_bytes does not fit; DDS_ERANGE when the group holds no row at
 * all; DDS_ENOMEM.
 * Collective over the communicator. */
DDS_API int dds_add(dds_store *store, const char *name, const void *data,
                    int64_t nrows, int64_t row_bytes, uint32_t dtype);

/* Allocate a variable of `nrows` zero-filled local rows, to be written with
 * dds_update(). Same rules and errors as dds_add(). Collective. */
DDS_API int dds_init(dds_store *store, const char *name, int64_t nrows,
                     int64_t row_bytes, uint32_t dtype);

/* Write `nrows` rows from `data` into this rank's own shard, starting at
 * local row `offset`. The rows become visible to other ranks after the next
 * dds_sync() or dds_epoch_begin(). Local (not collective); not thread-safe
 * against reads of the same rows. With methods 1 and 2, shard pages are
 * read-only outside this call (no libfabric write, not even shm's direct
 * copy, can change them); this call opens this rank's pages for its copy,
 * serialised with other dds_update() calls of the process. */
DDS_API int dds_update(dds_store *store, const char *name, const void *data,
                       int64_t nrows, int64_t offset);

/* Make every dds_update() before it visible to every reader of the group.
 * Collective over the communicator. */
DDS_API int dds_sync(dds_store *store);

/* Read `nrows` consecutive rows starting at global row `start` into `out`
 * (nrows x row_bytes bytes). The range may span several shards; nrows 0 is
 * valid, also at start == global_rows. The data is complete on return.
 * Not collective: a rank may call it any number of times, inside or outside
 * an epoch (dds_epoch_begin/end). With method 0 and an MPI without
 * asynchronous progress (MPICH), it may wait until the owning rank enters MPI.
 * Thread-safe for methods 1 and 2. */
DDS_API int dds_get(dds_store *store, const char *name, void *out,
                    int64_t start, int64_t nrows);

/* Read rows rows[0..nrows) (global indices, any order, repeats allowed) into
 * `out`: row rows[i] lands at out + i*row_bytes. Rows are grouped by owner
 * and contiguous runs are read as one transfer, under one synchronisation.
 * nrows 0 is valid (rows may then be NULL).
 * Method 0: group-collective (every rank of the group calls it the same
 * number of times; a rank with nothing to read passes nrows 0) where the
 * group spans nodes or node shared memory is off (DDSTORE_NODE_LOCAL 0):
 * the MPIs in use need the target inside MPI to serve a get (measured:
 * Open MPI's osc/pt2pt and osc/ucx over TCP, MPICH without
 * MPICH_ASYNC_PROGRESS). A bad argument on one rank then fails the read on
 * every rank ("rank k: ..."), and unequal numbers of calls give an error
 * (see "Collective tags" above), never a hang. Where the whole group shares
 * node memory every read is a memcpy and needs no collective: a bad
 * argument fails on that rank only, unequal numbers of calls work, and
 * the call is thread-safe (no MPI call: shard memory and atomic counters).
 * Methods 1 and 2: not collective, thread-safe.
 *
 * Read protocol (dds_get_batch, dds_get_ranges; methods 1 and 2 also
 * dds_get): rows of other nodes come either by owner-side gather, one
 * request per owner per call carrying the row list and one reply with the
 * rows packed (served by the owner's progress thread for methods 1 and 2;
 * for method 0 inside the collective read, after its agreement step, by
 * every rank of the group, also one in dds_free() that meets the read, in
 * rounds of at most DDSTORE_GATHER_ROUND_BYTES of rows per rank), or by
 * one-sided reads, one operation per contiguous run of rows. Gather
 * sends one request per node instead of per owner where every rank maps
 * its node peers' shards (node shared memory): a rank of that node serves
 * the whole node's rows, up to 128 KiB of a node per read or round
 * (DDSTORE_GATHER_BY_NODE=0: per owner always). With
 * DDSTORE_GATHER unset or "auto" (the default), a store gathers rows
 * smaller than DDSTORE_GATHER_SWITCH_BYTES and reads larger ones
 * one-sided; by default 32768 where libfabric emulates one-sided reads in
 * software (tcp, shm), 8192 on hardware RDMA, and every size for method 0
 * (its batched reads across nodes are collective anyway); "always" and
 * "never" force it; the settings must be alike on every rank. Store property
 * "read_protocol" says what was chosen; dds_stats counts the requests. */
DDS_API int dds_get_batch(dds_store *store, const char *name, void *out,
                          const int64_t *rows, int64_t nrows);

/* Read the same rows of several variables: rows[i] of variable names[v]
 * into row i of outs[v], for v in [0, nvars), as dds_get_batch() of each
 * variable in turn would (the variables may differ in row size, dtype and
 * distribution; nvars 0 reads nothing). Where a transport gathers at the
 * owner without a collective read (methods 1 and 2), one request per owner
 * carries the rows of every variable the read protocol gathers, so a
 * sample of several fields costs one request and one reply per owner
 * instead of one per field. Where reads are collective (method 0, see
 * dds_get_batch()), a call with nvars >= 1 is one collective read for all
 * the variables: one agreement step and, where reads gather, one exchange
 * whose transfers name their variable (it counts as one read of the
 * collective rule; a bad argument for any variable fails it on every
 * rank, and so does a negative nvars or a NULL names or outs, which
 * count as one read there). Elsewhere it is dds_get_batch() of each
 * variable. Errors: the first variable's error, after every variable was
 * attempted; rows already copied may be partly written. Thread safety as
 * dds_get_batch(). Since ABI 1.2. */
DDS_API int dds_get_batch_vars(dds_store *store, int32_t nvars, const char *const *names,
                               void *const *outs, const int64_t *rows, int64_t nrows);

/* Read `nranges` row ranges [starts[i], starts[i]+counts[i]) one after the
 * other into `out` (the sum of counts x row_bytes bytes). Ranges may span
 * shards, overlap, repeat and have count 0. Same collective rule and thread
 * safety as dds_get_batch(). Used for variable-size samples stored flat. */
DDS_API int dds_get_ranges(dds_store *store, const char *name, void *out,
                           const int64_t *starts, const int64_t *counts,
                           int64_t nranges);

/* Take part in the group's collective read (see dds_get_batch) as a read
 * that failed on this rank with `code` (a negative DDS_E* code; DDS_EINVAL
 * when not negative) and `message`, for a caller that found its arguments
 * bad before calling dds_get_batch: every rank of the group then fails that
 * read with this code and "rank k: message" instead of waiting for this
 * rank or seeing an unrelated error. Where reads are not collective it only
 * records the error here. Returns `code` on this rank (or the agreed error
 * of a lower failing rank). Group-collective like dds_get_batch. Since
 * ABI 1.1 (symbol version DDSTORE_1.1). */
DDS_API int dds_read_fail(dds_store *store, int code, const char *message);

/* Begin / end an access epoch, for code written against the original
 * DDStore whose get() calls sit between them. Calls must pair up and be made
 * the same number of times on every rank. No-ops apart from the
 * synchronisation for methods 1 and 2. A rank in dds_epoch_end() while
 * another is still reading fails with DDS_EMISMATCH on both (see
 * "Collective tags" above).
 * Collective over the group. */
DDS_API int dds_epoch_begin(dds_store *store);
DDS_API int dds_epoch_end(dds_store *store);

/* Describe a variable. `info->size` must be set. Local; thread-safe. */
DDS_API int dds_query(const dds_store *store, const char *name, dds_var_info *info);

/* Fill offsets[0..group_size] with the global index of each shard's first
 * row, offsets[group_size] being global_rows. n is the capacity of
 * `offsets`; DDS_ERANGE when it is smaller than group_size + 1.
 * Local; thread-safe. */
DDS_API int dds_var_offsets(const dds_store *store, const char *name,
                            int64_t *offsets, int64_t n);

/* Number of variables in the store. Local; thread-safe. */
DDS_API int dds_var_count(const dds_store *store, int64_t *count);

/* Copy the name of variable `index` (0-based, in the order added) into
 * buf[0..buflen), NUL-terminated; DDS_ERANGE when it does not fit or index
 * is out of range. Local; thread-safe. */
DDS_API int dds_var_name(const dds_store *store, int64_t index, char *buf, size_t buflen);

/* ---- Receive buffers (methods 1 and 2) --------------------------------- */

/* Register `len` bytes at `buf` once as a destination for reads: later reads
 * into any part of it skip memory registration. Reads into unregistered
 * memory work too (registered per call). The caller keeps ownership of buf
 * and must unregister it before freeing it. No-op (DDS_OK) for method 0.
 * Thread-safe. */
DDS_API int dds_register_recv(dds_store *store, void *buf, size_t len);

/* Undo dds_register_recv(); DDS_ENOENT when buf was not registered (method
 * 1/2). No-op for method 0. Thread-safe. */
DDS_API int dds_unregister_recv(dds_store *store, void *buf);

/* ---- Method 2 readers ---------------------------------------------------- */

/* Join, from a process of another job (no MPI needed), the store published
 * by a method-2 core group in `handshake_dir` (NULL: DDSTORE_HANDSHAKE_DIR,
 * else ./ddstore_hs). n_core is the number of core ranks to expect (<= 0:
 * DDSTORE_N_CORE). Waits up to timeout_s seconds (< 0:
 * DDSTORE_HANDSHAKE_TIMEOUT_S, else 300) for a complete, current
 * publication, then fails with DDS_ETIMEDOUT naming the directory and what
 * is missing. The returned store reads like a method-1 store (dds_get,
 * dds_get_batch, dds_get_ranges, dds_query...) and is freed with dds_free()
 * (local). Variables added by the core group later are found by
 * dds_attach(). The reader opens the NIC (libfabric domain) that
 * DDSTORE_FABRIC_DOMAIN, else DDSTORE_NIC_MAP, else the node's topology
 * gives it, as a core rank does (dds_store_property, "domain"). Local. */
DDS_API int dds_join(dds_store **out, const char *handshake_dir, int n_core,
                     double timeout_s);

/* Reader only: wait (up to the join timeout) until variable `name` is
 * published and load its metadata; DDS_OK at once when already known.
 * Local. */
DDS_API int dds_attach(dds_store *store, const char *name);

/* ---- Versioned variables (data that changes while it is read) ----------- */

/* A versioned variable is one whose rows a producer rewrites while other
 * ranks (or method-2 readers) read them, e.g. a ring of the newest
 * timesteps of a simulation. Every `block_rows` consecutive local rows of a
 * shard share a 64-bit generation counter (a seqlock), kept in the store
 * memory beside the shard and readable through the same transport:
 *  - dds_update() of a versioned variable makes the counters of the blocks
 *    it touches odd, copies the rows, then makes them even again (release
 *    ordering between the steps; method 0 also calls MPI_Win_sync). The rows
 *    are visible to readers when it returns: no dds_sync() is needed.
 *  - Every read of a versioned variable (dds_get, dds_get_batch,
 *    dds_get_ranges) reads the counters of the blocks it touches, the rows,
 *    then the counters again, each step complete before the next. Rows whose
 *    counters were equal and even are consistent: each row holds exactly
 *    what one dds_update() wrote (or the initial zeros), never a mix of two.
 *    Rows whose counters moved are read again (only those), up to
 *    DDSTORE_GEN_RETRIES times (default 1000) with a growing pause (to 1 ms);
 *    then the read fails with DDS_EAGAIN naming the rows. The guarantee is
 *    per block: two rows of different blocks may come from different
 *    updates. Choose block_rows as the rows one update writes together (one
 *    timestep of one rank) so that a block is never half old, half new.
 *  - The collective rules and thread safety of the reads are unchanged
 *    (method 0's dds_get_batch stays group-collective, with the same single
 *    synchronisation; the extra transfers are one-sided).
 * Variables made by dds_add()/dds_init() are not versioned and keep the
 * plain read path; their dds_update() is not torn-free while being read.
 * Read counters (dds_stats) include the retries and the counter transfers.
 * The counters live in a hidden variable named `name` followed by "\x1fgen",
 * not listed by dds_var_count()/dds_var_name(); names ending so are
 * reserved.
 * Writers: one dds_update() at a time per process touches a versioned
 * variable (updates are serialised inside the library); with method 0 a
 * writer thread beside reading threads needs MPI_THREAD_MULTIPLE. */

/* Allocate a versioned variable of `nrows` zero-filled local rows (like
 * dds_init()), with one generation counter per `block_rows` local rows
 * (>= 1; the last block of a shard may be shorter). All counters start at
 * 0. Errors: those of dds_init() (also for a name longer than
 * DDS_NAME_MAX - 4 bytes), DDS_EINVAL for block_rows < 1, DDS_EMISMATCH when
 * ranks disagree on row_bytes, dtype or block_rows. A failure after the
 * checks (out of memory) may leave the hidden counter variable allocated.
 * Collective over the communicator. */
DDS_API int dds_init_versioned(dds_store *store, const char *name, int64_t nrows,
                               int64_t row_bytes, uint32_t dtype, int64_t block_rows);

/* Rows per generation counter of variable `name`: *block_rows receives
 * block_rows for a versioned variable, 0 for another one. A method-2 reader
 * may look the counters up (one pass over the handshake directory, no
 * waiting). Local; thread-safe. */
DDS_API int dds_var_block_rows(dds_store *store, const char *name, int64_t *block_rows);

/* Read the generation counter of the block holding global row `row` of a
 * versioned variable into *gen: even when no update of the block is in
 * progress (gen / 2 updates have completed), odd during one. A reader can
 * poll it to learn that new data was published. DDS_EINVAL for a variable
 * that is not versioned, DDS_ERANGE for a row outside [0, global_rows).
 * Not collective (also for method 0); thread-safe as dds_get(). */
DDS_API int dds_generation(dds_store *store, const char *name, int64_t row, uint64_t *gen);

/* ---- Counters ------------------------------------------------------------ */

/* Read counters since creation (or the last reset). `info->size` must be
 * set. Local; thread-safe. */
DDS_API int dds_stats(const dds_store *store, dds_stats_info *info);

/* Zero the counters. Local; thread-safe. */
DDS_API int dds_stats_reset(dds_store *store);

#ifdef __cplusplus
}
#endif

#endif /* DDSTORE_DDSTORE_H */
