/* Owner-side gather, the owner's side (methods 1 and 2): the progress
 * thread of a core rank (fabric.c) serves the requests readers send to its
 * target endpoint (fabric_gather.c sends them).
 *
 * SRV_NBUF receive buffers of DDS_GATHER_REQ_BYTES stay posted on the
 * target endpoint (tag DDS_GATHER_REQ_TAG). For each request the thread
 * checks every field, copies the asked byte ranges (versions 1/2) or rows
 * (versions 3 and 4) of the variable's shard
 * (version 4: of the shards this rank maps, its own and its node peers')
 * into one reply buffer (memcpy; the variable is found by its index in
 * `vars`, under `lock`, so that dds_fab_serve_remove waits for a copy under
 * way), sends it in one tagged message to the reader's initiator endpoint
 * (fi_tinject when it fits the provider's inject size, else fi_tsend from a
 * reply buffer given back on completion; a few are kept for reuse) and
 * re-posts the receive buffer. A
 * request it cannot serve (unknown variable, bytes outside the shard,
 * garbled) gets a reply tagged DDS_GATHER_ERR_TAG with the reason. The
 * reader's address travels in the request: it is inserted into the target
 * address vector once (cached by its bytes), so method-2 readers, which no
 * core rank knew before, get replies too.
 *
 * Memory: SRV_NBUF x 64 KiB posted, plus the replies in flight, which the
 * readers bound (DDS_GATHER_MAX_REPLY each, a window of requests per read
 * call). Only the progress thread touches the buffers, the address cache and
 * the queue; `lock` guards `vars` against add/remove from other threads. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fabric_internal.h"

#define SRV_NBUF 16
/* Reply buffers kept for reuse (a fresh malloc of a large reply costs a
 * page fault per page, as much as the copy), each up to DDS_GATHER_MAX_REPLY. */
#define SRV_NSPARE 4

typedef struct srv_buf {
    fab_ctx c; /* first */
    struct dds_fabric *F;
    char *data;
    struct fid_mr *mr;
    bool queued; /* its re-post waits for resources */
} srv_buf;

typedef struct srv_reply {
    fab_ctx c; /* first */
    struct dds_fabric *F;
    struct srv_reply *next; /* in the queue of sends that wait for resources */
    char *data;
    size_t len, cap;
    struct fid_mr *mr;
    fi_addr_t to;
    uint64_t tag;
} srv_reply;

typedef struct srv_var {
    uint32_t index;
    const char *base;
    uint64_t bytes;
    /* Version-4 requests: the variable, whose peer_base and offsets give
     * the shards this rank maps (its own and its node peers'), and the
     * group size; NULL where it is not node_shared. */
    const dds_var *node;
    int npeers;
} srv_var;

typedef struct srv_peer {
    uint64_t hash;
    uint16_t len;
    uint8_t *addr;
    fi_addr_t fa;
} srv_peer;

struct fab_server {
    srv_buf bufs[SRV_NBUF];
    pthread_mutex_t lock;
    srv_var *vars;
    size_t nvars, vars_cap;
    srv_peer *peers;
    size_t npeers, peers_cap;
    srv_reply *queue, *queue_tail;
    size_t nqueued_bufs;
    char *spare[SRV_NSPARE];
    size_t spare_cap[SRV_NSPARE];
};

/* A reply buffer of at least n bytes (*cap: its size), or NULL. */
static char *buf_get(struct fab_server *S, size_t n, size_t *cap)
{
    int best = -1;
    for (int i = 0; i < SRV_NSPARE; i++)
        if (S->spare[i] && S->spare_cap[i] >= n && (best < 0 || S->spare_cap[i] < S->spare_cap[best]))
            best = i;
    if (best >= 0) {
        char *b = S->spare[best];
        *cap = S->spare_cap[best];
        S->spare[best] = NULL;
        return b;
    }
    *cap = n ? n : 1;
    return malloc(*cap);
}

/* Give a reply buffer back: kept in an empty slot or in place of a
 * smaller spare, else freed. */
static void buf_put(struct fab_server *S, char *b, size_t cap)
{
    if (!b)
        return;
    int slot = 0;
    for (int i = 0; i < SRV_NSPARE; i++) {
        if (!S->spare[i]) {
            slot = i;
            break;
        }
        if (S->spare_cap[i] < S->spare_cap[slot])
            slot = i;
    }
    if (S->spare[slot]) {
        if (S->spare_cap[slot] >= cap) {
            free(b);
            return;
        }
        free(S->spare[slot]);
    }
    S->spare[slot] = b;
    S->spare_cap[slot] = cap;
}

