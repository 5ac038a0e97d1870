/* Reads of methods 1 and 2 (the shared initiator endpoint and its
 * completion queue are described in fabric.c), and receive buffers. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric_internal.h"

/* ---- reads ------------------------------------------------------------------------- */

struct read_batch;

/* Per-operation context: the provider may use `ctx` as scratch space
 * (FI_CONTEXT/FI_CONTEXT2), so each operation in flight owns one. */
typedef struct read_slot {
    fab_ctx c; /* first: completions find the slot through it */
    struct read_batch *batch;
    _Atomic int busy;
    int owner;
    int64_t offset; /* of the first transfer, for error messages */
    size_t len;     /* of all transfers */
    int niov;
    struct iovec iov[MAX_IOV];
    struct fi_rma_iov rma[MAX_IOV];
    void *desc[MAX_IOV];
} read_slot;

/* One read call's operations. On the heap: a reader whose core group has
 * vanished gives up on operations the provider still holds, and leaves
 * the batch to them (see gave_up). */
typedef struct read_batch {
    _Atomic int pending;
    _Atomic uint64_t completions; /* progress, for the read deadline */
    int err;            /* first failure (written under cq_lock) */
    char msg[512];
    int nslots;
    read_slot slots[];
} read_batch;

/* Hand one completion to its read. The slot is freed before the count
 * drops: once `pending` reaches 0 the owning thread may return and free
 * the batch. */
static void complete_slot(read_slot *sl, const char *errmsg)
{
    read_batch *b = sl->batch;
    if (errmsg && b->err == DDS_OK) {
        b->err = DDS_EFABRIC;
        snprintf(b->msg, sizeof b->msg, "fi_read of %zu bytes at offset %lld of group rank %d's shard failed: %s",
                 sl->len, (long long)sl->offset, sl->owner, errmsg);
    }
    atomic_store_explicit(&sl->busy, 0, memory_order_release);
    atomic_fetch_add_explicit(&b->completions, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->pending, 1, memory_order_acq_rel);
}

static void slot_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err)
{
    (void)e;
    complete_slot((read_slot *)c, err);
}

/* How long one blocking wait on the CQ's descriptor lasts at most before
 * the caller looks at its deadlines again. Longer than the scheduler tick
 * (4 ms at HZ=250): a shorter timeout is the CPU's next timer, which the
 * kernel reprograms on every sleep and wake-up (measured over tcp, 2
 * hosts x 2 ranks: a 1 ms timeout cost the reader 6 us of CPU per
 * 64-byte-row batch, 4, 10 and 100 ms none). Completions wake it at once. */
#define BLOCK_MS 10

/* Drain the initiator CQ once. Whichever thread gets the lock serves
 * everyone's completions (reads, gather requests and replies, through
 * their contexts); the others step aside. `block`: nothing came for a
 * while, so wait on the CQ's descriptor (up to BLOCK_MS) instead of
 * spinning. */
void dds_fab_drain_cq(struct dds_fabric *F, bool block)
{
    if (pthread_mutex_trylock(&F->cq_lock) != 0) {
        if (block && F->cq_wait)
            sleep_s(20e-6);
        else
            sched_yield();
        return;
    }
    struct fi_cq_tagged_entry e[16];
    ssize_t n = fi_cq_read(F->cq, e, 16);
    if (n == -FI_EAGAIN && block && F->cq_wait)
        n = fi_cq_sread(F->cq, e, 16, NULL, BLOCK_MS);
    if (n > 0) {
        for (ssize_t i = 0; i < n; i++) {
            fab_ctx *c = e[i].op_context;
            c->complete(c, &e[i], NULL);
        }
    } else if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof ee);
        if (fi_cq_readerr(F->cq, &ee, 0) == 1) {
            char pbuf[256], msg[400];
            const char *pm = fi_cq_strerror(F->cq, ee.prov_errno, ee.err_data, pbuf, sizeof pbuf);
            snprintf(msg, sizeof msg, "%s (provider: %s)", fi_strerror(ee.err), pm ? pm : "no detail");
            if (ee.op_context) {
                fab_ctx *c = ee.op_context;
                c->complete(c, NULL, msg);
            } else {
                dds_debug("fabric: completion error without context: %s", msg);
            }
        }
    } else if (n != -FI_EAGAIN && n < 0) {
        dds_debug("fabric: fi_cq_read: %s", fi_strerror((int)-n));
    }
    pthread_mutex_unlock(&F->cq_lock);
    if (n == -FI_EAGAIN && !(block && F->cq_wait))
        sched_yield();
}

