/* Owner-side gather, the reader's side (methods 1 and 2; the owner's side
 * is fabric_serve.c, the rule that chooses it gather.c).
 *
 * A read's remote transfers (grouped by owner) become one request per
 * owner: the variable's index, the (offset, length) of each transfer in
 * the owner's shard, the reply tag and this endpoint's address; or, where
 * every rank maps its node peers' shards, one request per node (version
 * 4, plan_by_node: the owner of each run of rows named, served by one rank
 * of the node from node shared memory). A request
 * holds at most DDS_GATHER_MAX_ENTRIES transfers and asks for at most
 * DDS_GATHER_MAX_REPLY bytes (longer transfers are cut), so a batch of
 * small rows is one request per owner. For each request the receive of the
 * reply is posted before the request is sent; the reply lands straight in
 * the destination when the request is one transfer (and the provider
 * needs no local registration), else in a bounce buffer scattered on
 * arrival. Up to WINDOW requests (and WINDOW_BYTES of replies) are in
 * flight per call, to any mix of owners.
 *
 * Waits: completions come through the shared initiator CQ (fabric_read.c
 * drains it and hands each to its request through the context), blocking
 * on its file descriptor after a spin of DDSTORE_FABRIC_SPIN_US (default
 * 50 us; without a descriptor, shm: sleeping 50 us between polls after
 * 1 ms), so a waiting reader leaves the CPU to the threads it waits for.
 * The read deadline (DDSTORE_READ_TIMEOUT_S, F->read_timeout_ns) bounds
 * the time without a completion; a reader (method 2) also gives up once
 * the publication is withdrawn. Either ends the read with an error naming the owner, cancels
 * the receives still posted and marks the store broken, as fi_read does.
 * Thread-safe: tags come from one atomic counter. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fabric_internal.h"

#define WINDOW 64
#define WINDOW_BYTES ((uint64_t)64 << 20)

typedef struct piece {
    dds_var *var;
    char *dst;
    uint64_t offset;
    uint64_t len;
    uint32_t row, nrows; /* whole rows (set by compact_words) */
} piece;

struct gcall;

typedef struct greq {
    fab_ctx rc; /* the reply's receive */
    fab_ctx sc; /* the request's send */
    struct gcall *call;
    int owner; /* the rank the request goes to: the owner, or its node's serving rank */
    size_t first, npieces;
    uint64_t bytes;
    uint64_t tag;
    uint32_t node_words; /* > 0: a version-4 request of that many words (rows of a whole node) */
    char *bounce; /* NULL: the reply lands in the one piece's dst */
    bool own_bounce; /* malloc'd for this request (else in the thread's scratch) */
    char *msg;
    size_t msglen;
    struct fid_mr *bmr, *smr;
    _Atomic int left; /* completions still to come */
    /* Written by the completing thread before `left` drops. */
    int err;
    bool err_reply;
    size_t got;
    char errmsg[320];
} greq;

typedef struct gcall {
    _Atomic uint64_t completions;
} gcall;

static greq *of_rc(fab_ctx *c) { return (greq *)((char *)c - offsetof(greq, rc)); }
static greq *of_sc(fab_ctx *c) { return (greq *)((char *)c - offsetof(greq, sc)); }

static void note(greq *q, const char *fmt, const char *detail)
{
    if (q->err)
        return;
    q->err = DDS_EFABRIC;
    snprintf(q->errmsg, sizeof q->errmsg, fmt, detail);
}

static void finish_one(greq *q)
{
    gcall *call = q->call;
    atomic_fetch_add_explicit(&call->completions, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&q->left, 1, memory_order_acq_rel);
}

static void reply_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err)
{
    greq *q = of_rc(c);
    if (err) {
        note(q, "receiving the reply failed: %s", err);
    } else {
        q->got = e->len;
        q->err_reply = (e->tag & DDS_GATHER_ERR_TAG) != 0;
    }
    finish_one(q);
}