static int local_reg(struct dds_fabric *F, void *buf, size_t len, uint64_t access, struct fid_mr **mr)
{
    *mr = NULL;
    if (!F->local_mr)
        return 0;
    uint64_t key = (F->mr_mode & FI_MR_PROV_KEY) ? 0 : atomic_fetch_add(&F->next_key, 1);
    int rc = fi_mr_reg(F->domain, buf, len, access, 0, key, 0, mr, NULL);
    if (rc == 0 && (F->mr_mode & FI_MR_ENDPOINT)) {
        if ((rc = fi_mr_bind(*mr, &F->t_ep->fid, 0)) == 0)
            rc = fi_mr_enable(*mr);
        if (rc) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
        }
    }
    if (rc)
        *mr = NULL;
    return rc;
}

static void *desc_of(struct fid_mr *mr) { return mr ? fi_mr_desc(mr) : NULL; }

/* ---- receive buffers -------------------------------------------------------------- */

static void request_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err);

static int post_buf(struct dds_fabric *F, srv_buf *b)
{
    return (int)fi_trecv(F->t_ep, b->data, DDS_GATHER_REQ_BYTES, desc_of(b->mr), FI_ADDR_UNSPEC,
                         DDS_GATHER_REQ_TAG, 0, &b->c.ctx);
}

static void repost(struct dds_fabric *F, srv_buf *b)
{
    int rc = post_buf(F, b);
    if (rc == -FI_EAGAIN) {
        b->queued = true;
        F->srv->nqueued_bufs++;
    } else if (rc) {
        dds_debug("fabric: gather: re-posting a receive buffer failed: %s", fi_strerror(-rc));
    }
}

int dds_fab_serve_open(struct dds_fabric *F)
{
    struct fab_server *S = calloc(1, sizeof *S);
    if (!S)
        return dds_err(DDS_ENOMEM, "out of memory for the gather server");
    pthread_mutex_init(&S->lock, NULL);
    F->srv = S;
    for (int i = 0; i < SRV_NBUF; i++) {
        srv_buf *b = &S->bufs[i];
        b->c.complete = request_done;
        b->F = F;
        b->data = malloc(DDS_GATHER_REQ_BYTES);
        if (!b->data)
            return dds_err(DDS_ENOMEM, "out of memory for gather receive buffers");
        int rc = local_reg(F, b->data, DDS_GATHER_REQ_BYTES, FI_RECV, &b->mr);
        if (rc == 0)
            rc = post_buf(F, b);
        if (rc)
            return dds_err(DDS_EFABRIC, "posting gather receive buffers failed: %s (libfabric error %d)",
                           fi_strerror(-rc), -rc);
    }
    return DDS_OK;
}

void dds_fab_serve_free(struct dds_fabric *F)
{
    struct fab_server *S = F->srv;
    if (!S)
        return;
    for (int i = 0; i < SRV_NBUF; i++) {
        if (S->bufs[i].mr)
            fi_close(&S->bufs[i].mr->fid);
        free(S->bufs[i].data);
    }
    /* Replies still queued or in flight: the endpoint is closed, so no
     * completion will come; the queued ones are freed, the ones the
     * provider held are lost with it (bounded by the readers' windows). */
    for (srv_reply *r = S->queue; r;) {
        srv_reply *next = r->next;
        if (r->mr)
            fi_close(&r->mr->fid);
        free(r->data);
        free(r);
        r = next;
    }
    for (int i = 0; i < SRV_NSPARE; i++)
        free(S->spare[i]);
    for (size_t i = 0; i < S->npeers; i++)
        free(S->peers[i].addr);
    free(S->peers);
    free(S->vars);
    pthread_mutex_destroy(&S->lock);
    free(S);
    F->srv = NULL;
}

/* ---- variables -------------------------------------------------------------------- */

int dds_fab_serve_add(struct dds_fabric *F, uint32_t index, const char *base, uint64_t bytes,
                      const dds_var *node, int n)
{
    struct fab_server *S = F->srv;
    srv_var add = { .index = index, .base = base, .bytes = bytes, .node = node, .npeers = node ? n : 0 };
    int rc = DDS_OK;
    pthread_mutex_lock(&S->lock);
    if (S->nvars == S->vars_cap) {
        size_t cap = S->vars_cap ? 2 * S->vars_cap : 16;
        srv_var *v = realloc(S->vars, cap * sizeof *v);
        if (v) {
            S->vars = v;
            S->vars_cap = cap;
        } else {
            rc = dds_err(DDS_ENOMEM, "out of memory serving a variable");
        }
    }
    if (rc == DDS_OK)
        S->vars[S->nvars++] = add;
    pthread_mutex_unlock(&S->lock);
    return rc;
}

