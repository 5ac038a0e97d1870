/* Transfers: one list of dds_read_op of one variable carried out.
 * Transfers from shards this process can address (its own, or a node
 * peer's in shared memory) are memcpy; the rest go to the transport (MPI RMA
 * or libfabric), grouped by owner, as one-sided reads or by owner-side
 * gather (the rule: gather.c). Below read.c and generation.c, which both
 * build transfer lists. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Scratch of dds_read_split, one per thread, kept between calls (a read
 * sorts its transfers on every call; a fresh allocation each time cost as
 * much as the sort), freed when the thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
typedef struct split_scratch {
    dds_read_op *ops;
    size_t cap;
    size_t *count;
    size_t count_cap;
} split_scratch;

static void scratch_free(void *p)
{
    split_scratch *t = p;
    free(t->ops);
    free(t->count);
    free(t);
}

static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

/* This thread's scratch with room for `n` transfers and `owners` + 1
 * counts (zeroed), or NULL. */
static split_scratch *scratch_get(size_t n, size_t owners)
{
    pthread_once(&scratch_once, scratch_init);
    split_scratch *t = pthread_getspecific(scratch_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(scratch_key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    if (t->cap < n) {
        dds_read_op *p = realloc(t->ops, n * sizeof *p);
        if (!p)
            return NULL;
        t->ops = p;
        t->cap = n;
    }
    if (t->count_cap < owners + 1) {
        size_t *c = realloc(t->count, (owners + 1) * sizeof *c);
        if (!c)
            return NULL;
        t->count = c;
        t->count_cap = owners + 1;
    }
    memset(t->count, 0, (owners + 1) * sizeof *t->count);
    return t;
}

int dds_read_split(dds_store *s, dds_var *v, dds_read_op *ops, size_t nops, size_t *nremote)
{
    *nremote = 0;
    if (nops == 0)
        return DDS_OK;
    split_scratch *t = scratch_get(nops, (size_t)s->group_size);
    if (!t)
        return dds_err(DDS_ENOMEM, "variable '%s': out of memory sorting %zu transfers", v->name, nops);
    /* One pass: copy what this process can address, count the rest by
     * owner; then a stable placement by owner (a counting sort), so that
     * each target is addressed in one burst. */
    uint64_t bytes_local = 0, bytes_remote = 0;
    int self = s->is_reader ? -1 : s->group_rank;
    size_t *count = t->count, n = 0;
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op *op = &ops[i];
        if (op->owner == self)
            bytes_local += (uint64_t)op->len;
        else
            bytes_remote += (uint64_t)op->len;
        const char *peer = v->peer_base ? v->peer_base[op->owner] : NULL;
        if (peer) {
            memcpy(op->dst, peer + op->src_offset, (size_t)op->len);
        } else {
            count[op->owner + 1]++;
            n++;
        }
    }
    /* Every transfer is whole rows: one division per call, not per row. */
    atomic_fetch_add(&s->st_rows_local, bytes_local / (uint64_t)v->row_bytes);
    atomic_fetch_add(&s->st_rows_remote, bytes_remote / (uint64_t)v->row_bytes);
    atomic_fetch_add(&s->st_bytes_local, bytes_local);
    atomic_fetch_add(&s->st_bytes_remote, bytes_remote);
    *nremote = n;
    if (n == 0)
        return DDS_OK;
    for (int g = 0; g < s->group_size; g++)
        count[g + 1] += count[g];
    for (size_t i = 0; i < nops; i++)
        if (!v->peer_base || !v->peer_base[ops[i].owner])
            t->ops[count[ops[i].owner]++] = ops[i];
    memcpy(ops, t->ops, n * sizeof *ops);
    return DDS_OK;
}

int dds_read_ops(dds_store *s, dds_var *v, dds_read_op *ops, size_t nops, bool bounded)
{
    size_t nremote;
    int rc = dds_read_split(s, v, ops, nops, &nremote);
    if (rc || !nremote)
        return rc;
    /* A collective transport gathers after the read's collective step,
     * which agrees on the exchange (read.c): never from here. */
    if (!s->tp->collective_reads && dds_gather_chosen(s, v, bounded))
        return s->tp->gather(s, v, ops, nremote, bounded);
    return s->tp->read(s, v, ops, nremote, bounded);
}