static void send_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err)
{
    (void)e;
    greq *q = of_sc(c);
    if (err)
        note(q, "sending the request failed: %s", err);
    finish_one(q);
}

static void free_req(greq *q)
{
    if (q->bmr)
        fi_close(&q->bmr->fid);
    if (q->smr)
        fi_close(&q->smr->fid);
    if (q->own_bounce)
        free(q->bounce);
    free(q->msg);
    free(q);
}

/* Waits of one call: spin F->spin_ns, then block; errors at the deadline. */
typedef struct gwait {
    uint64_t since, progress_at, seen, stuck_since, last_check;
} gwait;

static int owner_of_first_pending(greq **reqs, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        if (reqs[i] && atomic_load(&reqs[i]->left) > 0)
            return reqs[i]->owner;
    return -1;
}

/* Wait a little; an error once the deadline passes without completion or
 * the publication is withdrawn (the message names the owner). */
static int wait_some(struct dds_fabric *F, gcall *call, gwait *w, greq **reqs, size_t lo, size_t hi)
{
    uint64_t t = dds_now_ns();
    if (w->since == 0)
        w->since = t;
    if (w->stuck_since == 0)
        w->stuck_since = t;
    uint64_t c = atomic_load_explicit(&call->completions, memory_order_relaxed);
    if (w->progress_at == 0 || c != w->seen) {
        w->progress_at = t;
        w->seen = c;
    } else if (F->read_timeout_ns && t - w->progress_at > F->read_timeout_ns) {
        return dds_fab_timed_out(F, "owner-side gather", "reply", owner_of_first_pending(reqs, lo, hi));
    }
    if (dds_fab_withdrawn(F, w->stuck_since, &w->last_check))
        return DDS_EFABRIC;
    dds_fab_drain_cq(F, t - w->since >= F->spin_ns);
    /* No descriptor to block on (shm): back off instead of spinning once
     * the reply is late. */
    if (!F->cq_wait && t - w->since > 1000000)
        sleep_s(50e-6);
    return DDS_OK;
}

/* Words of pieces [first, first + npieces) in version 3
 * (DDS_GATHER_VERSION_ROWS), or 0 where that form does not apply: a joined
 * reader (the owners' library may be older), or a piece that is not whole
 * rows at row boundaries (a transfer cut at the reply limit), or a row
 * number beyond 32 bits. Sets each piece's row and nrows. */
static size_t compact_words(const struct dds_fabric *F, size_t first, size_t npieces, piece *pc)
{
    if (F->is_reader)
        return 0;
    size_t words = 0;
    uint64_t unit = 0, recip = 0;
    for (size_t i = first; i < first + npieces; i++) {
        if (i == first || pc[i].var != pc[i - 1].var) {
            unit = (uint64_t)pc[i].var->row_bytes;
            if (unit == 0 || unit > UINT32_MAX)
                return 0;
            /* offset / unit by a multiplication (a 64-bit division per
             * row showed in profiles): ceil(2^64 / unit) gives the exact
             * quotient of every multiple of unit below 2^63; anything
             * else fails the check below and takes the other form. */
            recip = unit == 1 ? 0 : UINT64_MAX / unit + 1;
        }
#ifdef __SIZEOF_INT128__
        uint64_t row = unit == 1 ? pc[i].offset : (uint64_t)(((unsigned __int128)pc[i].offset * recip) >> 64);
#else
        uint64_t row = pc[i].offset / unit;
        (void)recip;
#endif
        uint64_t n = pc[i].len == unit ? 1 : pc[i].len / unit;
        if (row * unit != pc[i].offset || n * unit != pc[i].len || row + n > UINT32_MAX)
            return 0;
        pc[i].row = (uint32_t)row;
        pc[i].nrows = (uint32_t)n;
        if (i == first || pc[i].var != pc[i - 1].var)
            words += 3;
        words += (size_t)n;
    }
    return words;
}

/* Write request `q`'s entries: version 4 words when q->node_words (a run
 * per variable and owner), version 3 words when `words`, else
 * dds_gather_ent with a variable switch ahead of each run of another
 * variable's pieces (requests of one variable carry none). */