/* Completions arrive within microseconds on a fast fabric: spin briefly
 * (F->spin_ns), then block. */
typedef struct waiter {
    uint64_t since;
    uint64_t stuck_since; /* first wait of this call without the reset of a posted op */
    uint64_t last_check;
    uint64_t progress_at; /* last time a completion of this call was seen */
    uint64_t seen;        /* completions counted then */
} waiter;

static void wait_some(struct dds_fabric *F, waiter *w)
{
    uint64_t t = dds_now_ns();
    if (w->since == 0)
        w->since = t;
    if (w->stuck_since == 0)
        w->stuck_since = t;
    dds_fab_drain_cq(F, t - w->since >= F->spin_ns);
}

/* A reader cannot tell a slow core rank from a dead one, and some
 * providers (tcp;ofi_rxm) retry connecting to a vanished endpoint forever.
 * So a reader waiting for more than 2 s re-reads the publication every 2 s:
 * once it is withdrawn or stale, the reads can never complete. Core stores
 * never give up (their peers are in the same MPI job). */
bool dds_fab_withdrawn(struct dds_fabric *F, uint64_t stuck_since, uint64_t *last_check)
{
    if (!F->is_reader || stuck_since == 0)
        return false;
    uint64_t t = dds_now_ns();
    if (t - stuck_since < 2000000000ull || t - *last_check < 2000000000ull)
        return false;
    *last_check = t;
    if (dds_fab_still_current(F) != 0)
        return false;
    atomic_store(&F->broken, 1);
    dds_err(DDS_EFABRIC,
            "reads from the store published in '%s' did not complete and its core group has "
            "withdrawn the publication (store freed or job ended); join again",
            F->pubdir);
    return true;
}

static bool gave_up(struct dds_fabric *F, waiter *w)
{
    return dds_fab_withdrawn(F, w->stuck_since, &w->last_check);
}


/* True once the call has seen no completion for read_timeout_ns. */
static bool stalled(struct dds_fabric *F, waiter *w, read_batch *b)
{
    if (F->read_timeout_ns == 0)
        return false;
    uint64_t t = dds_now_ns();
    uint64_t c = atomic_load_explicit(&b->completions, memory_order_relaxed);
    if (w->progress_at == 0 || c != w->seen) {
        w->progress_at = t;
        w->seen = c;
        return false;
    }
    return t - w->progress_at > F->read_timeout_ns;
}

static int read_timed_out(struct dds_fabric *F, read_batch *b)
{
    int owner = -1;
    for (int i = 0; i < b->nslots && owner < 0; i++)
        if (atomic_load(&b->slots[i].busy))
            owner = b->slots[i].owner;
    return dds_fab_timed_out(F, "reads", "completion", owner);
}

int dds_fab_timed_out(struct dds_fabric *F, const char *what, const char *awaited, int owner)
{
    /* The provider still holds the operations: the endpoint cannot be
     * trusted for new reads. */
    atomic_store(&F->broken, 1);
    return dds_err(DDS_ETIMEDOUT,
                   "%s%s%s did not complete: no %s for %.1f s (DDSTORE_READ_TIMEOUT_S) while waiting for "
                   "group rank %d, which is dead or stuck; this store can no longer read: free it (a reader "
                   "may join again)",
                   what, F->pubdir ? " from the store published in " : "", F->pubdir ? F->pubdir : "", awaited,
                   (double)F->read_timeout_ns * 1e-9, owner);
}

