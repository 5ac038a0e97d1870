/* Method 0 owner-side gather: the rows of other nodes of a collective read
 * come by two-sided exchange, one request and one reply per owner, instead
 * of one MPI_Get per row.
 *
 * Why here and why collective: method-0 batched reads across nodes are
 * already group-collective (read.c: the MPIs in use serve a passive-target
 * get only while the target is inside MPI), so every rank of the group is
 * in the read anyway and a bounded all-to-all exchange costs no extra
 * synchronisation. The read's step (dds_step_val) comes first: it still
 * detects ranks in different calls and agrees on argument errors, and it
 * agrees on the number of rounds, so that every rank, also one with
 * nothing to read or one in dds_free() that meets the read, takes part in
 * each round and serves the others.
 *
 A read of several variables (dds_get_batch_vars) is one read: one step and
 * one exchange for all of them, so a sample of several fields costs what one
 * field costs in synchronisations.
 *
 * A round, on a private duplicate of the group communicator (so nothing of
 * the exchange can match the store's own steps):
 *   1. MPI_Ialltoall of per-peer request headers: transfers asked of that
 *      owner;
 *   2. MPI_Ialltoallv of the transfers, (variable and owner, byte offset
 *      in the owner's shard, length) triples, the variable by its index in
 *      the store's table (the same on every rank: variables are added
 *      collectively, in one order) in the low 32 bits of the first, the
 *      owner's group rank in the high ones;
 *   3. each owner checks the transfers against its shard and copies them
 *      into one send buffer, an 8-byte status ahead of each reader's rows;
 *      MPI_Ialltoallv of the replies into the reader's bounce buffer, which
 *      is then scattered into the transfers' destinations.
 * By node: where every rank maps its node peers' shards (node shared
 * memory, dds_node_servers), the transfers of another node go to one rank
 * of that node (dds_store.node_server), which copies them from its own
 * and its peers' shards, up to DDS_GATHER_NODE_MAX_BYTES of a node per
 * round; a node asked for more, and variables not node_shared, go to each
 * owner. An all-to-all sends nothing between ranks with nothing to say, so
 * with 8 ranks per node a reader exchanges with up to 8 times fewer peers.
 * A round carries at most DDSTORE_GATHER_ROUND_BYTES (16 MiB) of rows and
 * of requests per reader (dds_gather_round), so buffers stay bounded
 * however large the batch. Every wait is dds_wait_bounded: it sleeps
 * between polls (no spinning) and gives up at the collective timeout.
 *
 * Failures: the reader's own shortage of memory makes it ask for nothing
 * (and fail its read); an owner that refuses a transfer (outside its
 * shard: a bug) says so in the reply's status and that reader fails. An
 * MPI error, or an owner short of memory mid-exchange, leaves the group's
 * collectives out of step: the store is marked broken, and the peers stop
 * at the collective timeout instead of hanging. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int dds_rma_gather_open(dds_store *s)
{
    int mrc = MPI_Comm_dup(s->group, &s->gather_comm);
    int rc = DDS_OK;
    if (mrc == MPI_SUCCESS)
        MPI_Comm_set_errhandler(s->gather_comm, MPI_ERRORS_RETURN);
    else {
        s->gather_comm = MPI_COMM_NULL;
        rc = dds_err_mpi(mrc, "MPI_Comm_dup (gather communicator)");
    }
    rc = dds_agree(s->group, rc);
    if (rc)
        dds_rma_gather_close(s);
    return rc;
}

static void gx_free(struct dds_gx *g);

void dds_rma_gather_close(dds_store *s)
{
    if (s->gather_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->gather_comm);
    s->gather_comm = MPI_COMM_NULL;
    gx_free(s->gather_gx);
    s->gather_gx = NULL;
}

/* MPI does not say whether MPI_Get is offloaded to the NIC, and method 0's
 * batched reads across nodes are group-collective anyway, so the exchange
 * costs no extra synchronisation: gather at every row size. */
bool dds_rma_emulated(const dds_store *s)
{
    (void)s;
    return true;
}

/* The exchange's buffers, kept by the store between reads (s->gather_gx):
 * a batch's replies are megabytes, and fresh allocations of that size pay
 * their page faults again on every read. Reads are group-collective, so
 * one thread at a time uses them. */
typedef struct dds_gx {
    int n;
    int64_t *hdr_out, *hdr_in; /* n each: transfers asked of each owner this round */
    int *scount, *sdisp, *rcount, *rdisp, *pos; /* n each */
    int64_t *rbytes;           /* n: bytes of rows asked of each owner this round */
    int64_t *node_bytes;       /* n: bytes of rows of each node this round, by its serving rank */
    unsigned char *counted;    /* n: owner already counted in st_gather_requests */
    int64_t *vidx;             /* the read's variables' indices in the store's table */
    size_t vidx_cap;
    int64_t *triples_out, *triples_in;
    size_t triples_in_cap;
    size_t triples_out_cap;
    char *reply_out, *reply_in;
    size_t reply_out_cap, reply_in_cap;
} gx;