static void fill_entries(char *at, const greq *q, const piece *pc, const int *owner, size_t words)
{
    if (q->node_words) {
        uint32_t *w = (uint32_t *)at, *count = NULL;
        for (size_t i = q->first; i < q->first + q->npieces; i++) {
            if (i == q->first || pc[i].var != pc[i - 1].var || owner[i] != owner[i - 1]) {
                *w++ = pc[i].var->fab->index;
                *w++ = (uint32_t)pc[i].var->row_bytes;
                *w++ = (uint32_t)owner[i];
                count = w++;
                *count = 0;
            }
            for (uint32_t r = 0; r < pc[i].nrows; r++)
                *w++ = pc[i].row + r;
            *count += pc[i].nrows;
        }
        return;
    }
    if (words) {
        uint32_t *w = (uint32_t *)at, *count = NULL;
        for (size_t i = q->first; i < q->first + q->npieces; i++) {
            uint32_t unit = (uint32_t)pc[i].var->row_bytes;
            if (i == q->first || pc[i].var != pc[i - 1].var) {
                *w++ = pc[i].var->fab->index;
                *w++ = unit;
                count = w++;
                *count = 0;
            }
            for (uint32_t r = 0; r < pc[i].nrows; r++)
                *w++ = pc[i].row + r;
            *count += pc[i].nrows;
        }
        return;
    }
    dds_gather_ent *ents = (dds_gather_ent *)at;
    for (size_t i = q->first, e = 0; i < q->first + q->npieces; i++) {
        if (i > q->first && pc[i].var != pc[i - 1].var)
            ents[e++] = (dds_gather_ent){ .offset = pc[i].var->fab->index, .len = DDS_GATHER_VAR_SWITCH };
        ents[e++] = (dds_gather_ent){ .offset = pc[i].offset, .len = pc[i].len };
    }
}

