/* Method 0 owner-side gather: the rows of other nodes of a collective read
 * come by two-sided messages, one request and one reply per owner, instead
 * of one MPI_Get per row.
 *
 * Why here and why collective: method-0 batched reads across nodes are
 * already group-collective (read.c: the MPIs in use serve a passive-target
 * get only while the target is inside MPI), so every rank of the group is
 * in the read anyway and a bounded exchange costs no extra
 * synchronisation. The read's step detects ranks in different calls,
 * agrees on argument errors and on the number of rounds, so that every
 * rank, also one with nothing to read or one in dds_free() that meets the
 * read, takes part in each round and serves the others.
 *
 * The step carries the first round. On such a store every step of the
 * group (every kind of collective call: dds_rma_step_exchange, used by
 * collective.c) is one message from each rank to each rank on the private
 * communicator below, the step's words (its kind, error verdict, value)
 * ahead of the rank's requests of the read's first round, empty outside a
 * read; each rank reduces the words it receives itself. Measured (2 hosts
 * x 2 ranks, 256 rows of 64 B, tcp): with the step as an MPI_Iallreduce
 * followed by the round, a read took 96-100 us; with the step carrying
 * the round, 81-90 us (method 1 in the same runs: 70-78 us). Two calls of different kinds still meet
 * in one exchange and see their difference, as with the allreduce.
 *
 * A read of several variables (dds_get_batch_vars) is one read: one step and
 * one exchange for all of them, so a sample of several fields costs what one
 * field costs in synchronisations.
 *
 * A round, on a private duplicate of the group communicator (so nothing of
 * the exchange can match other communication of the store):
 *   1. the reader counts the transfers it asks of each owner;
 *   2. one message to every rank (empty where nothing is asked; in the
 *      step for the first round) of the transfers, (variable and owner,
 *      byte offset in the owner's shard, length) triples, the variable by
 *      its index in the store's table (the same on every rank: variables
 *      are added collectively, in one order) in the low 32 bits of the
 *      first, the owner's group rank in the high ones; received by matched
 *      probe, so no all-to-all of counts comes first;
 *   3. each owner checks the transfers against its shard and copies them
 *      into one send buffer, an 8-byte status ahead of each reader's rows,
 *      and sends each reader its reply, which lands in the reader's bounce
 *      buffer and is then scattered into the transfers' destinations.
 * By node: where every rank maps its node peers' shards (node shared
 * memory, dds_node_servers), the transfers of another node go to one rank
 * of that node (dds_store.node_server), which copies them from its own
 * and its peers' shards, up to DDS_GATHER_NODE_MAX_BYTES of a node per
 * round; a node asked for more, and variables not node_shared, go to each
 * owner. Replies go only where rows were asked, so with 8 ranks per node a
 * reader exchanges rows with up to 8 times fewer peers.
 * A round carries at most DDSTORE_GATHER_ROUND_BYTES (16 MiB) of rows and
 * of requests per reader (dds_gather_round), so buffers stay bounded
 * however large the batch. Every wait is dds_poll_bounded: it sleeps
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

/* Tags on the gather communicator: requests (and steps) 1 and 2 by the
 * exchange's parity, replies 3. */
#define REPLY_TAG 3

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

/* The transfers of one round, [at, end) of the read's lists, in order. */
typedef struct round_walk {
    const dds_read_op *const *ops;
    const size_t *nops;
    dds_gather_pos at, end;
} round_walk;

/* The exchange's buffers, kept by the store between reads (s->gather_gx):
 * a batch's replies are megabytes, and fresh allocations of that size pay
 * their page faults again on every read. Reads are group-collective, so
 * one thread at a time uses them. */
