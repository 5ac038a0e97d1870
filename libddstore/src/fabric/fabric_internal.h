/* Private definitions shared by the libfabric transport's source files
 * (methods 1 and 2); nothing here is part of the ABI:
 *  - fabric.c: provider, domain and endpoints, progress thread, memory
 *    registration; open/close of core stores and exposing their shards;
 *  - fabric_read.c: reads (completion queue, waits, timeouts) and receive
 *    buffers;
 *  - fabric_gather.c: owner-side gather, the reader's side (requests,
 *    replies, waits);
 *  - fabric_serve.c: owner-side gather, the owner's side (served from the
 *    progress thread of fabric.c);
 *  - fabric_publish.c: method-2 publication and run tokens;
 *  - fabric_transport.c: the transport table (dds_transport_fabric) over
 *    fabric.c and fabric_read.c;
 *  - fabric_join.c: method-2 readers (join, attach);
 *  - nic.c (nic.h): which domain (NIC) of the provider a process opens.
 * Calls go one way only: fabric_join.c, fabric_gather.c and fabric_read.c
 * call fabric.c and fabric_publish.c (fabric_gather.c also fabric_read.c);
 * fabric.c calls fabric_publish.c, fabric_serve.c and nic.c, which call
 * none of them; completions reach their operation through the function
 * pointer of its context (fab_ctx), not by a call between files;
 * fabric_join.c takes the table from fabric_transport.c
 * (tests/c/check-layering.py checks that no cycle appears). */
#ifndef DDSTORE_FABRIC_INTERNAL_H
#define DDSTORE_FABRIC_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include "handshake.h"
#include "internal.h"
#include "nic.h"

/* Transfers one fi_readmsg carries at most (bounded by the provider's
 * rma_iov_limit and iov_limit). */
#define MAX_IOV 16

/* Every operation context posted on an endpoint starts with this: the
 * thread that reads a completion queue hands each completion (or error:
 * `err` non-NULL, e NULL) to its operation through `complete`. The
 * provider may use `ctx` as scratch space (FI_CONTEXT/FI_CONTEXT2). */
typedef struct fab_ctx {
    struct fi_context2 ctx;
    void (*complete)(struct fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err);
} fab_ctx;

/* Owner-side gather messages (fabric_gather.c sends, fabric_serve.c
 * serves). Requests go to an owner's target endpoint with tag
 * DDS_GATHER_REQ_TAG; the reply goes back to the reader's initiator
 * endpoint with the tag the reader chose (a multiple of 4, unique per
 * request in flight), plus DDS_GATHER_ERR_TAG when the owner could not
 * serve it (the payload is then the owner's message, truncated). */
#define DDS_GATHER_REQ_TAG 1ull
#define DDS_GATHER_ERR_TAG 2ull
#define DDS_GATHER_MAGIC 0x52474444u /* bytes "DDGR" */
/* Version 2 requests may switch variables: an entry whose len is
 * DDS_GATHER_VAR_SWITCH names (in offset) the variable of the entries after
 * it, so one request carries several variables' rows for one owner
 * (dds_get_batch_vars). Readers send version 1 when a request has one
 * variable, so owners of an older library serve them. */
#define DDS_GATHER_VERSION 2u
#define DDS_GATHER_VERSION_ONE_VAR 1u
#define DDS_GATHER_VAR_SWITCH UINT64_MAX
/* Version 3 requests name whole rows: `nent` 32-bit words, runs of
 * (variable index, row bytes, row count, that many row numbers in the
 * owner's shard), 4 bytes a row where versions 1/2 take 16 a transfer (a
 * 256-row batch of 64 B rows: a 512 B request per owner of two instead of
 * 2 KiB, one TCP segment instead of two; bench/b5c: the 2 KiB request
 * cost the bare request/reply program 9 % of its rate). Only readers of
 * the owners' own job send them (fabric_gather.c, compact_words), which
 * assumes every rank of a job loads the same libddstore; readers that
 * joined from another job, whose library may be older, keep 1/2. */
#define DDS_GATHER_VERSION_ROWS 3u
/* Version 4 requests are version 3 with the owner in each run: (variable
 * index, row bytes, owner's group rank, row count, that many row numbers
 * in that owner's shard). A rank serves them from its own shard and from
 * its node peers' shards in node shared memory, so that a reader sends
 * one request per node a batch touches instead of one per owner (the
 * node's serving rank: dds_store.node_server). Sent by readers of the
 * owners' own job only, as version 3. */
#define DDS_GATHER_VERSION_NODE_ROWS 4u
/* Words ahead of the row numbers of a version-4 run. */
#define DDS_GATHER_NODE_RUN_WORDS 4u
/* Bytes of one owner's receive buffer: the largest request. */
#define DDS_GATHER_REQ_BYTES 65536u
/* Transfers one request carries at most: header + largest address +
 * entries fit in a receive buffer. */
