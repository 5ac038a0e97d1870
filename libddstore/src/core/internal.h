/* Private definitions shared by libddstore's source files. Nothing here is
 * part of the ABI. */
#ifndef DDSTORE_INTERNAL_H
#define DDSTORE_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddstore/ddstore.h"

#define DDS_HIDDEN __attribute__((visibility("hidden")))

/* ---- errors (error.c) ---------------------------------------------------- */

/* Record a formatted message for the calling thread and return `code`. */
DDS_HIDDEN int dds_err(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Record MPI's text for an MPI error `mpi_rc` raised by `what`; returns DDS_EMPI. */
DDS_HIDDEN int dds_err_mpi(int mpi_rc, const char *what);
/* Clear the calling thread's message. */
DDS_HIDDEN void dds_err_clear(void);
/* The calling thread's message buffer (for copying between ranks). */
DDS_HIDDEN char *dds_err_buf(size_t *len);

/* Debug log to stderr when DDSTORE_DEBUG is set to a non-zero value. */
DDS_HIDDEN void dds_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- variables -------------------------------------------------------------- */

struct dds_fabric;     /* transport state of methods 1/2 (fabric_internal.h) */
struct dds_fabric_var; /* per-variable transport state of methods 1/2 */
struct dds_storage;    /* file-backed shards of a store (storage.c) */
struct dds_shard_file; /* a variable's file and its mapping (storage.c) */

typedef struct dds_var {
    char name[DDS_NAME_MAX + 1];
    uint32_t dtype;
    int64_t row_bytes;
    int64_t local_rows;
    int64_t *offsets;       /* group_size + 1 entries: first global row of each shard */
    char *base;             /* this rank's shard (never NULL: at least 1 byte is allocated) */
    char **peer_base;       /* group_size entries: direct pointer to a shard on this node, else NULL */
    bool node_shared;       /* every rank of the group maps its node peers' shards (dds_var_node_shared) */
    /* method 0 */
    MPI_Win shm_win;        /* shared-memory window over the node communicator, or MPI_WIN_NULL */
    MPI_Win win;            /* RMA window over the group, or MPI_WIN_NULL when not needed */
    MPI_Aint *win_skew;     /* with win: group_size entries, bytes from each rank's window base
                               (its shard's address rounded down to DDS_WIN_ALIGN) to its shard */
    void *mpi_mem;          /* memory from MPI_Alloc_mem, or NULL */
    /* methods 1/2 */
    struct dds_fabric_var *fab;
    bool readonly;          /* this rank's shard pages are read-only (protect.c) */
    /* versioned variables (generation.c) */
    struct dds_var *_Atomic gen; /* the variable of its generation counters, or NULL */
    _Atomic int gen_looked_up;   /* reader: companion looked up (gen is final) */
    int64_t gen_block_rows;      /* rows per counter */
    /* file-backed shards (storage.c) */
    struct dds_shard_file *file; /* this rank's shard is mapped from a file, or NULL */
} dds_var;

/* One transfer of a read: `len` bytes at byte `src_offset` of group rank
 * `owner`'s shard into `dst`. */
typedef struct dds_read_op {
    int32_t owner;
    int64_t src_offset;
    int64_t len;
    char *dst;
} dds_read_op;

/* ---- transports ---------------------------------------------------------------
 * How shards are exposed to other processes and read from them: one table
 * per transport, chosen once when a store is made (dds_create by method,
 * dds_join: libfabric), so that no other code asks which method is in use.
 * Instances: dds_transport_rma (rma.c, method 0) and dds_transport_fabric
 * (fabric_transport.c, methods 1 and 2; nofabric.c without libfabric).
 * A NULL operation is one the transport does not need: the caller skips it,
 * which succeeds. No `size` field (libfabric's ops tables have one, and
 * FI_CHECK_OP tests it, because providers are built apart from their
 * callers): every table here is compiled into the library that calls it,
 * from this one definition, so such a field could only ever equal
 * sizeof(dds_transport). */
typedef struct dds_transport {
    const char *name;
    /* Shards on whole pages of their own, read-only between writes
     * (protect.c): the memory is registered for remote reads, and a stray
     * local write must fault rather than change what others read. */
    bool page_shards;
    /* Batched reads are group-collective where the group is not wholly in
     * node shared memory: the transport may need the target inside its
     * library to serve a read (read.c). */
    bool collective_reads;
    /* Open for a core store being created (after the shared-memory probe).
     * Collective over s->comm; returns an agreed result and leaves nothing
     * open when it fails. */
    int (*open)(dds_store *s);
    /* Close (dds_free, also of readers): withdraw, stop threads. Local. */
    void (*close)(dds_store *s);
    /* Make v's shards, just allocated, reachable by the group, inside the
     * window lock (dds_shard_alloc). Collective over s->group; returns a
     * result agreed over it; on failure the caller releases the shard. */
    int (*map_shard)(dds_store *s, dds_var *v);
    /* Expose v's shard once its rows are written (add/init): registration,
     * key exchange, publication. Collective over s->group. */
    int (*expose)(dds_store *s, dds_var *v);
    /* Release what expose made; a no-op where it made nothing. Set
     * wherever expose is. Collective over the group for core stores, local
     * for readers. */
    void (*release)(dds_store *s, dds_var *v);
    /* Read transfers of other processes' shards, grouped by owner; data
     * complete on return. bounded: a group-collective read, whose waits
     * for targets may be bounded by the store's collective timeout (else
     * a read of dds_get). Thread-safe. */
    int (*read)(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded);
    /* Make local writes to v visible to remote reads (local). */
    int (*sync)(dds_store *s, dds_var *v);
    /* Register / unregister a destination buffer of reads. */
    int (*register_recv)(dds_store *s, void *buf, size_t len);
    int (*unregister_recv)(dds_store *s, void *buf);
    /* Name what moves rows between nodes, NUL-terminated in buf[0..cap)
     * (dds_store_info.transport). Local. */
    void (*describe)(const dds_store *s, char *buf, size_t cap);
    /* Name the network device (libfabric domain) this process uses, or
     * (why) how it was chosen, NUL-terminated in buf[0..cap) (store
     * properties "domain", "domain_choice"); NULL: none of this store's
     * own (method 0: MPI chooses). Local. */
    void (*describe_domain)(const dds_store *s, bool why, char *buf, size_t cap);
    /* Owner-side gather (gather.c chooses when): for each owner in ops
     * (grouped by owner, as for read; or for each node, dds_node_servers),
     * one request carrying the transfers
     * and one reply with their bytes packed, scattered into the ops' dst;
     * data complete on return; adds to s->st_gather_requests (requests
     * sent) and s->st_gather_bytes (reply bytes). Where collective_reads,
     * called by every rank of the group in a collective read, nops 0
     * included (the rank still serves the others); else thread-safe, and
     * the owner serves requests while it computes. NULL: no gather. */
    int (*gather)(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded);
    /* gather of several variables' ops at once (nops[i] ops of vars[i],
     * each list grouped by owner): one request per owner for all of them.
     * Where collective_reads, collective like gather (every rank of the
     * group calls it in a collective read, nvars 0 included, and one read
     * of several variables is one exchange), after the read's step, with
     * the lists gather_begin laid out for it; else not collective,
     * thread-safe. NULL where the transport has none. */
    int (*gather_vars)(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                       size_t nvars);
    /* Where collective_reads: prepare (local) the first round of a
     * collective read's exchange, so that its requests travel in the
     * read's step (step_exchange). Every rank of the group calls it before
     * every read step of a store where dds_gather_posts_early, nvars 0
     * included (it then asks nothing); gather_vars with the same lists
     * completes that round and the others where the step agrees on rounds.
     * An error fails this rank's read (passed into the step); NULL: none. */
    int (*gather_begin)(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                        size_t nvars);
    /* The group-collective step itself (collective.c) where
     * dds_gather_posts_early: every rank sends every rank one message of
     * its nwords words `in` and, in a read, the requests prepared by
     * gather_begin; out is the MPI_MAX of all ranks' `in`, and the requests
     * received are the exchange's first round. Bounded like
     * dds_wait_bounded (kind and what name the wait); an MPI error breaks
     * the store. Collective over the group. */
    int (*step_exchange)(dds_store *s, int kind, const int64_t *in, int64_t *out, int nwords, const char *what);
    /* Whether one-sided reads are emulated in software (a request and a
     * reply through both CPUs per operation), so that gather is better at
     * every row size. NULL: false. Local. */
    bool (*rma_emulated)(const dds_store *s);
} dds_transport;

DDS_HIDDEN extern const dds_transport dds_transport_rma;
DDS_HIDDEN extern const dds_transport dds_transport_fabric;

/* ---- store ------------------------------------------------------------------ */

#define DDS_STORE_MAGIC 0x44445354u /* "DDST" */

struct dds_store {
    uint32_t magic;
    int method;                  /* enum dds_method (never DDS_METHOD_DEFAULT) */
    const dds_transport *tp;     /* chosen with the method; never NULL in a live store */
    bool is_reader;              /* from dds_join(): no MPI */
    MPI_Comm comm;               /* duplicate of the user's communicator */
    MPI_Comm group;              /* consecutive ranks of `width` */
    MPI_Comm node;               /* ranks of `group` on this node */
    int rank, size, width;
    int group_rank, group_size, group_index;
    bool node_local;             /* all of the group on one node and the fast path enabled */
    bool shm_enabled;            /* shared-memory shards in use */
    int *node_rank_of;           /* group rank -> rank in `node`, or -1 */
    int epoch_depth;
    char host_key[128];          /* names this node in node-wide resources (winlock.c) */

    /* Tagged agreements of group-collective calls (dds_step, collective.c). */
    int64_t coll_reads;          /* collective reads (READ steps) made so far */
    uint64_t coll_timeout_ns;    /* DDSTORE_COLLECTIVE_TIMEOUT_S; 0: wait for ever */
    bool broken;                 /* a step timed out: the group's collectives are out of step */
    _Atomic uint64_t wait_typical_ns; /* running mean of completed arrival waits (collective.c) */

    pthread_rwlock_t vars_lock;  /* guards vars/nvars (readers: lookups; writers: add) */
    dds_var **vars;
    int64_t nvars, vars_cap;

    char *fabric_name;           /* requested provider (may be NULL) */
    char *nic_map;               /* dds_options.nic_map (may be NULL; nic.h) */
    char *handshake_dir;         /* method 2 directory */
    struct dds_fabric *fab;      /* methods 1/2 */

    _Atomic uint64_t st_calls, st_rows_local, st_rows_remote, st_bytes_local, st_bytes_remote;
    _Atomic uint64_t st_read_ns;
    _Atomic uint64_t st_gather_requests, st_gather_bytes;

    int gather_mode;             /* enum dds_gather_mode (gather.c) */
    bool gather_by_node;         /* DDSTORE_GATHER_BY_NODE (gather.c; local) */
    /* Group rank -> the rank of that rank's node which serves this rank's
     * gather requests for the whole node (store.c); NULL: none. */
    int *node_server;
    int64_t gather_switch_bytes; /* DDSTORE_GATHER_SWITCH_BYTES, -1: the transport's default (gather.c) */
    int64_t gather_round_bytes;  /* collective gather: reply bytes per rank per round (gather.c) */
    /* Collective gather (method 0): the rounds of exchange the current
     * collective read's step agreed on, set by read.c before tp->gather_vars
     * (collective reads are made from one thread), and the private
     * communicator of the exchange (rma_gather.c; MPI_COMM_NULL if none). */
    int64_t gather_rounds;
    /* Steps (collective.c) are the transport's step_exchange, which carries
     * a read's first gather round: dds_gather_posts_early, set once the
     * transport is open (store.c). */
    bool steps_by_message;
    MPI_Comm gather_comm;
    struct dds_gx *gather_gx;    /* its buffers, kept between reads (rma_gather.c) */

    struct dds_storage *storage; /* shards in files under a directory, or NULL (storage.c) */
};

/* ---- ground floor ------------------------------------------------------------
 * Files that call nothing of the library above error.c, so that every other
 * file may use them without a call cycle (tests/c/check-layering.py fails
 * on any cycle between source files). */

/* Store handles (registry.c). */
/* Allocate a store with no MPI resources yet (core stores and readers):
 * magic set, communicators MPI_COMM_NULL, vars_lock initialised. */
DDS_HIDDEN dds_store *dds_store_alloc(void);
/* Release what dds_store_alloc() made and the strings and arrays the store
 * owns (not its variables, nor MPI or transport resources); the struct waits
 * in a graveyard so that a stale handle is never taken for a new store. */
DDS_HIDDEN void dds_store_destroy(dds_store *s);
/* Check that `s` is a live store (not freed, not garbage); sets the error. */
DDS_HIDDEN int dds_store_check(const dds_store *s);
/* Register/unregister a live store handle. */
DDS_HIDDEN void dds_store_track(dds_store *s, bool live);
/* dds_store_check(), then DDS_EINVAL "<what> is NULL" when `out` is NULL. */
DDS_HIDDEN int dds_store_check_out(const dds_store *s, const void *out, const char *what);
/* Start of a call that only core stores serve: clears the calling thread's
 * message, checks the handle, and refuses a reader with DDS_ESTATE "a reader
 * (dds_join) <refusal>". */
DDS_HIDDEN int dds_core_begin(const dds_store *s, const char *refusal);

/* Variables and names (vartable.c). */
/* Look up a variable by name; NULL when absent (no error set). */
DDS_HIDDEN dds_var *dds_var_find(const dds_store *s, const char *name);
/* Same, but sets DDS_ENOENT/DDS_EINVAL and returns NULL on failure. */
DDS_HIDDEN dds_var *dds_var_lookup(const dds_store *s, const char *name);
/* Same, returning the code: DDS_EINVAL for a bad name, DDS_ENOENT. */
DDS_HIDDEN int dds_var_get(const dds_store *s, const char *name, dds_var **out);
/* Free a variable's struct and arrays (not its shard or transport state,
 * released before); NULL is fine, as are arrays not yet allocated. */
DDS_HIDDEN void dds_var_free(dds_var *v);
/* Append a variable to the store (takes ownership). */
DDS_HIDDEN int dds_var_append(dds_store *s, dds_var *v);
/* Validate a variable name (length, UTF-8). */
DDS_HIDDEN int dds_check_name(const char *name);
/* Owner of a global row (0 <= row < offsets[group_size]): the largest group
 * rank r with offsets[r] <= row (shards may be empty). A binary search whose
 * halving is a conditional move, not a branch: rows of a random batch fall
 * to random owners, and a branch per halving step mispredicted about every
 * other time (a profile of random 520 B reads across hosts had the
 * branching search at 2.4 % of all CPU). Inline: called once per row. */
static inline int dds_owner_of(const dds_var *v, int group_size, int64_t row)
{
    const int64_t *off = v->offsets;
    int base = 0;
    for (int n = group_size; n > 1;) {
        int half = n / 2;
        base = off[base + half] <= row ? base + half : base;
        n -= half;
    }
    return base;
}

/* Whether batched reads (dds_get_batch, dds_get_ranges, dds_read_fail) of
 * `s` are group-collective (read.c). */
DDS_HIDDEN bool dds_reads_collective(const dds_store *s);
/* Whether the collective reads of s send their exchange's first round in
 * their step (the transport's gather_begin and step_exchange, where some
 * read may gather and reads are collective): then every step of the store
 * is the transport's step_exchange. The same on every rank (read.c). */
DDS_HIDDEN bool dds_gather_posts_early(const dds_store *s);

/* Agree on the outcome of a collective step over `comm`: returns the lowest
 * failing rank's code on every rank, with its message ("rank k: ...")
 * (collective.c). */
DDS_HIDDEN int dds_agree(MPI_Comm comm, int rc);

/* Kinds of group-collective calls, as dds_step() tags them. */
enum dds_coll_kind {
    DDS_COLL_READ = 0,        /* get_batch / get_ranges where reads are collective */
    DDS_COLL_EPOCH_BEGIN = 1,
    DDS_COLL_EPOCH_END = 2,
    DDS_COLL_SYNC = 3,
    DDS_COLL_ADD = 4,         /* add / init */
    DDS_COLL_FREE = 5,
    DDS_COLL_SAVE = 6,        /* dds_save / dds_verify_saved */
    DDS_COLL_NKINDS = 7
};

/* Tagged, bounded agreement: the first step of every group-collective call
 * of a core store. Like dds_agree() over s->group, but each rank also says
 * which call it is in, and the wait is bounded by s->coll_timeout_ns:
 *  - all ranks in the same kind of call: the agreed result (lowest failing
 *    rank's code and message);
 *  - different kinds (unequal numbers of reads, say): DDS_EMISMATCH on every
 *    rank, naming the ranks, their calls and their read counts; except
 *    that ranks in free() meeting ranks in a read take part in that read
 *    (*served set true, DDS_OK) and the readers' read succeeds;
 *  - no agreement within the timeout: DDS_ETIMEDOUT on this rank, and the
 *    store is marked broken (its group's collectives can no longer match).
 * `served` may be NULL when kind is not DDS_COLL_FREE. Collective over
 * s->group (collective.c). */
DDS_HIDDEN int dds_step(dds_store *s, int kind, int rc, bool *served);
/* dds_step() that also reduces one value with MPI_MAX over the group: in,
 * this rank's *val (ranks without one pass 0); out, the maximum where the
 * step succeeds (also on ranks in free() that it serves: *served), else 0.
 * Method-0 gather reads carry their number of exchange rounds in it. */
DDS_HIDDEN int dds_step_val(dds_store *s, int kind, int rc, bool *served, int64_t *val);
/* Complete n requests that move data (replies, RMA reads), driving MPI
 * progress, within s->coll_timeout_ns; DDS_ETIMEDOUT (store marked broken)
 * naming `what` was waited for. Polls, yields, then sleeps (collective.c). */
DDS_HIDDEN int dds_wait_bounded(dds_store *s, int n, MPI_Request *reqs, int kind, const char *what);
/* A wait for the group's other ranks to arrive (a step, an exchange of
 * requests): poll(ctx, &done) drives MPI and says whether the wait is over
 * (an error it returns ends the wait); the same deadline as
 * dds_wait_bounded, and the yielding phase only while the store's arrival
 * waits typically end within it (s->wait_typical_ns). */
DDS_HIDDEN int dds_poll_bounded(dds_store *s, int (*poll)(void *ctx, bool *done), void *ctx, int kind,
                                const char *what);
/* DDSTORE_COLLECTIVE_TIMEOUT_S parsed into s->coll_timeout_ns (local). */
DDS_HIDDEN int dds_step_setup(dds_store *s);

/* Run fn(s, arg), which creates MPI windows over s->group, while no other
 * group on this node creates windows (winlock.c; works around Open MPI's
 * backing-file collision between communicators split from one parent,
 * open-mpi/ompi#9492). Collective over s->group. */
DDS_HIDDEN int dds_with_window_lock(dds_store *s, int (*fn)(dds_store *, void *), void *arg);

/* Environment helpers. */
DDS_HIDDEN const char *dds_env(const char *name);
DDS_HIDDEN bool dds_env_flag(const char *name, bool dflt);

/* ---- read protocol (gather.c) ----------------------------------------------- */
enum dds_gather_mode { DDS_GATHER_AUTO = 0, DDS_GATHER_ALWAYS = 1, DDS_GATHER_NEVER = 2 };
/* Parse DDSTORE_GATHER and DDSTORE_GATHER_SWITCH_BYTES into s. Core stores:
 * collective over s->comm, checks the settings equal on every rank and
 * returns an agreed result; readers: local. */
DDS_HIDDEN int dds_gather_setup(dds_store *s);
/* Whether reads of v gather at the owner (else one-sided reads); the same
 * on every rank for the same v. collective: the read is group-collective. */
DDS_HIDDEN bool dds_gather_chosen(const dds_store *s, const dds_var *v, bool collective);
/* The store property "read_protocol", NUL-terminated in buf[0..cap). */
DDS_HIDDEN void dds_gather_describe(const dds_store *s, char *buf, size_t cap);
/* Whether some read of s may gather (the transport has gather and it is
 * not DDSTORE_GATHER=never): collective reads then agree on the exchange
 * in their step, before it (read.c). */
DDS_HIDDEN bool dds_gather_possible(const dds_store *s);
/* Reply bytes of one node's rows in one read up to which gather sends one
 * request to the node (a rank of that node serves its node peers' rows
 * from node shared memory) rather than one per owner. Above it one reply
 * streams over one connection where one per owner stream side by side:
 * B5's layers (bench/b5_layers.py, method 1 over tcp, 2 hosts x 2 ranks,
 * 256 rows per batch) read 1.26x the request/reply floor by node at 512 B
 * rows (128 KiB a node) against 0.99x by owner, but 0.89x against 1.01x
 * at 1 KiB and 0.34x against 0.91x at 4 KiB. */
#define DDS_GATHER_NODE_MAX_BYTES ((uint64_t)128 << 10)
/* The node servers (dds_store.node_server) where gather requests may go by
 * node: a core store with node shared memory and DDSTORE_GATHER_BY_NODE
 * on; else NULL. A read's variables must also be node_shared. */
DDS_HIDDEN const int *dds_node_servers(const dds_store *s);
/* Rounds of a collective gather (the transport's gather_vars and read.c
 * count them alike): the transfers of nvars lists (ops[v][0..nops[v]), each
 * grouped by owner, none longer than dds_gather_round_cap(s) bytes) are
 * taken in order, list after list, a round ending before the transfer that
 * would take its rows past the cap or its request (a (variable, offset,
 * length) triple of DDS_GATHER_TRANSFER_BYTES a transfer) past it. Moves
 * *at (start {0, 0}) to the end of the round that starts there; false when
 * no transfer was left. */
#define DDS_GATHER_TRANSFER_BYTES 24
typedef struct dds_gather_pos {
    size_t var, op;
} dds_gather_pos;
DDS_HIDDEN bool dds_gather_round(const dds_store *s, const dds_read_op *const *ops, const size_t *nops,
                                 size_t nvars, dds_gather_pos *at);
/* Reply bytes of one rank per round: DDSTORE_GATHER_ROUND_BYTES, lowered
 * so that an owner's replies of one round to the whole group fit MPI's int
 * counts and displacements. */
DDS_HIDDEN int64_t dds_gather_round_cap(const dds_store *s);

/* ---- shard memory (shard.c) and method 0 (rma.c) ---------------------------------------- */

/* Allocate v->base for v->local_rows rows (shared memory on the node when
 * enabled) and let the transport map it for the group (s->tp->map_shard).
 * Collective over the group; the caller agrees on the result. */
DDS_HIDDEN int dds_shard_alloc(dds_store *s, dds_var *v);
/* Set v->node_shared: whether every rank of the group maps the shards of
 * all its node peers (empty ones aside), so that any rank of a node can
 * serve the node's rows. Collective over the group (the transport's
 * per-variable setup calls it); agreed. */
DDS_HIDDEN int dds_var_node_shared(dds_store *s, dds_var *v);
/* Release what dds_shard_alloc() made. Collective over the group. */
DDS_HIDDEN void dds_shard_release(dds_store *s, dds_var *v);
/* Make local writes to v visible: MPI_Win_sync on its windows, the shared-
 * memory one of every method and method 0's RMA window (local). */
DDS_HIDDEN int dds_rma_sync_local(dds_store *s, dds_var *v);
/* Method-0 owner-side gather (rma_gather.c), the gather operations of
 * dds_transport_rma: open makes the private communicator of the exchange
 * (collective over s->group, agreed; leaves nothing open on failure),
 * close frees it (a no-op without one). */
DDS_HIDDEN int dds_rma_gather_open(dds_store *s);
DDS_HIDDEN void dds_rma_gather_close(dds_store *s);
DDS_HIDDEN int dds_rma_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded);
DDS_HIDDEN int dds_rma_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops,
                                   const size_t *nops, size_t nvars);