static void gx_free(struct dds_gx *g)
{
    if (!g)
        return;
    free(g->hdr_out);
    free(g->scount);
    free(g->rbytes);
    free(g->node_bytes);
    free(g->counted);
    free(g->vidx);
    free(g->triples_out);
    free(g->triples_in);
    free(g->reply_out);
    free(g->reply_in);
    free(g);
}

/* Out of step for good: this rank leaves the exchange early. */
static int broken(dds_store *s, int rc)
{
    s->broken = true;
    return rc;
}

static int wait_one(dds_store *s, MPI_Request *req)
{
    return dds_wait_bounded(s, 1, req, DDS_COLL_READ,
                            "the other ranks of its group in a gather exchange (method 0)");
}

/* One all-to-all of the exchange, started by the call that returned mrc
 * (named by what), waited for within the group's bound. An MPI error breaks
 * the group: the other ranks may be inside the exchange already. */
static int exchanged(dds_store *s, int mrc, MPI_Request *req, const char *what)
{
    return mrc != MPI_SUCCESS ? broken(s, dds_err_mpi(mrc, what)) : wait_one(s, req);
}

static int grow(void **p, size_t *cap, size_t want)
{
    if (want <= *cap)
        return 0;
    size_t n = want > *cap * 2 ? want : *cap * 2;
    void *q = realloc(*p, n);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* The transfers of one round, [at, end) of the read's lists, in order. */
typedef struct round_walk {
    const dds_read_op *const *ops;
    const size_t *nops;
    dds_gather_pos at, end;
} round_walk;

static const dds_read_op *next_op(round_walk *w, size_t *var)
{
    while (w->at.var < w->end.var || (w->at.var == w->end.var && w->at.op < w->end.op)) {
        if (w->at.op < w->nops[w->at.var]) {
            *var = w->at.var;
            return &w->ops[w->at.var][w->at.op++];
        }
        w->at.var++;
        w->at.op = 0;
    }
    return NULL;
}

/* Where a transfer goes: its node's serving rank (by node), or its owner. */
static int dest_of(const gx *g, const int *server, dds_var *const *vars, size_t var, const dds_read_op *o)
{
    if (server && vars[var]->node_shared) {
        int p = server[o->owner];
        if ((uint64_t)g->node_bytes[p] <= DDS_GATHER_NODE_MAX_BYTES)
            return p;
    }
    return o->owner;
}

/* The owner's half of step 3: rows asked by one peer, after its status,
 * from its own shard or a node peer's. */
static int64_t serve_peer(dds_store *s, const int64_t *triples, int64_t ntransfers, char *out)
{
    int64_t status = DDS_OK;
    char *rows = out + 8;
    int64_t total = 0;
    pthread_rwlock_rdlock(&s->vars_lock);
    for (int64_t k = 0; k < ntransfers; k++) {
        int64_t vidx = triples[3 * k] & 0xffffffff, off = triples[3 * k + 1], len = triples[3 * k + 2];
        int64_t owner = (int64_t)((uint64_t)triples[3 * k] >> 32);
        dds_var *v = vidx < s->nvars ? s->vars[vidx] : NULL;
        const char *base = v && owner < s->group_size ? v->peer_base[owner] : NULL;
        int64_t shard = base ? (v->offsets[owner + 1] - v->offsets[owner]) * v->row_bytes : 0;
        if (!base || off < 0 || len < 0 || off > shard || len > shard - off) {
            status = DDS_ERANGE;
            memset(rows + total, 0, (size_t)(len > 0 ? len : 0));
        } else {
            memcpy(rows + total, base + off, (size_t)len);
        }
        total += len > 0 ? len : 0;
    }
    pthread_rwlock_unlock(&s->vars_lock);
    memcpy(out, &status, sizeof status);
    return total;
}

int dds_rma_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)bounded; /* always a collective read: bounded by the store's timeout */
    return dds_rma_gather_vars(s, &v, &ops, &nops, nops ? 1 : 0);
}

/* The reader's buffers, sized for its largest round, and its variables'
 * indices in the store's table. */