#define DDS_GATHER_MAX_ENTRIES 3584u
/* Words a version-3 request carries at most (fits a receive buffer too). */
#define DDS_GATHER_MAX_WORDS 16000u
/* Reply bytes one request asks for at most (and the owner accepts). */
#define DDS_GATHER_MAX_REPLY ((size_t)8 << 20)

/* A request: this header, then `alen` bytes of the reader's initiator
 * endpoint address padded to 8 bytes, then `nent` entries (dds_gather_ent;
 * version 3: uint32_t words). Native byte
 * order (both sides run this library on hosts of one architecture). */
typedef struct dds_gather_req {
    uint32_t magic;
    uint16_t version;
    uint16_t alen;
    uint32_t var_index; /* the (first) variable's index (dds_fabric_var.index) */
    uint32_t nent;      /* entries, variable switches included */
    uint64_t reply_tag;
    uint64_t reply_bytes; /* sum of the entries' len */
} dds_gather_req;
typedef struct dds_gather_ent {
    uint64_t offset; /* in the owner's shard */
    uint64_t len;
} dds_gather_ent;

struct fab_server;

typedef struct recv_reg {
    char *addr;
    size_t len;
    struct fid_mr *mr; /* NULL when the provider needs no local registration */
    int refs;
} recv_reg;

struct dds_fabric {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    /* initiator */
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t *peer; /* group rank (core rank for readers) -> address of its target endpoint */
    int npeers;
    /* target (core stores only) */
    struct fid_av *t_av;
    struct fid_cq *t_cq;
    struct fid_ep *t_ep;

    uint64_t mr_mode;
    size_t max_msg;
    size_t inject; /* tx inject_size */
    /* Owner-side gather: the endpoints carry tagged messages (FI_TAGGED
     * was granted), and this process's initiator endpoint address, which
     * its requests carry so that owners can reply. */
    bool tagged;
    uint8_t my_addr[DDS_HS_MAX_ADDR];
    size_t my_alen;
    _Atomic uint64_t next_tag;
    struct fab_server *srv; /* core stores: the serving side (fabric_serve.c) */
    int inflight;      /* per read call */
    int iov;           /* transfers per read operation (fi_readmsg when > 1) */
    bool local_mr;     /* destinations must be registered (FI_MR_LOCAL, or forced) */
    _Atomic uint64_t next_key;
    pthread_mutex_t cq_lock; /* one thread drains the initiator CQ at a time */
    bool cq_wait;            /* the initiator CQ has a file-descriptor wait object */
    bool serialize;          /* one read call at a time (see dds_fab_open_domain) */
    pthread_mutex_t read_lock;

    pthread_rwlock_t recv_lock;
    recv_reg *recv;
    size_t nrecv, recv_cap;

    int progress;      /* enum progress_mode (fabric.c) */
    unsigned poll_us;
    bool thread_started;
    pthread_t thread;
    _Atomic int stop;
    _Atomic uint64_t passes; /* progress passes completed (see quiesce_progress) */

    /* method 2 */
    int method;
    char *pubdir;
    int dirfd;
    bool dir_created;
    int lock_fd, live_fd;
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    char live_name[64];
    uint32_t next_var_index;
    struct run_token *token; /* this process's own publication (core) or the joined one if it is ours */
    /* readers */
    bool is_reader;
    _Atomic int broken; /* a reader gave up on reads: the store is unusable */
    double timeout_s;
    uint64_t read_timeout_ns; /* DDSTORE_READ_TIMEOUT_S; 0: wait for ever */
    uint64_t spin_ns;         /* DDSTORE_FABRIC_SPIN_US: a reader's polling before it blocks */
    pthread_mutex_t attach_lock;
    char prov[DDS_HS_MAX_PROV + 1];
    bool rma_emulated; /* the provider moves one-sided reads in software (dds_fab_open_domain) */
    dds_nic nic; /* which NIC (domain) this process opened, and why (nic.c) */
};

struct dds_fabric_var {
    struct fid_mr *mr; /* this rank's shard (core stores) */
    uint64_t *raddr;   /* per peer: remote address of the shard's first byte */
    uint64_t *key;
    uint64_t *len;     /* registered bytes */
    uint32_t index;    /* order of exposure in the group, the same on every core rank and, for
                          method 2, the publication index (var-<index>.dds): gather
                          requests name the variable by it */
    bool published;
};

/* Method-2 runs published by this process. A reader in the same process
 * as a core store of the run it joined must not touch that store's
 * endpoints after they are closed (shm maps peers per process, so the
 * reader would follow a dangling mapping): reads check the token instead. */
typedef struct run_token {
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    _Atomic int alive;
    int refs; /* under run_lock */
    struct run_token *next;
} run_token;