DDS_HIDDEN int dds_rma_gather_begin(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops,
                                    const size_t *nops, size_t nvars);
DDS_HIDDEN int dds_rma_step_exchange(dds_store *s, int kind, const int64_t *in, int64_t *out, int nwords,
                                     const char *what);
DDS_HIDDEN bool dds_rma_emulated(const dds_store *s);
/* Decide whether shards live in node shared memory (DDSTORE_NODE_LOCAL,
 * default on, and the MPI can allocate shared windows); sets
 * s->shm_enabled. Collective over s->comm; returns an agreed result. */
DDS_HIDDEN int dds_shm_probe(dds_store *s);

/* Bytes of this rank's shards of v (*bytes) and how many of them are
 * resident in memory (*resident, mincore: for file-backed shards, what the
 * page cache holds). Local. */
DDS_HIDDEN void dds_shard_resident(const dds_var *v, uint64_t *bytes, uint64_t *resident);

/* ---- file-backed shards (storage.c) -------------------------------------------
 * A store made with a storage directory keeps every shard in a file there,
 * mapped read-only and shared; rows are written with pwrite (see
 * storage.c). A reopened store (dds_open) maps a saved store's files. */

/* Writer set-up for dds_create: `dir` (NULL: DDSTORE_STORAGE_DIR; NULL or
 * "" there: shards in memory, s->storage stays NULL): make the directory,
 * its volume id, take its lock, clear an earlier store out of it.
 * Collective over s->comm (after the group and node communicators are
 * made); returns an agreed result. On failure the caller closes. */
