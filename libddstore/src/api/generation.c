/* Versioned variables: rows rewritten while they are read, never seen torn.
 * This file holds the machinery (counter lookup, checked reads, counted
 * writes) used by read.c and dds_update; the public functions that make
 * and query versioned variables are in versioned.c.
 *
 * Each versioned variable `x` has a hidden companion variable
 * "x\x1fgen" of 8-byte rows, made by the ordinary dds_init() so that it
 * lives in store memory exposed like any shard (MPI windows, libfabric
 * registrations, method-2 publication) and is read with the same
 * transfers. Every rank's companion shard is
 *   row 0:       block_rows (the same on every rank)
 *   row 1 + b:   generation counter of the rank's local rows
 *                [b * block_rows, (b + 1) * block_rows)
 * The companion is made before `x`, so a method-2 reader that sees `x`
 * published finds the companion published too.
 *
 * Seqlock protocol (see ddstore.h): the writer makes a block's counter odd,
 * copies the rows, makes it even; a reader reads the counters, the rows, the
 * counters again, each read complete before the next is issued, so the rows
 * were fetched strictly between the two counter reads. Equal even counters
 * mean no update overlapped the row read. Remote transfers (MPI_Get,
 * fi_read) fetch memory that the writer's release fences order: the odd
 * counter is in memory before any new row byte, and every new row byte
 * before the even counter. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define DEFAULT_RETRIES 1000

static pthread_mutex_t lookup_lock = PTHREAD_MUTEX_INITIALIZER;

bool dds_gen_hidden(const char *name)
{
    size_t n = strlen(name), k = sizeof DDS_GEN_SUFFIX - 1;
    return n > k && memcmp(name + n - k, DDS_GEN_SUFFIX, k) == 0;
}

int dds_gen_name(const char *name, char out[DDS_NAME_MAX + 1])
{
    size_t n = strlen(name), k = sizeof DDS_GEN_SUFFIX - 1;
    if (n + k > DDS_NAME_MAX)
        return dds_err(DDS_EINVAL, "versioned variable '%s': the name is longer than %d bytes "
                       "(the counters need %zu more)", name, (int)(DDS_NAME_MAX - k), k);
    memcpy(out, name, n);
    memcpy(out + n, DDS_GEN_SUFFIX, k + 1);
    return DDS_OK;
}

int64_t dds_gen_blocks(int64_t rows, int64_t block_rows)
{
    return rows == 0 ? 0 : (rows - 1) / block_rows + 1;
}

/* Method 2 reader: find x's counters, validate them against x. */
static int reader_lookup(dds_store *s, dds_var *v, dds_var **out)
{
    *out = NULL;
    char cname[DDS_NAME_MAX + 1];
    pthread_mutex_lock(&lookup_lock);
    int rc = DDS_OK;
    if (atomic_load(&v->gen_looked_up))
        goto done;
    if (dds_gen_hidden(v->name) || dds_gen_name(v->name, cname) != DDS_OK) {
        dds_err_clear();
        atomic_store(&v->gen_looked_up, 1);
        goto done;
    }
    dds_var *c = dds_var_find(s, cname);
    if (!c) {
        /* One more pass over the directory (x is known, so it does not
         * wait): a directory listing made while files were being added may
         * have shown x and missed its older companion. */
        rc = dds_fab_attach(s, v->name);
        if (rc)
            goto done;
        c = dds_var_find(s, cname);
    }
    if (c) {
        uint64_t b = 0;
        dds_read_op op = { .owner = 0, .src_offset = 0, .len = DDS_GEN_ROW_BYTES, .dst = (char *)&b };
        rc = c->row_bytes == DDS_GEN_ROW_BYTES ? dds_read_ops(s, c, &op, 1, false)
                                           : dds_err(DDS_EPROTO, "variable '%s': its generation counters "
                                                     "have %lld-byte rows, not 8", v->name,
                                                     (long long)c->row_bytes);
        if (rc)
            goto done;
        if (b < 1 || b > (uint64_t)INT64_MAX) {
            rc = dds_err(DDS_EPROTO, "variable '%s': published block size %llu is invalid", v->name,
                         (unsigned long long)b);
            goto done;
        }
        for (int g = 0; g < s->group_size; g++) {
            int64_t rows = v->offsets[g + 1] - v->offsets[g];
            int64_t have = c->offsets[g + 1] - c->offsets[g];
            if (have != 1 + dds_gen_blocks(rows, (int64_t)b)) {
                rc = dds_err(DDS_EPROTO, "variable '%s': core rank %d publishes %lld generation counters "
                             "for %lld rows in blocks of %llu", v->name, g, (long long)have - 1,
                             (long long)rows, (unsigned long long)b);
                goto done;
            }
        }
        v->gen_block_rows = (int64_t)b;
        atomic_store(&v->gen, c);
    }
    atomic_store(&v->gen_looked_up, 1);
done:
    *out = atomic_load(&v->gen);
    pthread_mutex_unlock(&lookup_lock);
    return rc;
}