static inline void sleep_s(double t)
{
    if (t <= 0)
        return;
    struct timespec ts = { .tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- fabric.c --------------------------------------------------------------------- */

DDS_HIDDEN uint64_t dds_fab_read_timeout_ns(bool reader);
DDS_HIDDEN int dds_fab_err(int fi_rc, const char *what);
DDS_HIDDEN void dds_fab_init_struct(struct dds_fabric *F);
DDS_HIDDEN int dds_fab_open_domain(struct dds_fabric *F, const char *prov, uint32_t addr_format);
DDS_HIDDEN int dds_fab_reg_mr(struct dds_fabric *F, void *buf, size_t len, uint64_t access, struct fid_ep *ep,
                              struct fid_mr **mr);
DDS_HIDDEN void dds_fab_free(struct dds_fabric *F);
/* Free a variable's transport state: its registration, arrays, struct
 * (NULL, and arrays not yet allocated, are fine). */
DDS_HIDDEN void dds_fab_var_free(struct dds_fabric_var *FV);
DDS_HIDDEN int dds_fab_insert_peers(struct dds_fabric *F, int n, uint8_t *const *addr);

/* ---- fabric_serve.c (owner side of gather; called from fabric.c) ------------------ */

/* Post the owner's receive buffers on F->t_ep (before the progress thread
 * starts). */
DDS_HIDDEN int dds_fab_serve_open(struct dds_fabric *F);
/* Serve (add) or stop serving (remove) a variable's shard; thread-safe:
 * once remove returns no reply copies from the shard any more. `node`:
 * the variable where it is node_shared (version-4 requests read the
 * shards its peer_base maps, bounded by its offsets; it must outlive the
 * remove), else NULL: its own shard only; `n` the group size. */
DDS_HIDDEN int dds_fab_serve_add(struct dds_fabric *F, uint32_t index, const char *base, uint64_t bytes,
                                 const dds_var *node, int n);
DDS_HIDDEN void dds_fab_serve_remove(struct dds_fabric *F, uint32_t index);
/* Progress thread: retry sends and re-posts the provider refused for
 * want of resources (-FI_EAGAIN); true while some remain queued. */
DDS_HIDDEN bool dds_fab_serve_pass(struct dds_fabric *F);
/* Free the serving side; after F->t_ep is closed, before the domain. */
DDS_HIDDEN void dds_fab_serve_free(struct dds_fabric *F);

/* ---- fabric_read.c (used by fabric_gather.c, fabric_transport.c) ---------------------- */

/* Drain the initiator CQ once, handing completions to their operations;
 * `block`: wait on the CQ's descriptor up to 1 ms instead of spinning. */
DDS_HIDDEN void dds_fab_drain_cq(struct dds_fabric *F, bool block);
/* Validate transfers against the shards and the store's state (the
 * transport table's read and gather do, before dds_fab_read/_gather). */
DDS_HIDDEN int dds_fab_check_ops(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops);
/* Read remote ops, checked by dds_fab_check_ops, with fi_read; thread-safe;
 * data complete on return. */
DDS_HIDDEN int dds_fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops);
/* End a read that saw no completion for F->read_timeout_ns: mark the
 * store broken (the provider still holds its operations) and set
 * DDS_ETIMEDOUT naming `what` ("reads"), the `awaited` event and the
 * group rank waited for. */
DDS_HIDDEN int dds_fab_timed_out(struct dds_fabric *F, const char *what, const char *awaited, int owner);
/* A reader's check, every 2 s once stuck since `*stuck_since` (ns; 0: not
 * stuck), whether the publication was withdrawn: then true (the error is
 * set and the store marked broken). `*last_check` is the caller's. */
DDS_HIDDEN bool dds_fab_withdrawn(struct dds_fabric *F, uint64_t stuck_since, uint64_t *last_check);

/* ---- fabric_gather.c -------------------------------------------------------------- */

/* Owner-side gather of remote ops (grouped by owner; checked by
 * dds_fab_check_ops): one request per owner (more when over
 * DDS_GATHER_MAX_ENTRIES or _MAX_REPLY), replies scattered into the ops'
 * dst. Thread-safe; data complete on return. */
DDS_HIDDEN int dds_fab_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops);
/* The same for several variables' ops (nops[i] ops of vars[i], each list
 * grouped by owner and checked) at once: one request per owner carries the
 * transfers of every variable. */
DDS_HIDDEN int dds_fab_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops,
                                   const size_t *nops, size_t nvars);

/* ---- fabric_transport.c ----------------------------------------------------------- */

/* dds_transport_fabric without gather (no tagged messages here). */
DDS_HIDDEN extern const dds_transport dds_transport_fabric_onesided;

/* ---- fabric_publish.c ------------------------------------------------------------- */

DDS_HIDDEN run_token *dds_fab_token_get(const uint8_t *run_id, bool create);
DDS_HIDDEN void dds_fab_token_put(run_token *t, bool kill_run);
DDS_HIDDEN int dds_fab_hostname_of(char *buf, size_t cap);
DDS_HIDDEN int dds_fab_publish_store(dds_store *s, struct dds_fabric *F, int n, uint16_t *alen, uint8_t **addr);
DDS_HIDDEN void dds_fab_var_file_name(uint32_t index, char name[32]);
DDS_HIDDEN void dds_fab_withdraw(struct dds_fabric *F);
DDS_HIDDEN int dds_fab_still_current(struct dds_fabric *F);

#endif /* DDSTORE_FABRIC_INTERNAL_H */