/* Build and post request `q` (its receive, then its send). */
static int post_req(struct dds_fabric *F, greq *q, piece *pc, const int *owner, char *bounce, gcall *call,
                    gwait *w, greq **reqs, size_t lo, size_t hi)
{
    size_t apad = (F->my_alen + 7) & ~(size_t)7;
    size_t nswitch = 0, nent = 0, words = q->node_words;
    if (!words) {
        for (size_t i = q->first + 1; i < q->first + q->npieces; i++)
            nswitch += pc[i].var != pc[i - 1].var;
        nent = q->npieces + nswitch;
        words = compact_words(F, q->first, q->npieces, pc);
        /* Runs of many rows: the (offset, length) form is shorter. */
        if (words * sizeof(uint32_t) >= nent * sizeof(dds_gather_ent) || words > DDS_GATHER_MAX_WORDS ||
            sizeof(dds_gather_req) + apad + words * sizeof(uint32_t) > DDS_GATHER_REQ_BYTES)
            words = 0;
    }
    q->msglen = sizeof(dds_gather_req) + apad + (words ? words * sizeof(uint32_t) : nent * sizeof(dds_gather_ent));
    q->msg = calloc(1, q->msglen);
    bool direct = q->npieces == 1 && !F->local_mr;
    if (!direct && bounce) {
        q->bounce = bounce;
    } else if (!direct) {
        q->bounce = malloc((size_t)q->bytes);
        q->own_bounce = true;
    }
    if (!q->msg || (!direct && !q->bounce))
        return dds_err(DDS_ENOMEM, "out of memory for a gather request of %llu bytes",
                       (unsigned long long)q->bytes);
    dds_gather_req h = { .magic = DDS_GATHER_MAGIC,
                         .version = q->node_words ? DDS_GATHER_VERSION_NODE_ROWS
                                    : words       ? DDS_GATHER_VERSION_ROWS
                                    : nswitch     ? DDS_GATHER_VERSION
                                                  : DDS_GATHER_VERSION_ONE_VAR,
                         .alen = (uint16_t)F->my_alen,
                         .var_index = pc[q->first].var->fab->index,
                         .nent = (uint32_t)(words ? words : nent),
                         .reply_tag = q->tag,
                         .reply_bytes = q->bytes };
    memcpy(q->msg, &h, sizeof h);
    memcpy(q->msg + sizeof h, F->my_addr, F->my_alen);
    fill_entries(q->msg + sizeof h + apad, q, pc, owner, words);
    int rc;
    if (F->local_mr) {
        if ((rc = dds_fab_reg_mr(F, q->bounce, (size_t)q->bytes, FI_RECV, F->ep, &q->bmr)) ||
            (rc = dds_fab_reg_mr(F, q->msg, q->msglen, FI_SEND, F->ep, &q->smr)))
            return rc;
    }
    char *into = direct ? pc[q->first].dst : q->bounce;
    bool inject = q->msglen <= F->inject;
    atomic_store(&q->left, inject ? 1 : 2);
    for (;;) {
        ssize_t r = fi_trecv(F->ep, into, (size_t)q->bytes, q->bmr ? fi_mr_desc(q->bmr) : NULL, FI_ADDR_UNSPEC,
                             q->tag, DDS_GATHER_ERR_TAG, &q->rc.ctx);
        if (r == 0)
            break;
        if (r != -FI_EAGAIN) {
            atomic_store(&q->left, 0);
            return dds_fab_err((int)r, "fi_trecv (gather reply)");
        }
        if ((rc = wait_some(F, call, w, reqs, lo, hi)))
            return rc; /* nothing of q is posted */
    }
    for (;;) {
        ssize_t r = inject ? fi_tinject(F->ep, q->msg, q->msglen, F->peer[q->owner], DDS_GATHER_REQ_TAG)
                           : fi_tsend(F->ep, q->msg, q->msglen, q->smr ? fi_mr_desc(q->smr) : NULL,
                                      F->peer[q->owner], DDS_GATHER_REQ_TAG, &q->sc.ctx);
        if (r == 0)
            return DDS_OK;
        if (r != -FI_EAGAIN) {
            /* The receive is posted: cancel it; its completion (an error)
             * ends the request. */
            note(q, "sending the request failed: %s", fi_strerror((int)-r));
            if (!inject)
                atomic_fetch_sub(&q->left, 1);
            fi_cancel(&F->ep->fid, &q->rc.ctx);
            return DDS_OK;
        }
        if ((rc = wait_some(F, call, w, reqs, lo, hi))) {
            if (!inject)
                atomic_fetch_sub(&q->left, 1);
            fi_cancel(&F->ep->fid, &q->rc.ctx);
            return rc;
        }
    }
}

/* A completed request: check it, scatter its reply. */
static int finish_req(dds_store *s, greq *q, const piece *pc)
{
    const dds_var *v = pc[q->first].var;
    if (q->err)
        return dds_err(DDS_EFABRIC, "variable '%s': gather from group rank %d: %s", v->name, q->owner, q->errmsg);
    if (q->err_reply) {
        size_t n = q->got < q->bytes ? q->got : (size_t)q->bytes;
        const char *text = q->bounce ? q->bounce : pc[q->first].dst;
        return dds_err(DDS_EFABRIC, "variable '%s': group rank %d could not serve a gather request: %.*s",
                       v->name, q->owner, (int)n, text);
    }
    if (q->got != q->bytes)
        return dds_err(DDS_EPROTO, "variable '%s': gather reply of %zu bytes from group rank %d, %llu expected",
                       v->name, q->got, q->owner, (unsigned long long)q->bytes);
    if (q->bounce) {
        const char *src = q->bounce;
        for (size_t i = 0; i < q->npieces; i++) {
            const piece *p = &pc[q->first + i];
            memcpy(p->dst, src, (size_t)p->len);
            src += p->len;
        }
    }
    atomic_fetch_add(&s->st_gather_bytes, q->bytes);
    return DDS_OK;
}