void dds_fab_serve_remove(struct dds_fabric *F, uint32_t index)
{
    struct fab_server *S = F->srv;
    pthread_mutex_lock(&S->lock);
    for (size_t i = 0; i < S->nvars; i++) {
        if (S->vars[i].index == index) {
            S->vars[i] = S->vars[--S->nvars];
            break;
        }
    }
    pthread_mutex_unlock(&S->lock);
}

/* ---- readers' addresses ------------------------------------------------------------ */

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The target AV's address of the reader whose initiator address is
 * addr[0..len); inserted on first sight. Linear over known readers: one
 * hash compare each (a few thousand readers at most per core rank). */
static int peer_addr(struct dds_fabric *F, const uint8_t *addr, uint16_t len, fi_addr_t *out)
{
    struct fab_server *S = F->srv;
    uint64_t h = fnv1a(addr, len);
    for (size_t i = S->npeers; i-- > 0;) {
        srv_peer *p = &S->peers[i];
        if (p->hash == h && p->len == len && memcmp(p->addr, addr, len) == 0) {
            *out = p->fa;
            return DDS_OK;
        }
    }
    if (S->npeers == S->peers_cap) {
        size_t cap = S->peers_cap ? 2 * S->peers_cap : 16;
        srv_peer *p = realloc(S->peers, cap * sizeof *p);
        if (!p)
            return DDS_ENOMEM;
        S->peers = p;
        S->peers_cap = cap;
    }
    srv_peer *p = &S->peers[S->npeers];
    p->addr = malloc(len);
    if (!p->addr)
        return DDS_ENOMEM;
    memcpy(p->addr, addr, len);
    p->len = len;
    p->hash = h;
    int k = fi_av_insert(F->t_av, addr, 1, &p->fa, 0, NULL);
    if (k != 1) {
        free(p->addr);
        return DDS_EFABRIC;
    }
    *out = p->fa;
    S->npeers++;
    return DDS_OK;
}

/* ---- replies ----------------------------------------------------------------------- */

static void reply_free(srv_reply *r)
{
    if (r->mr)
        fi_close(&r->mr->fid);
    buf_put(r->F->srv, r->data, r->cap);
    free(r);
}

static void reply_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err)
{
    (void)e;
    srv_reply *r = (srv_reply *)c;
    if (err)
        dds_debug("fabric: gather reply of %zu bytes failed: %s", r->len, err);
    reply_free(r);
}

static int post_reply(struct dds_fabric *F, srv_reply *r)
{
    return (int)fi_tsend(F->t_ep, r->data, r->len, desc_of(r->mr), r->to, r->tag, &r->c.ctx);
}

static void enqueue(struct fab_server *S, srv_reply *r)
{
    r->next = NULL;
    if (S->queue_tail)
        S->queue_tail->next = r;
    else
        S->queue = r;
    S->queue_tail = r;
}

/* Send `len` bytes of `data` to `to`. `cap`: data is a reply buffer of
 * that size which the call takes over (buf_get); 0: the caller's. */
static void send_reply(struct dds_fabric *F, fi_addr_t to, uint64_t tag, char *data, size_t len, size_t cap)
{
    struct fab_server *S = F->srv;
    if (len <= F->inject && !S->queue) {
        int rc = (int)fi_tinject(F->t_ep, data, len, to, tag);
        if (rc == 0 || rc != -FI_EAGAIN) {
            if (rc)
                dds_debug("fabric: gather reply (fi_tinject) failed: %s", fi_strerror(-rc));
            if (cap)
                buf_put(S, data, cap);
            return;
        }
    }
    srv_reply *r = calloc(1, sizeof *r);
    if (r && !cap) {
        r->data = buf_get(S, len, &r->cap);
        if (r->data)
            memcpy(r->data, data, len);
    } else if (r) {
        r->data = data;
        r->cap = cap;
    }
    if (!r || !r->data) {
        dds_debug("fabric: gather: out of memory for a reply of %zu bytes", len);
        free(r);
        if (cap)
            buf_put(S, data, cap);
        return;
    }
    r->c.complete = reply_done;
    r->F = F;
    r->len = len;
    r->to = to;
    r->tag = tag;
    int rc = local_reg(F, r->data, len ? len : 1, FI_SEND, &r->mr);
    if (rc) {
        dds_debug("fabric: gather: registering a reply failed: %s", fi_strerror(-rc));
        reply_free(r);
        return;
    }
    rc = S->queue ? -FI_EAGAIN : post_reply(F, r);
    if (rc == -FI_EAGAIN) {
        enqueue(S, r); /* in order, after the ones already waiting */
    } else if (rc) {
        dds_debug("fabric: gather reply (fi_tsend) failed: %s", fi_strerror(-rc));
        reply_free(r);
    }
}