int dds_gen_of(dds_store *s, dds_var *v, dds_var **gen)
{
    *gen = atomic_load_explicit(&v->gen, memory_order_acquire);
    if (*gen || !s->is_reader || atomic_load_explicit(&v->gen_looked_up, memory_order_acquire))
        return DDS_OK;
    return reader_lookup(s, v, gen);
}

/* ---- reading ----------------------------------------------------------------- */

static int max_retries(void)
{
    const char *e = dds_env("DDSTORE_GEN_RETRIES");
    if (e) {
        char *end;
        long n = strtol(e, &end, 10);
        if (*end == '\0' && n >= 0 && n <= 1000000000L)
            return (int)n;
        dds_debug("DDSTORE_GEN_RETRIES='%s' is not a count; using %d", e, DEFAULT_RETRIES);
    }
    return DEFAULT_RETRIES;
}

static void backoff(int attempt)
{
    if (attempt < 8)
        return; /* an update of a few rows is over in microseconds */
    long ns = 1000L << (attempt - 8 < 10 ? attempt - 8 : 10);
    if (ns > 1000000L)
        ns = 1000000L;
    struct timespec ts = { 0, ns };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Blocks [*b0, *b1] of the owner's shard that transfer `op` touches. */
static void op_blocks(const dds_var *v, const dds_read_op *op, int64_t *b0, int64_t *b1)
{
    int64_t first = op->src_offset / v->row_bytes;
    int64_t last = (op->src_offset + op->len) / v->row_bytes - 1;
    *b0 = first / v->gen_block_rows;
    *b1 = last / v->gen_block_rows;
}

int dds_gen_read(dds_store *s, dds_var *v, dds_var *gen, const dds_read_op *ops, size_t nops)
{
    if (nops == 0)
        return DDS_OK;
    /* Counter slots: op i's counters are first[i] .. first[i] + count(i). */
    size_t *first = malloc((nops + 1) * sizeof *first);
    size_t *pending = malloc(nops * sizeof *pending);
    dds_read_op *dops = malloc(nops * sizeof *dops);
    dds_read_op *gops = malloc(2 * nops * sizeof *gops);
    uint64_t *g1 = NULL, *g2 = NULL;
    int rc = DDS_OK;
    if (first && pending && dops && gops) {
        first[0] = 0;
        for (size_t i = 0; i < nops; i++) {
            int64_t b0, b1;
            op_blocks(v, &ops[i], &b0, &b1);
            first[i + 1] = first[i] + (size_t)(b1 - b0 + 1);
            pending[i] = i;
        }
        g1 = malloc(first[nops] * sizeof *g1);
        g2 = malloc(first[nops] * sizeof *g2);
    }
    if (!first || !pending || !dops || !gops || !g1 || !g2)
        rc = dds_err(DDS_ENOMEM, "variable '%s': out of memory for %zu versioned transfers", v->name, nops);
    size_t npending = nops;
    int limit = max_retries();
    for (int attempt = 0; rc == DDS_OK && npending; attempt++) {
        if (attempt > limit) {
            const dds_read_op *op = &ops[pending[0]];
            int64_t r0 = v->offsets[op->owner] + op->src_offset / v->row_bytes;
            rc = dds_err(DDS_EAGAIN,
                         "variable '%s': rows %lld..%lld (and %zu more transfers) were being rewritten "
                         "during each of %d reads; the writer updates them faster than they can be "
                         "read (raise DDSTORE_GEN_RETRIES, or write less often)",
                         v->name, (long long)r0, (long long)(r0 + op->len / v->row_bytes - 1),
                         npending - 1, limit + 1);
            break;
        }
        backoff(attempt);
        for (size_t j = 0; j < npending; j++) {
            size_t i = pending[j];
            int64_t b0, b1;
            op_blocks(v, &ops[i], &b0, &b1);
            dds_read_op g = { .owner = ops[i].owner,
                              .src_offset = (1 + b0) * DDS_GEN_ROW_BYTES,
                              .len = (b1 - b0 + 1) * DDS_GEN_ROW_BYTES };
            gops[j] = g;
            gops[j].dst = (char *)(g1 + first[i]);
            gops[nops + j] = g;
            gops[nops + j].dst = (char *)(g2 + first[i]);
            dops[j] = ops[i];
        }
        /* Each step is complete on return; the fences keep the compiler and
         * the CPU from moving local copies of one step into another. */
        rc = dds_read_ops(s, gen, gops, npending, false);
        atomic_thread_fence(memory_order_acquire);
        if (rc == DDS_OK)
            rc = dds_read_ops(s, v, dops, npending, false);
        atomic_thread_fence(memory_order_acquire);
        if (rc == DDS_OK)
            rc = dds_read_ops(s, gen, gops + nops, npending, false);
        if (rc)
            break;
        size_t still = 0;
        for (size_t j = 0; j < npending; j++) {
            size_t i = pending[j];
            bool ok = true;
            for (size_t k = first[i]; k < first[i + 1] && ok; k++)
                ok = g1[k] == g2[k] && (g1[k] & 1u) == 0;
            if (!ok)
                pending[still++] = i;
        }
        npending = still;
    }
    free(first);
    free(pending);
    free(dops);
    free(gops);
    free(g1);
    free(g2);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

int dds_gen_write(dds_store *s, dds_var *v, dds_var *gen, const void *data, int64_t nrows, int64_t offset)
{
    int64_t b0 = offset / v->gen_block_rows, b1 = (offset + nrows - 1) / v->gen_block_rows;
    uint64_t *ctr = (uint64_t *)gen->base + 1;
    size_t goff = (size_t)(1 + b0) * DDS_GEN_ROW_BYTES, glen = (size_t)(b1 - b0 + 1) * DDS_GEN_ROW_BYTES;
    size_t doff = (size_t)(offset * v->row_bytes), dlen = (size_t)(nrows * v->row_bytes);
    dds_shard_write_lock(true);
    int rc = dds_shard_open(gen, goff, glen, true);
    if (rc == DDS_OK) {
        rc = dds_shard_open(v, doff, dlen, true);
        if (rc == DDS_OK) {
            /* Odd: an update is in progress. A counter left odd (it never
             * is by this code) stays odd rather than turning even early. */
            for (int64_t b = b0; b <= b1; b++)
                __atomic_store_n(&ctr[b], __atomic_load_n(&ctr[b], __ATOMIC_RELAXED) | 1u, __ATOMIC_RELAXED);
            atomic_thread_fence(memory_order_seq_cst);
            if (s->tp->sync)
                rc = s->tp->sync(s, gen);
            memcpy(v->base + doff, data, dlen);
            atomic_thread_fence(memory_order_release);
            if (s->tp->sync && rc == DDS_OK)
                rc = s->tp->sync(s, v);
            for (int64_t b = b0; b <= b1; b++)
                __atomic_store_n(&ctr[b], __atomic_load_n(&ctr[b], __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
            if (s->tp->sync && rc == DDS_OK)
                rc = s->tp->sync(s, gen);
            dds_shard_open(v, doff, dlen, false);
        }
        dds_shard_open(gen, goff, glen, false);
    }
    dds_shard_write_lock(false);
    return rc;
}