/* Whether the pieces go by node (version 4: one request per node to the
 * rank dds_node_servers names, which serves the node's shards from shared
 * memory): a core rank's read of variables that every rank of the group
 * maps node-wide, in whole rows that version 4 can name (row numbers in 32
 * bits, a piece within a request's words). Then *target gets each piece's
 * serving rank, and the pieces and their owners are placed by it (stable:
 * each owner's pieces keep their order); the pieces of a node asked for
 * more than DDS_GATHER_NODE_MAX_BYTES get -1 - owner instead: a request per owner, as
 * without. False on any doubt or want of memory: every request then goes
 * to its owner. */
static bool plan_by_node(dds_store *s, dds_var *const *vars, size_t nvars, piece **pc, int **owner, size_t npc,
                         int **target)
{
    struct dds_fabric *F = s->fab;
    const int *server = dds_node_servers(s);
    *target = NULL;
    if (!server || F->is_reader || npc == 0)
        return false;
    for (size_t j = 0; j < nvars; j++)
        if (!vars[j]->node_shared)
            return false;
    if (!compact_words(F, 0, npc, *pc))
        return false;
    int *t = malloc(npc * sizeof *t);
    if (!t)
        return false;
    bool sorted = true;
    for (size_t i = 0; i < npc; i++) {
        if ((*pc)[i].nrows > DDS_GATHER_MAX_WORDS - DDS_GATHER_NODE_RUN_WORDS) {
            free(t);
            return false;
        }
        t[i] = server[(*owner)[i]];
        sorted = sorted && (i == 0 || t[i] >= t[i - 1]);
    }
    if (!sorted) {
        /* Ranks of a node need not be consecutive (round-robin placement):
         * a counting sort by serving rank. */
        size_t n = (size_t)s->group_size;
        size_t *at = calloc(n + 1, sizeof *at);
        piece *pc2 = malloc(npc * sizeof *pc2);
        int *own2 = malloc(npc * sizeof *own2), *t2 = malloc(npc * sizeof *t2);
        if (!at || !pc2 || !own2 || !t2) {
            free(at);
            free(pc2);
            free(own2);
            free(t2);
            free(t);
            return false;
        }
        for (size_t i = 0; i < npc; i++)
            at[t[i] + 1]++;
        for (size_t g = 0; g < n; g++)
            at[g + 1] += at[g];
        for (size_t i = 0; i < npc; i++) {
            size_t d = at[t[i]]++;
            pc2[d] = (*pc)[i];
            own2[d] = (*owner)[i];
            t2[d] = t[i];
        }
        free(at);
        free(t);
        free(*pc);
        free(*owner);
        *pc = pc2;
        *owner = own2;
        t = t2;
    }
    /* Nodes asked for too much: back to a request per owner. */
    for (size_t i = 0, j; i < npc; i = j) {
        uint64_t b = 0;
        for (j = i; j < npc && t[j] == t[i]; j++)
            b += (*pc)[j].len;
        if (b > DDS_GATHER_NODE_MAX_BYTES)
            for (size_t m = i; m < j; m++)
                t[m] = -1 - (*owner)[m];
    }
    *target = t;
    return true;
}

int dds_fab_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops)
{
    return dds_fab_gather_vars(s, &v, &ops, &nops, 1);
}