DDS_HIDDEN int dds_storage_setup(dds_store *s, const char *dir);
/* Reader set-up for dds_open: lock `dir` shared, read and check its
 * manifest, agree that every rank sees the same store, plan each
 * variable's offsets for this group. Collective over s->comm; agreed. */
DDS_HIDDEN int dds_storage_reopen(dds_store *s, const char *dir);
/* Variables of a reopened store (0 otherwise), and variable i's metadata
 * into a zeroed v: name, dtype, row size, offsets, local rows, its file.
 * Local. */
DDS_HIDDEN int64_t dds_storage_nvars(const dds_store *s);
DDS_HIDDEN int dds_storage_var(dds_store *s, int64_t i, dds_var *v);
/* Create (writer) or open and check (reopened) v's file and map it; sets
 * v->base and v->peer_base. Collective over s->group; agreed over it. */
DDS_HIDDEN int dds_storage_map(dds_store *s, dds_var *v);
/* Undo dds_storage_map (local). */
DDS_HIDDEN void dds_storage_unmap(dds_var *v);
/* Write `len` bytes at byte `offset` of this rank's shard of file-backed
 * v (pwrite, bounded dirty pages). Thread-safe. */
DDS_HIDDEN int dds_storage_write(dds_var *v, size_t offset, const void *data, size_t len);
/* DDS_ESTATE naming variable `name` when s was reopened (read-only). */
DDS_HIDDEN int dds_storage_check_writable(const dds_store *s, const char *name);
/* Release s->storage; collective (free of a core store): also remove the
 * files of a writer that was not saved, or changed after its save. */