static int reader_setup(dds_store *s, gx *g, dds_var *const *vars, const dds_read_op *const *ops,
                        const size_t *nops, size_t nvars)
{
    size_t most_ops = 0;
    int64_t most_bytes = 0;
    dds_gather_pos at = { 0, 0 };
    for (;;) {
        round_walk w = { ops, nops, at, at };
        if (!dds_gather_round(s, ops, nops, nvars, &w.end))
            break;
        at = w.end;
        size_t count = 0, var;
        int64_t bytes = 0;
        int prev = -1;
        for (const dds_read_op *o; (o = next_op(&w, &var));) {
            bytes += o->len + (o->owner != prev ? 8 : 0); /* an owner's status ahead of its rows */
            prev = o->owner;
            count++;
        }
        most_ops = count > most_ops ? count : most_ops;
        most_bytes = bytes > most_bytes ? bytes : most_bytes;
    }
    if (grow((void **)&g->triples_out, &g->triples_out_cap, 3 * most_ops * sizeof *g->triples_out) ||
        grow((void **)&g->reply_in, &g->reply_in_cap, (size_t)most_bytes) ||
        grow((void **)&g->vidx, &g->vidx_cap, nvars * sizeof *g->vidx))
        return dds_err(DDS_ENOMEM, "variable '%s': out of memory for gather buffers (%lld bytes)",
                       vars[0]->name, (long long)most_bytes);
    int rc = DDS_OK;
    pthread_rwlock_rdlock(&s->vars_lock);
    for (size_t k = 0; k < nvars; k++) {
        g->vidx[k] = -1;
        for (int64_t i = 0; i < s->nvars; i++)
            if (s->vars[i] == vars[k])
                g->vidx[k] = i;
        if (g->vidx[k] < 0 && rc == DDS_OK)
            rc = dds_err(DDS_ESTATE, "variable '%s' is not in the store's table", vars[k]->name);
    }
    pthread_rwlock_unlock(&s->vars_lock);
    return rc;
}