/* One wait of a reader for a slot or a completion: 0 after waiting a
 * little, or the error that ends the read (the group vanished, or no
 * progress within the read deadline); the batch is then abandoned. */
static int wait_or_fail(struct dds_fabric *F, waiter *w, read_batch *b)
{
    if (gave_up(F, w))
        return DDS_EFABRIC; /* dds_fab_withdrawn set the message */
    if (stalled(F, w, b))
        return read_timed_out(F, b);
    wait_some(F, w);
    return DDS_OK;
}

static void wait_reset(waiter *w) { w->since = 0; }

static const recv_reg *find_recv(const struct dds_fabric *F, const char *dst, size_t len)
{
    for (size_t i = 0; i < F->nrecv; i++) {
        const recv_reg *r = &F->recv[i];
        if (dst >= r->addr && (size_t)(dst - r->addr) <= r->len && len <= r->len - (size_t)(dst - r->addr))
            return r;
    }
    return NULL;
}

/* Destination registrations made for one call. */
typedef struct call_mr {
    char *lo, *hi;
    struct fid_mr *mr;
} call_mr;

static int cmp_range(const void *a, const void *b)
{
    const call_mr *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Register, for this call only, the destinations not covered by
 * dds_register_recv(): touching or overlapping ranges are merged first (a
 * batch into one buffer becomes one registration); ranges with a gap are
 * never bridged, since the gap may not be mapped memory. */
static int register_call_dsts(struct dds_fabric *F, const dds_read_op *ops, size_t nops, call_mr **out,
                              size_t *nout, void **desc)
{
    *out = NULL;
    *nout = 0;
    size_t n = 0;
    call_mr *r = malloc((nops ? nops : 1) * sizeof *r);
    if (!r)
        return dds_err(DDS_ENOMEM, "out of memory registering destinations");
    for (size_t i = 0; i < nops; i++) {
        const recv_reg *rr = find_recv(F, ops[i].dst, (size_t)ops[i].len);
        desc[i] = rr && rr->mr ? fi_mr_desc(rr->mr) : NULL;
        if (rr || ops[i].len == 0)
            continue;
        r[n++] = (call_mr){ .lo = ops[i].dst, .hi = ops[i].dst + ops[i].len, .mr = NULL };
    }
    if (n == 0) {
        free(r);
        return DDS_OK;
    }
    qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        int rc = dds_fab_reg_mr(F, r[i].lo, (size_t)(r[i].hi - r[i].lo), FI_READ, F->ep, &r[i].mr);
        if (rc) {
            for (size_t j = 0; j < i; j++)
                fi_close(&r[j].mr->fid);
            free(r);
            return rc;
        }
    }
    for (size_t i = 0; i < nops; i++) {
        if (desc[i] || ops[i].len == 0 || find_recv(F, ops[i].dst, (size_t)ops[i].len))
            continue;
        /* Binary search for the merged range holding ops[i].dst. */
        size_t lo = 0, hi = m;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (r[mid].lo <= ops[i].dst)
                lo = mid;
            else
                hi = mid;
        }
        desc[i] = fi_mr_desc(r[lo].mr);
    }
    *out = r;
    *nout = m;
    return DDS_OK;
}

/* Operations needed for `ops`: transfers of one owner that each fit in
 * one message share an operation, up to F->iov of them; longer ones are
 * split at max_msg. */