DDS_HIDDEN void dds_storage_close(dds_store *s, bool collective);
/* This group's storage directory, or NULL. */
DDS_HIDDEN const char *dds_storage_dir(const dds_store *s);
/* 0 in memory, 1 files being written (not saved, or changed since),
 * 2 files saved, 3 reopened from a saved store. */
DDS_HIDDEN int dds_storage_state(const dds_store *s);

/* ---- read-only shard pages, methods 1/2 (protect.c) ------------------------ */

/* The system page size. */
DDS_HIDDEN size_t dds_page_size(void);
/* Make the pages of every shard this process maps (its own, and node
 * peers' shared-memory shards) read-only, or writable again. A no-op
 * unless s->tp->page_shards (methods 1/2). Shards must be page-aligned with page-rounded allocations
 * (dds_shard_alloc does this for methods 1/2); an unaligned one is left
 * writable (debug message). Local. */
DDS_HIDDEN int dds_shard_protect(dds_store *s, dds_var *v, bool readonly);
/* Copy `len` bytes to byte `offset` of this rank's shard, opening its
 * pages for the copy when they are read-only (a file-backed shard:
 * dds_storage_write). Thread-safe. */
DDS_HIDDEN int dds_shard_write(dds_var *v, size_t offset, const void *data, size_t len);