static void send_error(struct dds_fabric *F, fi_addr_t to, uint64_t tag, uint64_t cap, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void send_error(struct dds_fabric *F, fi_addr_t to, uint64_t tag, uint64_t cap, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    if (len > cap)
        len = (size_t)cap; /* the reader's buffer holds no more */
    dds_debug("fabric: gather request refused: %s", msg);
    send_reply(F, to, tag | DDS_GATHER_ERR_TAG, msg, len, 0);
}

bool dds_fab_serve_pass(struct dds_fabric *F)
{
    struct fab_server *S = F->srv;
    while (S->queue) {
        srv_reply *r = S->queue;
        int rc = post_reply(F, r);
        if (rc == -FI_EAGAIN)
            break;
        S->queue = r->next;
        if (!S->queue)
            S->queue_tail = NULL;
        if (rc) {
            dds_debug("fabric: gather reply (fi_tsend) failed: %s", fi_strerror(-rc));
            reply_free(r);
        }
    }
    for (int i = 0; S->nqueued_bufs && i < SRV_NBUF; i++) {
        srv_buf *b = &S->bufs[i];
        if (!b->queued)
            continue;
        int rc = post_buf(F, b);
        if (rc == -FI_EAGAIN)
            break;
        b->queued = false;
        S->nqueued_bufs--;
        if (rc)
            dds_debug("fabric: gather: re-posting a receive buffer failed: %s", fi_strerror(-rc));
    }
    return S->queue || S->nqueued_bufs;
}

/* ---- requests ---------------------------------------------------------------------- */

/* The served variable of index `index`, or NULL; under S->lock. */
static const srv_var *served_var(const struct fab_server *S, uint32_t index)
{
    for (size_t i = 0; i < S->nvars; i++)
        if (S->vars[i].index == index)
            return &S->vars[i];
    return NULL;
}

/* Copy version 1/2 entries (offset, length; a switch names the next
 * variable) into `out`; NULL or what was wrong. Under S->lock. */
static const char *gather_entries(const struct fab_server *S, const dds_gather_req *h, const char *ents,
                                  char *out, uint64_t *done, uint32_t *var_index)
{
    const srv_var *v = served_var(S, *var_index);
    if (!v)
        return "the variable is not served (freed, or not yet added)";
    for (uint32_t i = 0; i < h->nent; i++) {
        dds_gather_ent e;
        memcpy(&e, ents + (size_t)i * sizeof e, sizeof e);
        if (e.len == DDS_GATHER_VAR_SWITCH && h->version == DDS_GATHER_VERSION) {
            *var_index = e.offset > UINT32_MAX ? UINT32_MAX : (uint32_t)e.offset;
            if (!(v = served_var(S, *var_index)))
                return "the variable is not served (freed, or not yet added)";
            continue;
        }
        if (e.offset > v->bytes || e.len > v->bytes - e.offset || e.len > h->reply_bytes - *done)
            return "bytes outside the shard or beyond the reply";
        memcpy(out + *done, v->base + e.offset, (size_t)e.len);
        *done += e.len;
    }
    return NULL;
}

/* Copy version 3 runs (variable, row bytes, count, rows) or version 4
 * runs (variable, row bytes, owner, count, rows: from that owner's shard,
 * this rank's or a node peer's) into `out`; NULL or what was wrong. Under
 * S->lock. */
static const char *gather_rows(const struct fab_server *S, const dds_gather_req *h, const char *words,
                               char *out, uint64_t *done, uint32_t *var_index)
{
    const uint32_t *w = (const uint32_t *)words, *end = w + h->nent;
    const ptrdiff_t head = h->version == DDS_GATHER_VERSION_NODE_ROWS ? DDS_GATHER_NODE_RUN_WORDS : 3;
    while (w < end) {
        if (end - w < head)
            return "a truncated run of rows";
        *var_index = w[0];
        uint64_t unit = w[1], count = w[head - 1];
        const srv_var *v = served_var(S, *var_index);
        if (!v)
            return "the variable is not served (freed, or not yet added)";
        const char *base = v->base;
        uint64_t bytes = v->bytes;
        if (head == DDS_GATHER_NODE_RUN_WORDS) {
            uint32_t o = w[2];
            if (o >= (uint32_t)v->npeers || !v->node->peer_base[o])
                return "rows of a rank whose shard this rank does not map (not a node peer)";
            base = v->node->peer_base[o];
            bytes = (uint64_t)(v->node->offsets[o + 1] - v->node->offsets[o]) * (uint64_t)v->node->row_bytes;
        }
        w += head;
        if (unit == 0 || count > (uint64_t)(end - w) || count * unit > h->reply_bytes - *done)
            return "a run of rows longer than the request or the reply";
        for (uint64_t i = 0; i < count; i++) {
            uint64_t off = (uint64_t)w[i] * unit;
            if (off > bytes || unit > bytes - off)
                return "bytes outside the shard or beyond the reply";
            memcpy(out + *done, base + off, (size_t)unit);
            *done += unit;
        }
        w += count;
    }
    return NULL;
}

static void serve(struct dds_fabric *F, const char *data, size_t len)
{
    struct fab_server *S = F->srv;
    dds_gather_req h;
    if (len < sizeof h) {
        dds_debug("fabric: gather: a request of %zu bytes is too short; dropped", len);
        return;
    }
    memcpy(&h, data, sizeof h);
    size_t apad = ((size_t)h.alen + 7) & ~(size_t)7;
    bool rows = h.version == DDS_GATHER_VERSION_ROWS || h.version == DDS_GATHER_VERSION_NODE_ROWS;
    if (h.magic != DDS_GATHER_MAGIC ||
        (h.version != DDS_GATHER_VERSION && h.version != DDS_GATHER_VERSION_ONE_VAR && !rows) || h.alen == 0 ||
        h.alen > DDS_HS_MAX_ADDR || sizeof h + apad > len) {
        /* No address to answer: the reader's deadline reports it. */
        dds_debug("fabric: gather: a request of %zu bytes has a bad header; dropped", len);
        return;
    }
    fi_addr_t to;
    int rc = peer_addr(F, (const uint8_t *)data + sizeof h, h.alen, &to);
    if (rc) {
        dds_debug("fabric: gather: cannot insert a reader's address (%s); request dropped", dds_strerror(rc));
        return;
    }
    const char *ents = data + sizeof h + apad;
    size_t esz = rows ? sizeof(uint32_t) : sizeof(dds_gather_ent);
    uint32_t most = rows ? DDS_GATHER_MAX_WORDS : DDS_GATHER_MAX_ENTRIES;
    if (h.nent > most || len != sizeof h + apad + (size_t)h.nent * esz || h.reply_bytes > DDS_GATHER_MAX_REPLY ||
        h.reply_bytes == 0 || (h.reply_tag & 3u)) {
        send_error(F, to, h.reply_tag & ~3ull, h.reply_bytes,
                   "malformed gather request (%u entries, %zu bytes, reply of %llu bytes)", h.nent, len,
                   (unsigned long long)h.reply_bytes);
        return;
    }
    size_t out_cap;
    char *out = buf_get(S, (size_t)h.reply_bytes, &out_cap);
    if (!out) {
        send_error(F, to, h.reply_tag, h.reply_bytes, "owner out of memory for a reply of %llu bytes",
                   (unsigned long long)h.reply_bytes);
        return;
    }
    uint32_t var_index = h.var_index;
    uint64_t done = 0;
    pthread_mutex_lock(&S->lock);
    const char *bad = rows ? gather_rows(S, &h, ents, out, &done, &var_index)
                           : gather_entries(S, &h, ents, out, &done, &var_index);
    pthread_mutex_unlock(&S->lock);
    if (!bad && done != h.reply_bytes)
        bad = "entries do not add up to the reply";
    if (bad) {
        buf_put(S, out, out_cap);
        send_error(F, to, h.reply_tag, h.reply_bytes, "gather of variable #%u: %s", var_index, bad);
        return;
    }
    send_reply(F, to, h.reply_tag, out, (size_t)h.reply_bytes, out_cap);
}

static void request_done(fab_ctx *c, const struct fi_cq_tagged_entry *e, const char *err)
{
    srv_buf *b = (srv_buf *)c;
    struct dds_fabric *F = b->F;
    if (err) {
        /* Cancelled at close (the thread has stopped then), or a
         * truncated request: nothing to answer. */
        if (!atomic_load(&F->stop))
            repost(F, b);
        return;
    }
    serve(F, b->data, e->len);
    repost(F, b);
}