static size_t count_posts(const struct dds_fabric *F, const dds_read_op *ops, size_t nops)
{
    size_t n = 0;
    for (size_t i = 0; i < nops;) {
        if (ops[i].len == 0) {
            i++;
        } else if (F->iov > 1 && (size_t)ops[i].len <= F->max_msg) {
            int k = 0;
            size_t sum = 0;
            int owner = ops[i].owner;
            while (i < nops && k < F->iov && ops[i].owner == owner && (size_t)ops[i].len <= F->max_msg - sum) {
                sum += (size_t)ops[i].len;
                k += ops[i].len > 0;
                i++;
            }
            n++;
        } else {
            n += ((size_t)ops[i].len + F->max_msg - 1) / F->max_msg;
            i++;
        }
    }
    return n;
}

/* Fill slot `sl` with the next operation starting at ops[*i] (`*done`
 * bytes of it already posted) and advance the cursor past it. */
static void fill_slot(const struct dds_fabric *F, const struct dds_fabric_var *FV, read_slot *sl,
                      const dds_read_op *ops, size_t nops, void **desc, size_t *i, size_t *done)
{
    const dds_read_op *op = &ops[*i];
    sl->owner = op->owner;
    sl->offset = op->src_offset + (int64_t)*done;
    sl->niov = 0;
    sl->len = 0;
    if (F->iov > 1 && *done == 0 && (size_t)op->len <= F->max_msg) {
        while (*i < nops && sl->niov < F->iov && ops[*i].owner == op->owner &&
               (size_t)ops[*i].len <= F->max_msg - sl->len) {
            const dds_read_op *o = &ops[*i];
            if (o->len > 0) {
                int k = sl->niov++;
                sl->iov[k] = (struct iovec){ .iov_base = o->dst, .iov_len = (size_t)o->len };
                sl->rma[k] = (struct fi_rma_iov){ .addr = FV->raddr[o->owner] + (uint64_t)o->src_offset,
                                                  .len = (size_t)o->len,
                                                  .key = FV->key[o->owner] };
                sl->desc[k] = desc ? desc[*i] : NULL;
                sl->len += (size_t)o->len;
            }
            (*i)++;
        }
        return;
    }
    size_t total = (size_t)op->len;
    size_t chunk = total - *done < F->max_msg ? total - *done : F->max_msg;
    sl->niov = 1;
    sl->iov[0] = (struct iovec){ .iov_base = op->dst + *done, .iov_len = chunk };
    sl->rma[0] = (struct fi_rma_iov){ .addr = FV->raddr[op->owner] + (uint64_t)op->src_offset + *done,
                                      .len = chunk,
                                      .key = FV->key[op->owner] };
    sl->desc[0] = desc ? desc[*i] : NULL;
    sl->len = chunk;
    *done += chunk;
    if (*done == total) {
        (*i)++;
        *done = 0;
    }
}

static ssize_t post_slot(struct dds_fabric *F, read_slot *sl, bool have_desc)
{
    if (sl->niov == 1)
        return fi_read(F->ep, sl->iov[0].iov_base, sl->iov[0].iov_len, sl->desc[0], F->peer[sl->owner],
                       sl->rma[0].addr, sl->rma[0].key, &sl->c.ctx);
    struct fi_msg_rma msg = {
        .msg_iov = sl->iov,
        .desc = have_desc ? sl->desc : NULL,
        .iov_count = (size_t)sl->niov,
        .addr = F->peer[sl->owner],
        .rma_iov = sl->rma,
        .rma_iov_count = (size_t)sl->niov,
        .context = &sl->c.ctx,
        .data = 0,
    };
    return fi_readmsg(F->ep, &msg, 0);
}