typedef struct dds_gx {
    int n;
    int64_t *hdr_out, *hdr_in; /* n each: transfers asked of each owner this round */
    int *scount, *sdisp, *rdisp, *pos; /* n each */
    int64_t *rbytes;           /* n: bytes of rows asked of each owner this round */
    int64_t *node_bytes;       /* n: bytes of rows of each node this round, by its serving rank */
    unsigned char *counted;    /* n: owner already counted in st_gather_requests */
    MPI_Request *sreq;         /* n: this round's request messages to each peer */
    MPI_Request *xreq;         /* 2n: its replies, received then sent */
    int64_t seq;               /* message exchanges so far (steps, rounds): their tag parity */
    /* The collective read in progress: its transfers, the next round's
     * start and the current round; whether that round's requests are
     * counted and laid out (by dds_rma_gather_begin, to travel in the
     * read's step), and whether the requests asked of this rank are in
     * (received in the step). */
    dds_var *const *vars;
    const dds_read_op *const *ops;
    const size_t *nops;
    size_t nvars;
    dds_gather_pos cursor;
    round_walk w;
    int tag;
    bool prepared, have_requests;
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
    free(g->sreq);
    free(g->xreq);
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


/* The exchange's buffers (s->gather_gx), made at the store's first step. */
static int gx_get(dds_store *s, gx **out)
{
    int n = s->group_size;
    if (!s->gather_gx) {
        gx *c = calloc(1, sizeof *c);
        if (c) {
            c->n = n;
            c->hdr_out = malloc(2 * (size_t)n * sizeof *c->hdr_out);
            c->scount = malloc(4 * (size_t)n * sizeof *c->scount);
            c->rbytes = malloc((size_t)n * sizeof *c->rbytes);
            c->node_bytes = malloc((size_t)n * sizeof *c->node_bytes);
            c->counted = malloc((size_t)n);
            c->sreq = malloc((size_t)n * sizeof *c->sreq);
            c->xreq = malloc(2 * (size_t)n * sizeof *c->xreq);
        }
        if (!c || !c->hdr_out || !c->scount || !c->rbytes || !c->node_bytes || !c->counted || !c->sreq ||
            !c->xreq) {
            gx_free(c);
            return broken(s, dds_err(DDS_ENOMEM, "out of memory for a gather exchange of %d ranks", n));
        }
        c->hdr_in = c->hdr_out + n;
        c->sdisp = c->scount + n;
        c->rdisp = c->scount + 2 * n;
        c->pos = c->scount + 3 * n;
        s->gather_gx = c;
    }
    *out = s->gather_gx;
    return DDS_OK;
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

/* This rank's part of a read: its transfers (none: it only serves). A
 * reader that cannot set up asks for nothing, still serves the others,
 * and fails its read with the error returned here. */
static int read_start(dds_store *s, gx *g, dds_var *const *vars, const dds_read_op *const *ops,
                      const size_t *nops, size_t nvars)
{
    int rc = DDS_OK;
    memset(g->counted, 0, (size_t)g->n);
    if (nvars)
        rc = reader_setup(s, g, vars, ops, nops, nvars);
    g->vars = vars;
    g->ops = ops;
    g->nops = nops;
    g->nvars = rc ? 0 : nvars;
    g->cursor = (dds_gather_pos){ 0, 0 };
    return rc;
}

/* Step 1 of the next round: count what is asked of each owner (or node)
 * and lay the transfers out by peer (at g->sdisp, g->scount words). */
static void prepare_round(dds_store *s, gx *g)
{
    int n = g->n;
    const int *server = dds_node_servers(s);
    g->w = (round_walk){ g->ops, g->nops, g->cursor, g->cursor };
    dds_gather_round(s, g->ops, g->nops, g->nvars, &g->w.end);
    g->cursor = g->w.end;
    size_t var;
    for (int p = 0; p < n; p++) {
        g->hdr_out[p] = 0;
        g->rbytes[p] = 0;
        g->node_bytes[p] = 0;
    }
    round_walk c = g->w;
    if (server)
        for (const dds_read_op *o; (o = next_op(&c, &var));)
            g->node_bytes[server[o->owner]] += o->len;
    c = g->w;
    for (const dds_read_op *o; (o = next_op(&c, &var));) {
        int p = dest_of(g, server, g->vars, var, o);
        g->hdr_out[p]++;
        g->rbytes[p] += o->len;
    }
    /* The transfers, (variable and owner, offset, length) each, by peer. */
    int off = 0;
    for (int p = 0; p < n; p++) {
        g->scount[p] = (int)(3 * g->hdr_out[p]);
        g->sdisp[p] = g->pos[p] = off;
        off += g->scount[p];
    }
    c = g->w;
    for (const dds_read_op *o; (o = next_op(&c, &var));) {
        int p = dest_of(g, server, g->vars, var, o);
        g->triples_out[g->pos[p]++] = (int64_t)((uint64_t)o->owner << 32 | (uint64_t)g->vidx[var]);
        g->triples_out[g->pos[p]++] = o->src_offset;
        g->triples_out[g->pos[p]++] = o->len;
    }
    g->prepared = true;
}

/* Step 2: every rank sends each rank, itself included, one message of the
 * transfers it asks of it (behind `words` words of the step), empty where
 * none, and receives one from each, sized by a matched probe: each rank
 * learns what it is asked without an all-to-all of counts first. A peer
 * can be one exchange ahead, never two (it cannot finish an exchange
 * without this rank's message of it), so the exchange's parity in the tag
 * keeps two exchanges' messages apart. The requests land in
 * g->triples_in, by source at g->rdisp (int64 words, past the step's),
 * with g->hdr_in transfers each; the step's words are reduced into out. */
typedef struct request_wait {
    dds_store *s;
    gx *g;
    int got, words;
    size_t used;
    int64_t *out;
} request_wait;

static int take_requests(void *ctx, bool *done)
{
    request_wait *rw = ctx;
    gx *g = rw->g;
    dds_store *s = rw->s;
    while (rw->got < g->n) {
        int flag = 0, count = 0;
        MPI_Message msg;
        MPI_Status st;
        int mrc = MPI_Improbe(MPI_ANY_SOURCE, g->tag, s->gather_comm, &flag, &msg, &st);
        if (mrc != MPI_SUCCESS)
            return broken(s, dds_err_mpi(mrc, "MPI_Improbe (gather requests)"));
        if (!flag)
            break;
        int src = st.MPI_SOURCE;
        mrc = MPI_Get_count(&st, MPI_INT64_T, &count);
        if (mrc != MPI_SUCCESS || count == MPI_UNDEFINED || count < rw->words || (count - rw->words) % 3 ||
            src < 0 || src >= g->n || g->hdr_in[src] >= 0 || rw->used + (size_t)count > (size_t)INT_MAX)
            return broken(s, dds_err(DDS_EOVERFLOW, "gather exchange: rank %d got a request message it "
                                     "cannot take from rank %d (%d words; more than MPI counts can "
                                     "hold, or out of step)", s->rank, src, count));
        if (grow((void **)&g->triples_in, &g->triples_in_cap, (rw->used + (size_t)count) * sizeof(int64_t) + 24))
            return broken(s, dds_err(DDS_ENOMEM, "out of memory for %lld gather requests",
                                     (long long)(rw->used + (size_t)count) / 3));
        int64_t *in = g->triples_in + rw->used;
        mrc = MPI_Mrecv(in, count, MPI_INT64_T, &msg, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return broken(s, dds_err_mpi(mrc, "MPI_Mrecv (gather requests)"));
        for (int k = 0; k < rw->words; k++)
            rw->out[k] = in[k] > rw->out[k] ? in[k] : rw->out[k];
        g->rdisp[src] = (int)rw->used + rw->words;
        g->hdr_in[src] = (count - rw->words) / 3;
        rw->used += (size_t)count;
        rw->got++;
    }
    int sent = 0;
    int mrc = MPI_Testall(g->n, g->sreq, &sent, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS)
        return broken(s, dds_err_mpi(mrc, "MPI_Testall (gather requests)"));
    *done = sent && rw->got == g->n;
    return DDS_OK;
}

static int exchange_requests(dds_store *s, gx *g, int words, int64_t *out, int kind, const char *what)
{
    g->tag = 1 + (int)(g->seq++ & 1);
    for (int p = 0; p < g->n; p++) {
        g->hdr_in[p] = -1;
        g->sreq[p] = MPI_REQUEST_NULL;
    }
    for (int p = 0; p < g->n; p++) {
        int mrc = MPI_Isend(g->triples_out + g->sdisp[p], g->scount[p], MPI_INT64_T, p, g->tag, s->gather_comm,
                            &g->sreq[p]);
        if (mrc != MPI_SUCCESS)
            return broken(s, dds_err_mpi(mrc, "MPI_Isend (gather requests)"));
    }
    g->prepared = false;
    request_wait rw = { s, g, 0, words, 0, out };
    int rc = dds_poll_bounded(s, take_requests, &rw, kind, what);
    g->have_requests = rc == DDS_OK;
    return rc;
}

static const char *const exchange_wait = "the other ranks of its group in a gather exchange (method 0)";

/* Step 3 of the round whose requests are in: the owner gathers each
 * reader's rows behind a status and replies; the reader scatters its
 * replies into the transfers' destinations. */
static int finish_round(dds_store *s, gx *g)
{
    int n = g->n;
    g->have_requests = false;
    int64_t expect = 0;
    for (int p = 0; p < n; p++) {
        int count = g->hdr_out[p] ? (int)(8 + g->rbytes[p]) : 0;
        g->xreq[p] = g->xreq[n + p] = MPI_REQUEST_NULL;
        g->pos[p] = (int)expect + 8; /* where the rows of p's reply start, behind its status */
        expect += count;
        int mrc = count ? MPI_Irecv(g->reply_in + g->pos[p] - 8, count, MPI_BYTE, p, REPLY_TAG, s->gather_comm,
                                    &g->xreq[p])
                        : MPI_SUCCESS;
        if (mrc != MPI_SUCCESS)
            return broken(s, dds_err_mpi(mrc, "MPI_Irecv (gather replies)"));
    }
    int64_t out_total = 0;
    bool bad = false;
    for (int p = 0; p < n; p++) {
        int64_t k = g->hdr_in[p], bytes = 0;
        for (int64_t t = 0; t < k; t++) {
            int64_t len = g->triples_in[g->rdisp[p] + 3 * t + 2];
            bytes += len > 0 && len <= INT_MAX ? len : 0;
        }
        int64_t size = k ? 8 + bytes : 0;
        if (size > INT_MAX || out_total > INT_MAX - size)
            bad = true;
        g->scount[p] = bad ? 0 : (int)size;
        g->sdisp[p] = (int)out_total;
        out_total += g->scount[p];
    }
    if (bad)
        return broken(s, dds_err(DDS_EOVERFLOW, "gather exchange: rank %d was asked for more "
                                 "bytes in one round than MPI counts can hold", s->rank));
    if (grow((void **)&g->reply_out, &g->reply_out_cap, (size_t)out_total + 8))
        return broken(s, dds_err(DDS_ENOMEM, "out of memory for %lld bytes of gather replies",
                                 (long long)out_total));
    /* Each reply leaves as soon as it is gathered, while the next is. */
    for (int p = 0; p < n; p++) {
        if (!g->scount[p])
            continue;
        serve_peer(s, g->triples_in + g->rdisp[p], g->hdr_in[p], g->reply_out + g->sdisp[p]);
        int mrc = MPI_Isend(g->reply_out + g->sdisp[p], g->scount[p], MPI_BYTE, p, REPLY_TAG, s->gather_comm,
                            &g->xreq[n + p]);
        if (mrc != MPI_SUCCESS)
            return broken(s, dds_err_mpi(mrc, "MPI_Isend (gather replies)"));
    }
    int rc = dds_wait_bounded(s, 2 * n, g->xreq, DDS_COLL_READ, exchange_wait);
    if (rc)
        return rc;

    for (int p = 0; p < n; p++) {
        if (!g->hdr_out[p])
            continue;
        int64_t status;
        memcpy(&status, g->reply_in + g->pos[p] - 8, sizeof status);
        if (status != DDS_OK && rc == DDS_OK)
            rc = dds_err((int)status, "variable '%s'%s: rank %d refused a gather request (a "
                         "transfer outside its shard)", g->vars[0]->name,
                         g->nvars > 1 ? " (and the others read with it)" : "", s->group_index * s->width + p);
        if (!g->counted[p]) {
            g->counted[p] = 1;
            atomic_fetch_add(&s->st_gather_requests, 1);
        }
        atomic_fetch_add(&s->st_gather_bytes, (uint64_t)g->rbytes[p]);
    }
    const int *server = dds_node_servers(s);
    round_walk c = g->w;
    size_t var;
    for (const dds_read_op *o; (o = next_op(&c, &var));) {
        int p = dest_of(g, server, g->vars, var, o);
        memcpy(o->dst, g->reply_in + g->pos[p], (size_t)o->len);
        g->pos[p] += (int)o->len;
    }
    return rc;
}

int dds_rma_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)bounded; /* always a collective read: bounded by the store's timeout */
    return dds_rma_gather_vars(s, &v, &ops, &nops, nops ? 1 : 0);
}

int dds_rma_gather_begin(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                         size_t nvars)
{
    gx *g;
    int rc = gx_get(s, &g);
    if (rc)
        return rc;
    rc = read_start(s, g, vars, ops, nops, nvars);
    prepare_round(s, g);
    return rc;
}

/* The exchange's state for a collective call (what it is, for the error). */
static int exchange_of(dds_store *s, const char *what, gx **g)
{
    if (s->gather_comm == MPI_COMM_NULL)
        return broken(s, dds_err(DDS_ESTATE, "method 0: no gather communicator for a collective %s", what));
    return gx_get(s, g);
}

int dds_rma_step_exchange(dds_store *s, int kind, const int64_t *in, int64_t *out, int nwords, const char *what)
{
    gx *g;
    int rc = exchange_of(s, "step", &g);
    if (rc)
        return rc;
    if (!g->prepared || kind != DDS_COLL_READ) { /* nothing asked: the step's words alone */
        read_start(s, g, NULL, NULL, NULL, 0);
        prepare_round(s, g);
    }
    /* Make room for the step's words ahead of each peer's requests. */
    size_t words = 0;
    for (int p = 0; p < g->n; p++)
        words += (size_t)g->scount[p];
    if (grow((void **)&g->triples_out, &g->triples_out_cap, (words + (size_t)g->n * (size_t)nwords) * sizeof(int64_t)))
        return broken(s, dds_err(DDS_ENOMEM, "out of memory for a collective step of %d ranks", g->n));
    for (int p = g->n - 1; p >= 0; p--) {
        int at = g->sdisp[p] + p * nwords;
        memmove(g->triples_out + at + nwords, g->triples_out + g->sdisp[p], (size_t)g->scount[p] * sizeof(int64_t));
        memcpy(g->triples_out + at, in, (size_t)nwords * sizeof(int64_t));
        g->sdisp[p] = at;
        g->scount[p] += nwords;
    }
    for (int k = 0; k < nwords; k++)
        out[k] = INT64_MIN;
    return exchange_requests(s, g, nwords, out, kind, what);
}

int dds_rma_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                        size_t nvars)
{
    /* The read's lists were laid out by dds_rma_gather_begin before its step. */
    (void)vars;
    (void)ops;
    (void)nops;
    (void)nvars;
    gx *g;
    int rc = exchange_of(s, "read", &g);
    if (rc)
        return rc;
    /* Rounds follow a step that met (steps_by_message: every gathering
     * store's steps), which carried the first round's requests. */
    if (!g->have_requests)
        return broken(s, dds_err(DDS_ESTATE, "method 0: a gather exchange without the step that carries "
                                             "its first round"));
    for (int64_t round = 0; rc == DDS_OK && round < s->gather_rounds; round++) {
        if (round > 0) {
            prepare_round(s, g);
            int64_t none = 0;
            rc = exchange_requests(s, g, 0, &none, DDS_COLL_READ, exchange_wait);
        }
        if (rc == DDS_OK)
            rc = finish_round(s, g);
    }
    return rc;
}