/* ---- methods 1/2 (fabric*.c) ---------------------------------------------------
 * The operations of dds_transport_fabric (fabric_transport.c). Without
 * libfabric, nofabric.c defines that table and dds_fab_join/dds_fab_attach
 * only. */

/* Open the transport for a store made by dds_create() with method 1 or 2:
 * pick the provider (s->fabric_name, else DDSTORE_FABRIC, else the best
 * RDM+RMA one), open the endpoint, exchange addresses inside the group over
 * s->group; method 2 also publishes them under s->handshake_dir.
 * Collective over the group. */
DDS_HIDDEN int dds_fab_open(dds_store *s);
/* Register v->base (v->local_rows * v->row_bytes bytes, at least 1) for
 * remote READ, exchange keys and base addresses inside the group; method 2
 * also publishes the variable's metadata. Collective over the group. */
DDS_HIDDEN int dds_fab_var_expose(dds_store *s, dds_var *v);
/* Release the variable's registration. Collective over the group for core
 * stores (a barrier may be used), local for readers. */
DDS_HIDDEN void dds_fab_var_release(dds_store *s, dds_var *v);
DDS_HIDDEN int dds_fab_register_recv(dds_store *s, void *buf, size_t len);
DDS_HIDDEN int dds_fab_unregister_recv(dds_store *s, void *buf);
/* Close the transport (withdraw the publication, stop the progress thread). */
DDS_HIDDEN void dds_fab_close(dds_store *s);
/* Reader side of method 2 (see dds_join/dds_attach in the public header). */
DDS_HIDDEN int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s);
DDS_HIDDEN int dds_fab_attach(dds_store *s, const char *name);