static int read_ops(struct dds_fabric *F, struct dds_fabric_var *FV, const dds_read_op *ops, size_t nops,
                    void **desc)
{
    size_t nposts = count_posts(F, ops, nops);
    if (nposts == 0)
        return DDS_OK;
    int nslots = nposts < (size_t)F->inflight ? (int)nposts : F->inflight;
    /* malloc, not calloc: only the fields below need a value before use. */
    read_batch *bp = malloc(sizeof *bp + (size_t)nslots * sizeof(read_slot));
    if (!bp)
        return dds_err(DDS_ENOMEM, "out of memory for %d read contexts", nslots);
    read_batch *const b = bp;
    read_slot *slots = b->slots;
    atomic_init(&b->pending, 0);
    atomic_init(&b->completions, 0);
    b->err = DDS_OK;
    b->msg[0] = '\0';
    b->nslots = nslots;
    for (int i = 0; i < nslots; i++) {
        atomic_init(&slots[i].busy, 0);
        slots[i].batch = b;
        slots[i].c.complete = slot_done;
        slots[i].owner = -1;
    }
    int post_rc = DDS_OK;
    int next = 0; /* where to look for a free slot */
    waiter w = { 0 };
    size_t i = 0, done = 0; /* cursor: next transfer and bytes of it posted */
    while (i < nops && post_rc == DDS_OK) {
        if (ops[i].len == 0) {
            i++;
            continue;
        }
        read_slot *sl = NULL;
        while (!sl) {
            for (int k = 0; k < nslots; k++) {
                int idx = (next + k) % nslots;
                if (!atomic_load_explicit(&slots[idx].busy, memory_order_acquire)) {
                    sl = &slots[idx];
                    next = (idx + 1) % nslots;
                    break;
                }
            }
            if (!sl && (post_rc = wait_or_fail(F, &w, b)))
                goto abandoned;
        }
        wait_reset(&w);
        fill_slot(F, FV, sl, ops, nops, desc, &i, &done);
        atomic_store(&sl->busy, 1);
        atomic_fetch_add(&b->pending, 1);
        for (;;) {
            ssize_t r = post_slot(F, sl, desc != NULL);
            if (r == 0) {
                wait_reset(&w);
                break;
            }
            if (r == -FI_EAGAIN) {
                if ((post_rc = wait_or_fail(F, &w, b))) {
                    atomic_store(&sl->busy, 0);
                    atomic_fetch_sub(&b->pending, 1);
                    goto abandoned;
                }
                continue;
            }
            atomic_store(&sl->busy, 0);
            atomic_fetch_sub(&b->pending, 1);
            post_rc = dds_fab_err((int)r, sl->niov > 1 ? "fi_readmsg" : "fi_read");
            break;
        }
    }
    wait_reset(&w);
    while (atomic_load_explicit(&b->pending, memory_order_acquire) > 0) {
        int wrc = wait_or_fail(F, &w, b); /* post_rc may hold a failed post: keep it */
        if (wrc) {
            post_rc = wrc;
            goto abandoned;
        }
    }
    int rc = post_rc ? post_rc : b->err ? dds_err(b->err, "%s", b->msg) : DDS_OK;
    free(b);
    return rc;
abandoned:
    /* Operations may still complete into this batch: it is never freed. */
    if (atomic_load(&b->pending) == 0)
        free(b);
    return post_rc;
}

int dds_fab_check_ops(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops)
{
    struct dds_fabric *F = s->fab;
    struct dds_fabric_var *FV = v->fab;
    if (!F || !FV)
        return dds_err(DDS_ESTATE, "variable '%s': libfabric transport is not open", v->name);
    if (atomic_load(&F->broken))
        return dds_err(DDS_ESTATE, "variable '%s': an earlier read from '%s' failed for good; join again",
                       v->name, F->pubdir);
    if (s->is_reader && F->token && !atomic_load(&F->token->alive))
        return dds_err(DDS_ESTATE, "variable '%s': the core group's store in '%s' was freed; join again",
                       v->name, F->pubdir);
    int npeers = F->npeers;
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op *op = &ops[i];
        if (op->owner < 0 || op->owner >= npeers || op->src_offset < 0 || op->len < 0 ||
            (uint64_t)op->src_offset > FV->len[op->owner] ||
            (uint64_t)op->len > FV->len[op->owner] - (uint64_t)op->src_offset || (!op->dst && op->len))
            return dds_err(DDS_ERANGE,
                           "variable '%s': transfer of %lld bytes at offset %lld of rank %d is outside "
                           "its shard",
                           v->name, (long long)op->len, (long long)op->src_offset, op->owner);
    }
    return DDS_OK;
}