int dds_rma_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                        size_t nvars)
{
    if (s->gather_comm == MPI_COMM_NULL)
        return broken(s, dds_err(DDS_ESTATE, "method 0: no gather communicator for a collective read"));
    int n = s->group_size;
    int rc = DDS_OK;
    if (!s->gather_gx) {
        gx *c = calloc(1, sizeof *c);
        if (c) {
            c->n = n;
            c->hdr_out = malloc(2 * (size_t)n * sizeof *c->hdr_out);
            c->scount = malloc(5 * (size_t)n * sizeof *c->scount);
            c->rbytes = malloc((size_t)n * sizeof *c->rbytes);
            c->node_bytes = malloc((size_t)n * sizeof *c->node_bytes);
            c->counted = malloc((size_t)n);
        }
        if (!c || !c->hdr_out || !c->scount || !c->rbytes || !c->node_bytes || !c->counted) {
            gx_free(c);
            return broken(s, dds_err(DDS_ENOMEM, "out of memory for a gather exchange of %d ranks", n));
        }
        s->gather_gx = c;
    }
    gx g = *s->gather_gx;
    memset(g.counted, 0, (size_t)n);
    g.hdr_in = g.hdr_out + n;
    g.sdisp = g.scount + n;
    g.rcount = g.scount + 2 * n;
    g.rdisp = g.scount + 3 * n;
    g.pos = g.scount + 4 * n;

    if (nvars) {
        rc = reader_setup(s, &g, vars, ops, nops, nvars);
        if (rc)
            nvars = 0; /* ask for nothing, still serve the others */
    }

    const int *server = dds_node_servers(s);
    dds_gather_pos cursor = { 0, 0 };
    for (int64_t round = 0; round < s->gather_rounds; round++) {
        round_walk w = { ops, nops, cursor, cursor };
        dds_gather_round(s, ops, nops, nvars, &w.end);
        cursor = w.end;
        size_t var;

        /* 1. headers: transfers asked of each owner (or node). */
        for (int p = 0; p < n; p++) {
            g.hdr_out[p] = 0;
            g.rbytes[p] = 0;
            g.node_bytes[p] = 0;
        }
        round_walk c = w;
        if (server)
            for (const dds_read_op *o; (o = next_op(&c, &var));)
                g.node_bytes[server[o->owner]] += o->len;
        c = w;
        for (const dds_read_op *o; (o = next_op(&c, &var));) {
            int p = dest_of(&g, server, vars, var, o);
            g.hdr_out[p]++;
            g.rbytes[p] += o->len;
        }
        MPI_Request req;
        rc = exchanged(s, MPI_Ialltoall(g.hdr_out, 1, MPI_INT64_T, g.hdr_in, 1, MPI_INT64_T, s->gather_comm, &req),
                       &req, "MPI_Ialltoall (gather requests)");
        if (rc)
            break;

        /* 2. the transfers, (variable, offset, length) each. */
        int off = 0;
        for (int p = 0; p < n; p++) {
            g.scount[p] = (int)(3 * g.hdr_out[p]);
            g.sdisp[p] = g.pos[p] = off;
            off += g.scount[p];
        }
        c = w;
        for (const dds_read_op *o; (o = next_op(&c, &var));) {
            int p = dest_of(&g, server, vars, var, o);
            g.triples_out[g.pos[p]++] = (int64_t)((uint64_t)o->owner << 32 | (uint64_t)g.vidx[var]);
            g.triples_out[g.pos[p]++] = o->src_offset;
            g.triples_out[g.pos[p]++] = o->len;
        }
        int64_t in_total = 0;
        bool bad = false;
        for (int p = 0; p < n; p++) {
            int64_t k = g.hdr_in[p];
            if (k < 0 || k > INT_MAX / 3 || in_total > INT_MAX - 3 * k)
                bad = true;
            g.rcount[p] = bad ? 0 : (int)(3 * k);
            g.rdisp[p] = (int)in_total;
            in_total += g.rcount[p];
        }
        if (bad) {
            rc = broken(s, dds_err(DDS_EOVERFLOW, "gather exchange: rank %d was asked for more "
                                   "transfers in one round than MPI counts can hold", s->rank));
            break;
        }
        if (grow((void **)&g.triples_in, &g.triples_in_cap, (size_t)in_total * sizeof(int64_t) + 24)) {
            rc = broken(s, dds_err(DDS_ENOMEM, "out of memory for %lld gather requests",
                                   (long long)in_total / 3));
            break;
        }
        rc = exchanged(s, MPI_Ialltoallv(g.triples_out, g.scount, g.sdisp, MPI_INT64_T, g.triples_in, g.rcount,
                                         g.rdisp, MPI_INT64_T, s->gather_comm, &req),
                       &req, "MPI_Ialltoallv (gather requests)");
        if (rc)
            break;

        /* 3. the owner gathers each reader's rows behind a status; replies. */
        int64_t out_total = 0;
        for (int p = 0; p < n; p++) {
            int64_t k = g.hdr_in[p], bytes = 0;
            for (int64_t t = 0; t < k; t++) {
                int64_t len = g.triples_in[g.rdisp[p] + 3 * t + 2];
                bytes += len > 0 && len <= INT_MAX ? len : 0;
            }
            int64_t size = k ? 8 + bytes : 0;
            if (size > INT_MAX || out_total > INT_MAX - size)
                bad = true;
            g.scount[p] = bad ? 0 : (int)size;
            g.sdisp[p] = (int)out_total;
            out_total += g.scount[p];
        }
        if (bad) {
            rc = broken(s, dds_err(DDS_EOVERFLOW, "gather exchange: rank %d was asked for more "
                                   "bytes in one round than MPI counts can hold", s->rank));
            break;
        }
        if (grow((void **)&g.reply_out, &g.reply_out_cap, (size_t)out_total + 8)) {
            rc = broken(s, dds_err(DDS_ENOMEM, "out of memory for %lld bytes of gather replies",
                                   (long long)out_total));
            break;
        }
        for (int p = 0; p < n; p++)
            if (g.hdr_in[p])
                serve_peer(s, g.triples_in + g.rdisp[p], g.hdr_in[p], g.reply_out + g.sdisp[p]);
        int64_t expect = 0;
        for (int p = 0; p < n; p++) {
            g.rcount[p] = g.hdr_out[p] ? (int)(8 + g.rbytes[p]) : 0;
            g.rdisp[p] = (int)expect;
            expect += g.rcount[p];
        }
        rc = exchanged(s, MPI_Ialltoallv(g.reply_out, g.scount, g.sdisp, MPI_BYTE, g.reply_in, g.rcount,
                                         g.rdisp, MPI_BYTE, s->gather_comm, &req),
                       &req, "MPI_Ialltoallv (gather replies)");
        if (rc)
            break;

        /* Scatter the replies into the transfers' destinations. */
        for (int p = 0; p < n; p++) {
            if (!g.hdr_out[p])
                continue;
            int64_t status;
            memcpy(&status, g.reply_in + g.rdisp[p], sizeof status);
            if (status != DDS_OK && rc == DDS_OK)
                rc = dds_err((int)status, "variable '%s'%s: rank %d refused a gather request (a "
                             "transfer outside its shard)", vars[0]->name,
                             nvars > 1 ? " (and the others read with it)" : "", s->group_index * s->width + p);
            g.pos[p] = g.rdisp[p] + 8;
            if (!g.counted[p]) {
                g.counted[p] = 1;
                atomic_fetch_add(&s->st_gather_requests, 1);
            }
            atomic_fetch_add(&s->st_gather_bytes, (uint64_t)g.rbytes[p]);
        }
        c = w;
        for (const dds_read_op *o; (o = next_op(&c, &var));) {
            int p = dest_of(&g, server, vars, var, o);
            memcpy(o->dst, g.reply_in + g.pos[p], (size_t)o->len);
            g.pos[p] += (int)o->len;
        }
    }
    *s->gather_gx = g;
    return rc;
}