/* ---- versioned variables (generation.c) -------------------------------------- */

/* Name suffix of the hidden variable holding a versioned variable's
 * generation counters, and the bytes of one counter (a row of it). */
#define DDS_GEN_SUFFIX "\x1fgen"
#define DDS_GEN_ROW_BYTES 8
/* The counters' name of versioned variable `name`; DDS_EINVAL when it
 * would be too long. */
DDS_HIDDEN int dds_gen_name(const char *name, char out[DDS_NAME_MAX + 1]);
/* Number of counters for `rows` rows in blocks of `block_rows`. */
DDS_HIDDEN int64_t dds_gen_blocks(int64_t rows, int64_t block_rows);
/* 1 when `name` is such a hidden variable (not listed by dds_var_name). */
DDS_HIDDEN bool dds_gen_hidden(const char *name);
/* *gen receives the counters of v when v is versioned, else NULL; a
 * method-2 reader looks them up on first use (which may fail). Thread-safe. */
DDS_HIDDEN int dds_gen_of(dds_store *s, dds_var *v, dds_var **gen);
/* Read transfers of versioned v so that no row is torn (seqlock check and
 * retries); `ops` is left unchanged. Not collective; thread-safe. */
DDS_HIDDEN int dds_gen_read(dds_store *s, dds_var *v, dds_var *gen, const dds_read_op *ops, size_t nops);
/* Write rows of versioned v, counters odd around the copy. Local. */
DDS_HIDDEN int dds_gen_write(dds_store *s, dds_var *v, dds_var *gen, const void *data, int64_t nrows,
                             int64_t offset);