int dds_fab_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                        size_t nvars)
{
    struct dds_fabric *F = s->fab;
    const uint64_t maxr = F->max_msg < DDS_GATHER_MAX_REPLY ? (uint64_t)F->max_msg : DDS_GATHER_MAX_REPLY;

    /* Transfers cut at maxr, then requests: runs of one owner's pieces.
     * Each variable's list is grouped by owner, in ascending order
     * (dds_read_split): the lists are merged owner by owner, so one
     * request to an owner carries every variable's transfers. */
    size_t npc = 0;
    for (size_t j = 0; j < nvars; j++)
        for (size_t i = 0; i < nops[j]; i++)
            npc += (uint64_t)ops[j][i].len <= maxr ? 1 : ((uint64_t)ops[j][i].len + maxr - 1) / maxr;
    if (npc == 0)
        return DDS_OK;
    piece *pc = malloc(npc * sizeof *pc);
    int *owner = malloc(npc * sizeof *owner);
    size_t *starts = malloc((npc + 1) * sizeof *starts); /* first piece of each request */
    greq **reqs = calloc(npc, sizeof *reqs);
    gcall *call = calloc(1, sizeof *call);
    size_t *at = calloc(nvars, sizeof *at); /* each list's next op */
    if (!pc || !owner || !starts || !reqs || !call || !at) {
        free(pc);
        free(owner);
        free(starts);
        free(reqs);
        free(call);
        free(at);
        return dds_err(DDS_ENOMEM, "out of memory for a gather of %zu transfers", npc);
    }
    size_t k = 0, nreq = 0;
    for (;;) {
        int g = INT_MAX; /* the lowest owner not taken yet */
        for (size_t j = 0; j < nvars; j++)
            if (at[j] < nops[j] && ops[j][at[j]].owner < g)
                g = ops[j][at[j]].owner;
        if (g == INT_MAX)
            break;
        for (size_t j = 0; j < nvars; j++)
            for (; at[j] < nops[j] && ops[j][at[j]].owner == g; at[j]++) {
                const dds_read_op *op = &ops[j][at[j]];
                for (uint64_t d = 0; d < (uint64_t)op->len; d += maxr) {
                    uint64_t l = (uint64_t)op->len - d < maxr ? (uint64_t)op->len - d : maxr;
                    pc[k] = (piece){ .var = vars[j], .dst = op->dst + d, .offset = (uint64_t)op->src_offset + d,
                                     .len = l };
                    owner[k++] = g;
                }
            }
    }
    free(at);
    /* The count above is an upper bound (a zero-length transfer builds no
     * piece): the loops below run over the pieces built (none: no request,
     * and the common exit frees everything). */
    npc = k;
    int *target = NULL;
    uint32_t *node_words = NULL; /* per request, where by node */
    if (plan_by_node(s, vars, nvars, &pc, &owner, npc, &target) && !(node_words = calloc(npc, sizeof *node_words))) {
        free(target);
        target = NULL;
    }
    /* Requests: runs of one serving rank (the owner, or its node's server),
     * cut where the entries or words, or the reply, would not fit. */
    const int *key = target ? target : owner;
    uint64_t bytes = 0;
    size_t nent = 0;
    for (size_t i = 0; i < npc; i++) {
        bool node = target && target[i] >= 0; /* entries are words then */
        bool run = i > 0 && pc[i].var == pc[i - 1].var && owner[i] == owner[i - 1];
        size_t add = node ? (size_t)pc[i].nrows + (run ? 0u : DDS_GATHER_NODE_RUN_WORDS)
                          : 1u + (i > 0 && pc[i].var != pc[i - 1].var);
        size_t most = node ? DDS_GATHER_MAX_WORDS : DDS_GATHER_MAX_ENTRIES;
        if (i == 0 || key[i] != key[i - 1] || nent + add > most || bytes + pc[i].len > maxr) {
            if (i > 0 && target && target[i - 1] >= 0)
                node_words[nreq - 1] = (uint32_t)nent;
            starts[nreq++] = i;
            bytes = 0;
            nent = 0;
            add = node ? (size_t)pc[i].nrows + DDS_GATHER_NODE_RUN_WORDS : 1u;
        }
        bytes += pc[i].len;
        nent += add;
    }
    if (nreq && target && target[npc - 1] >= 0)
        node_words[nreq - 1] = (uint32_t)nent;
    starts[nreq] = npc;
    /* Bounce bytes of the whole call: from the thread's scratch when they
     * fit in WINDOW_BYTES (kept between calls: a fresh malloc of a large
     * reply costs a page fault per page, as much as the copy). */
    uint64_t nbounce = 0;
    for (size_t r = 0; r < nreq; r++)
        if (F->local_mr || starts[r + 1] - starts[r] > 1)
            for (size_t i = starts[r]; i < starts[r + 1]; i++)
                nbounce += pc[i].len;
    char *scratch_buf = !F->local_mr && nbounce && nbounce <= WINDOW_BYTES
                          ? dds_scratch(DDS_SCRATCH_BOUNCE, (size_t)nbounce)
                          : NULL;
    uint64_t scratch_used = 0;

    gwait w = { 0 };
    size_t lo = 0, next = 0; /* requests [lo, next) posted, those before lo finished */
    uint64_t inflight_bytes = 0;
    int err = DDS_OK;
    bool abandoned = false;
    while (lo < nreq) {
        /* Post while the window allows (one at least). */
        while (err == DDS_OK && next < nreq && next - lo < WINDOW) {
            uint64_t b = 0;
            for (size_t i = starts[next]; i < starts[next + 1]; i++)
                b += pc[i].len;
            if (next > lo && inflight_bytes + b > WINDOW_BYTES)
                break;
            greq *q = calloc(1, sizeof *q);
            if (!q) {
                err = dds_err(DDS_ENOMEM, "out of memory for a gather request");
                break;
            }
            q->rc.complete = reply_done;
            q->sc.complete = send_done;
            q->call = call;
            /* Where the request goes: its node's serving rank, or the owner. */
            q->owner = target && target[starts[next]] >= 0 ? target[starts[next]] : owner[starts[next]];
            q->first = starts[next];
            q->npieces = starts[next + 1] - starts[next];
            q->bytes = b;
            q->tag = atomic_fetch_add(&F->next_tag, 1) << 2;
            reqs[next] = q;
            char *bounce = NULL;
            if (scratch_buf && q->npieces > 1) {
                bounce = scratch_buf + scratch_used;
                scratch_used += b;
            }
            q->node_words = node_words ? node_words[next] : 0;
            int prc = post_req(F, q, pc, owner, bounce, call, &w, reqs, lo, next);
            next++;
            if (atomic_load(&q->left) > 0 || prc == DDS_OK)
                atomic_fetch_add(&s->st_gather_requests, 1);
            inflight_bytes += b;
            if (prc) {
                err = prc;
                if (prc == DDS_ETIMEDOUT || atomic_load(&F->broken))
                    abandoned = true;
                break;
            }
            w.since = 0;
        }
        if (abandoned)
            break;
        if (lo == next)
            break; /* nothing posted (an error before the first) */
        /* Finish what has completed, in order. */
        bool any = false;
        while (lo < next && atomic_load_explicit(&reqs[lo]->left, memory_order_acquire) == 0) {
            greq *q = reqs[lo];
            int frc = finish_req(s, q, pc);
            if (frc && err == DDS_OK)
                err = frc;
            inflight_bytes -= q->bytes;
            free_req(q);
            reqs[lo++] = NULL;
            any = true;
        }
        if (err && lo == next)
            break; /* no more posts after an error; all posted ones are done */
        if (lo == nreq)
            break;
        if (!any) {
            int wrc = wait_some(F, call, &w, reqs, lo, next);
            if (wrc) {
                err = wrc;
                abandoned = true;
                break;
            }
        } else {
            w.since = 0;
        }
    }
    if (abandoned) {
        /* The provider may still complete the requests in flight: cancel
         * their receives and leave them (and the call, and the scratch buffer they
         * may land in: the thread gets a new one) allocated. */
        if (scratch_buf)
            dds_scratch_forget(DDS_SCRATCH_BOUNCE, scratch_buf);
        for (size_t i = lo; i < next; i++)
            if (reqs[i] && atomic_load(&reqs[i]->left) > 0)
                fi_cancel(&F->ep->fid, &reqs[i]->rc.ctx);
        free(starts);
        free(owner);
        free(target);
        free(node_words);
        free(pc);
        free(reqs);
        return err;
    }
    free(starts);
    free(owner);
    free(target);
    free(node_words);
    free(pc);
    free(reqs);
    free(call);
    return err;
}