int dds_fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops)
{
    int rc = DDS_OK;
    struct dds_fabric *F = s->fab;
    struct dds_fabric_var *FV = v->fab;
    if (nops == 0)
        return DDS_OK;
    if (F->serialize)
        pthread_mutex_lock(&F->read_lock);
    /* Held for reading across the call: unregister_recv waits until no
     * read uses the registration it removes. */
    pthread_rwlock_rdlock(&F->recv_lock);
    void **desc = NULL;
    call_mr *cm = NULL;
    size_t ncm = 0;
    if (F->local_mr) {
        desc = calloc(nops, sizeof *desc);
        rc = desc ? register_call_dsts(F, ops, nops, &cm, &ncm, desc)
                  : dds_err(DDS_ENOMEM, "out of memory for %zu descriptors", nops);
    }
    if (rc == DDS_OK)
        rc = read_ops(F, FV, ops, nops, desc);
    for (size_t i = 0; i < ncm; i++)
        fi_close(&cm[i].mr->fid);
    free(cm);
    free(desc);
    pthread_rwlock_unlock(&F->recv_lock);
    if (F->serialize)
        pthread_mutex_unlock(&F->read_lock);
    if (rc)
        return rc;
    return DDS_OK;
}

/* ---- receive buffers ------------------------------------------------------------------ */

int dds_fab_register_recv(dds_store *s, void *buf, size_t len)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    if (!buf || len == 0)
        return dds_err(DDS_EINVAL, "receive buffer is NULL or empty");
    pthread_rwlock_wrlock(&F->recv_lock);
    int rc = DDS_OK;
    for (size_t i = 0; i < F->nrecv; i++) {
        if (F->recv[i].addr == buf) {
            if (F->recv[i].len == len)
                F->recv[i].refs++;
            else
                rc = dds_err(DDS_EEXIST,
                             "buffer %p is already registered with %zu bytes (not %zu): unregister it first",
                             buf, F->recv[i].len, len);
            pthread_rwlock_unlock(&F->recv_lock);
            return rc;
        }
    }
    if (F->nrecv == F->recv_cap) {
        size_t cap = F->recv_cap ? 2 * F->recv_cap : 8;
        recv_reg *r = realloc(F->recv, cap * sizeof *r);
        if (!r) {
            pthread_rwlock_unlock(&F->recv_lock);
            return dds_err(DDS_ENOMEM, "out of memory registering a receive buffer");
        }
        F->recv = r;
        F->recv_cap = cap;
    }
    recv_reg r = { .addr = buf, .len = len, .mr = NULL, .refs = 1 };
    if (F->local_mr)
        rc = dds_fab_reg_mr(F, buf, len, FI_READ, F->ep, &r.mr);
    if (rc == DDS_OK)
        F->recv[F->nrecv++] = r;
    pthread_rwlock_unlock(&F->recv_lock);
    return rc;
}

int dds_fab_unregister_recv(dds_store *s, void *buf)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    pthread_rwlock_wrlock(&F->recv_lock);
    int rc = dds_err(DDS_ENOENT, "buffer %p is not registered", buf);
    for (size_t i = 0; i < F->nrecv; i++) {
        if (F->recv[i].addr != buf)
            continue;
        if (--F->recv[i].refs == 0) {
            if (F->recv[i].mr)
                fi_close(&F->recv[i].mr->fid);
            F->recv[i] = F->recv[--F->nrecv];
        }
        dds_err_clear();
        rc = DDS_OK;
        break;
    }
    pthread_rwlock_unlock(&F->recv_lock);
    return rc;
}