/* The transfers of a read, without the versioned check (transfer.c): ops
 * may be reordered. bounded: as for dds_transport.read. Not collective;
 * data complete on return. */
DDS_HIDDEN int dds_read_ops(dds_store *s, dds_var *v, dds_read_op *ops, size_t nops, bool bounded);
/* The first half of dds_read_ops: copy what this process can address
 * (its shard, node peers' in shared memory), count the read in the stats,
 * and leave the rest in ops[0..*nremote), grouped by owner (transfer.c). */
DDS_HIDDEN int dds_read_split(dds_store *s, dds_var *v, dds_read_op *ops, size_t nops, size_t *nremote);
/* A rank in dds_free() served a collective read (dds_step_val: *served)
 * whose step agreed on `rounds` rounds of gather exchange: take part in
 * them with nothing to read (read.c). */
DDS_HIDDEN int dds_read_serve(dds_store *s, int64_t rounds);

/* Serialise page-protection changes of shards with dds_shard_write()
 * (protect.c), and open (writable) / close (read-only) this rank's pages
 * of v over [offset, offset+len) when v's shard is read-only; a no-op
 * otherwise. Callers hold the lock around open ... close. */
DDS_HIDDEN void dds_shard_write_lock(bool lock);
DDS_HIDDEN int dds_shard_open(dds_var *v, size_t offset, size_t len, bool writable);

/* Monotonic clock in nanoseconds. */
DDS_HIDDEN uint64_t dds_now_ns(void);

/* Per-thread scratch buffers (scratch.c), one per slot, kept between calls
 * and freed when the thread exits. */
typedef enum dds_scratch_slot {
    DDS_SCRATCH_SPLIT_OPS,   /* dds_read_split's sorted transfers */
    DDS_SCRATCH_SPLIT_COUNT, /* dds_read_split's counts by owner */
    DDS_SCRATCH_BOUNCE,      /* owner-side gather replies (fabric_gather.c) */
    DDS_SCRATCH_SLOTS
} dds_scratch_slot;
/* This thread's buffer of `slot`, of at least `n` bytes (its contents are
 * not kept when it grows), or NULL when out of memory. Valid until the
 * thread's next dds_scratch() of the same slot. */
DDS_HIDDEN void *dds_scratch(dds_scratch_slot slot, size_t n);
/* Leave `buf`, this thread's buffer of `slot`, to whoever still writes into
 * it (a provider completing an abandoned read): never reused or freed; the
 * next dds_scratch() of the slot allocates a new one. */
DDS_HIDDEN void dds_scratch_forget(dds_scratch_slot slot, const void *buf);

#endif /* DDSTORE_INTERNAL_H */
