/* Reads (get, get_batch, get_ranges), epochs and synchronisation.
 *
 * Every read is turned into a list of transfers (dds_read_op): rows are
 * mapped to their owner by binary search over the shard offsets, and
 * consecutive rows of one owner that land consecutively in the output become
 * one transfer; transfer.c carries the list out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct op_list {
    dds_read_op *ops;
    size_t n, cap;
} op_list;

static int ops_reserve(op_list *l, size_t n, const char *name)
{
    if (n <= l->cap)
        return DDS_OK;
    dds_read_op *p = realloc(l->ops, n * sizeof *p);
    if (!p)
        return dds_err(DDS_ENOMEM, "variable '%s': out of memory for %zu transfers", name, n);
    l->ops = p;
    l->cap = n;
    return DDS_OK;
}

/* Append rows [row, row+count) of one owner landing at dst; merges with the
 * previous transfer when both source and destination continue it. */
static void ops_push(op_list *l, const dds_var *v, int owner, int64_t row, int64_t count, char *dst)
{
    int64_t src = (row - v->offsets[owner]) * v->row_bytes;
    int64_t len = count * v->row_bytes;
    if (l->n) {
        dds_read_op *p = &l->ops[l->n - 1];
        if (p->owner == owner && p->src_offset + p->len == src && p->dst + p->len == dst) {
            p->len += len;
            return;
        }
    }
    l->ops[l->n++] = (dds_read_op){ .owner = owner, .src_offset = src, .len = len, .dst = dst };
}

/* Split [start, start+count) across owners. */
static int ops_push_range(op_list *l, const dds_var *v, int group_size, int64_t start, int64_t count,
                          char *dst)
{
    while (count > 0) {
        int owner = dds_owner_of(v, group_size, start);
        int64_t n = v->offsets[owner + 1] - start;
        if (n > count)
            n = count;
        if (l->n == l->cap && ops_reserve(l, l->cap * 2 + 8, v->name))
            return DDS_ENOMEM;
        ops_push(l, v, owner, start, n, dst);
        start += n;
        count -= n;
        dst += n * v->row_bytes;
    }
    return DDS_OK;
}

/* Versioned variables (generation.c) check their counters around the
 * transfers; every other variable takes the plain path. The counter and row
 * reads of a versioned variable complete with a flush each (they must be
 * ordered), so only the collective step after them is bounded. */
static int execute(dds_store *s, dds_var *v, op_list *l, bool bounded)
{
    dds_var *gen;
    int rc = dds_gen_of(s, v, &gen);
    if (rc)
        return rc;
    if (gen)
        return dds_gen_read(s, v, gen, l->ops, l->n);
    return dds_read_ops(s, v, l->ops, l->n, bounded);
}

/* Whether batched reads are group-collective (a transport with
 * collective_reads: method 0): not where the whole
 * group shares memory (every read is then a memcpy), not in a group of one,
 * and not for readers. The one copy of the rule: dds_store_info_get()
 * reports it too (internal.h), and bindings take it from there (pyddstore's
 * reads_collective; pyddstore.torch's loader reads in one thread exactly where it holds). */
bool dds_reads_collective(const dds_store *s)
{
    return s->tp->collective_reads && !s->is_reader && s->group_size > 1 &&
           !(s->node_local && s->shm_enabled);
}

bool dds_gather_posts_early(const dds_store *s)
{
    return s->tp->gather_begin && dds_gather_possible(s) && dds_reads_collective(s);
}

/* Checks shared by all reads. *live tells whether the store handle is usable
 * (and so whether a collective completion may run). */
static int read_begin(dds_store *s, const char *name, void *out, int64_t nrows, dds_var **v,
                      bool *live)
{
    *v = NULL;
    int rc = dds_store_check(s);
    *live = rc == DDS_OK;
    if (rc)
        return rc;
    rc = dds_var_get(s, name, v);
    if (rc)
        return rc;
    if (nrows < 0)
        return dds_err(DDS_EINVAL, "variable '%s': negative row count %lld", name, (long long)nrows);
    if (nrows > 0 && !out)
        return dds_err(DDS_EINVAL, "variable '%s': output buffer is NULL", name);
    if (nrows > INT64_MAX / (*v)->row_bytes)
        return dds_err(DDS_EOVERFLOW, "variable '%s': %lld rows overflow the output size", name,
                       (long long)nrows);
    return DDS_OK;
}

static void read_end(dds_store *s, uint64_t t0)
{
    atomic_fetch_add(&s->st_calls, 1);
    atomic_fetch_add(&s->st_read_ns, dds_now_ns() - t0);
}

DDS_API int dds_get(dds_store *s, const char *name, void *out, int64_t start, int64_t nrows)
{
    dds_err_clear();
    uint64_t t0 = dds_now_ns();
    dds_var *v;
    bool live;
    int rc = read_begin(s, name, out, nrows, &v, &live);
    if (rc)
        return rc;
    int64_t total = v->offsets[s->group_size];
    if (start < 0 || start > total || nrows > total - start)
        return dds_err(DDS_ERANGE, "variable '%s': %lld rows from row %lld are outside [0, %lld)", name,
                       (long long)nrows, (long long)start, (long long)total);
    op_list l = { 0 };
    rc = ops_reserve(&l, (size_t)s->group_size < 64 ? (size_t)s->group_size : 64, name);
    if (rc == DDS_OK)
        rc = ops_push_range(&l, v, s->group_size, start, nrows, out);
    if (rc == DDS_OK)
        rc = execute(s, v, &l, false);
    free(l.ops);
    read_end(s, t0);
    return rc;
}

/* Split transfers longer than a gather round (get_ranges over large
 * ranges), so that every round of the exchange is bounded. */
static int split_for_rounds(dds_store *s, dds_var *v, op_list *l, size_t n, size_t *nsplit)
{
    int64_t cap = dds_gather_round_cap(s);
    size_t extra = 0;
    for (size_t i = 0; i < n; i++)
        if (l->ops[i].len > cap)
            extra += (size_t)((l->ops[i].len - 1) / cap);
    *nsplit = n;
    if (!extra)
        return DDS_OK;
    int rc = ops_reserve(l, n + extra, v->name);
    if (rc)
        return rc;
    /* From the end, so that each op is moved before its slot is reused. */
    size_t j = n + extra;
    for (size_t i = n; i-- > 0;) {
        dds_read_op op = l->ops[i];
        int64_t pieces = (op.len + cap - 1) / cap;
        for (int64_t k = pieces; k-- > 0;) {
            int64_t off = k * cap;
            int64_t len = op.len - off < cap ? op.len - off : cap;
            l->ops[--j] = (dds_read_op){ .owner = op.owner, .src_offset = op.src_offset + off,
                                         .len = len, .dst = op.dst + off };
        }
    }
    *nsplit = l->n = n + extra;
    return DDS_OK;
}

/* A collective read (method 0 across nodes: dds_reads_collective) of
 * nvars variables (lists[k]: the transfers of vars[k]; none for a read
 * that failed its checks, or dds_read_fail). What this rank can address
 * is copied and rows read one-sided (versioned variables) are read first.
 * Where reads may gather (s->steps_by_message), the first round of the
 * owner-side exchange is prepared next: its requests travel in the step.
 * Then the read's step: tagged and bounded, it keeps every rank inside MPI
 * until the one-sided reads are done (osc/pt2pt, osc/ucx over TCP and
 * MPICH serve passive reads only while the target is in MPI; no trailing
 * step is needed), reports a failure everywhere, turns unequal numbers of
 * reads into an error instead of a hang, and agrees on the number of
 * exchange rounds (the largest any rank needs). Then every rank of the
 * group, whether it gathers, read nothing or had bad arguments, takes part
 * in the rounds, serving the others.
 * Several variables make one read: one step and one exchange
 * (dds_get_batch_vars). Where no rank may gather (DDSTORE_GATHER=never,
 * alike on every rank) this is one-sided reads, then the read's step. */
static int gather_read(dds_store *s, dds_var *const *vars, op_list *lists, size_t nvars, int rc)
{
    int64_t rounds = 0;
    const dds_read_op **ops = calloc(nvars ? nvars : 1, sizeof *ops);
    size_t *ng = calloc(nvars ? nvars : 1, sizeof *ng);
    if (rc == DDS_OK && (!ops || !ng))
        rc = dds_err(DDS_ENOMEM, "out of memory for a read of %zu variables", nvars);
    bool gathers = false;
    for (size_t k = 0; rc == DDS_OK && k < nvars; k++) {
        op_list *l = &lists[k];
        dds_var *gen = NULL;
        if (l->n)
            rc = dds_gen_of(s, vars[k], &gen);
        if (rc == DDS_OK && l->n && !gen && dds_gather_chosen(s, vars[k], true)) {
            size_t nremote = 0;
            rc = dds_read_split(s, vars[k], l->ops, l->n, &nremote);
            if (rc == DDS_OK)
                rc = split_for_rounds(s, vars[k], l, nremote, &ng[k]);
            ops[k] = l->ops;
            gathers |= ng[k] > 0;
        } else if (rc == DDS_OK && l->n) {
            rc = execute(s, vars[k], l, true);
        }
    }
    if (rc == DDS_OK && gathers)
        for (dds_gather_pos at = { 0, 0 }; dds_gather_round(s, ops, ng, nvars, &at);)
            rounds++;
    size_t asked = rc == DDS_OK && gathers ? nvars : 0;
    if (s->steps_by_message) {
        int brc = s->tp->gather_begin(s, vars, ops, ng, asked); /* its requests travel in the step */
        rc = rc ? rc : brc;
    }
    rc = dds_step_val(s, DDS_COLL_READ, rc, NULL, &rounds);
    if (rc == DDS_OK && rounds > 0) {
        s->gather_rounds = rounds;
        rc = s->tp->gather_vars(s, vars, ops, ng, asked);
    }
    free(ops);
    free(ng);
    return rc;
}

int dds_read_serve(dds_store *s, int64_t rounds)
{
    if (rounds <= 0)
        return DDS_OK;
    s->gather_rounds = rounds;
    return s->tp->gather_vars(s, NULL, NULL, NULL, 0);
}

/* Shared end of get_batch and get_ranges: run the transfers when the
 * arguments were good; where reads are collective, as one collective read
 * (gather_read: a rank whose arguments were bad still takes part, so none
 * waits for it). */
static int batched_read_finish(dds_store *s, dds_var *v, op_list *l, bool live, int rc, uint64_t t0)
{
    if (live && dds_reads_collective(s))
        rc = gather_read(s, &v, l, 1, rc);
    else if (rc == DDS_OK && l->n)
        rc = execute(s, v, l, false);
    free(l->ops);
    if (live)
        read_end(s, t0);
    return rc;
}

/* The transfers of rows[0..nrows) of v landing at out (checks each row). */
static int batch_ops(dds_store *s, dds_var *v, void *out, const int64_t *rows, int64_t nrows, op_list *l)
{
    if (nrows > 0 && !rows)
        return dds_err(DDS_EINVAL, "variable '%s': rows is NULL", v->name);
    if (nrows <= 0)
        return DDS_OK;
    int64_t total = v->offsets[s->group_size];
    int rc = ops_reserve(l, (size_t)nrows, v->name);
    int owner = 0;
    int64_t prev = -2;
    for (int64_t i = 0; rc == DDS_OK && i < nrows; i++) {
        int64_t r = rows[i];
        if (r < 0 || r >= total)
            return dds_err(DDS_ERANGE, "variable '%s': row %lld (position %lld) is outside [0, %lld)", v->name,
                           (long long)r, (long long)i, (long long)total);
        /* The row after the previous one mostly stays with its owner. Asking
         * that, not whether any row is in the last owner's range, keeps the
         * branch predictable for random batches as for sequential ones. */
        if (r != prev + 1 || r >= v->offsets[owner + 1])
            owner = dds_owner_of(v, s->group_size, r);
        prev = r;
        ops_push(l, v, owner, r, 1, (char *)out + i * v->row_bytes);
    }
    return rc;
}

DDS_API int dds_get_batch(dds_store *s, const char *name, void *out, const int64_t *rows, int64_t nrows)
{
    dds_err_clear();
    uint64_t t0 = dds_now_ns();
    dds_var *v;
    bool live;
    int rc = read_begin(s, name, out, nrows, &v, &live);
    op_list l = { 0 };
    if (rc == DDS_OK)
        rc = batch_ops(s, v, out, rows, nrows, &l);
    return batched_read_finish(s, v, &l, live, rc, t0);
}

/* dds_get_batch of each variable in turn, with the first error kept (every
 * call is made: where reads are collective the others are waited for in
 * each). */
static int batch_vars_each(dds_store *s, int32_t nvars, const char *const *names, void *const *outs,
                           const int64_t *rows, int64_t nrows)
{
    int first = DDS_OK;
    char msg[1024] = "";
    for (int32_t i = 0; i < nvars; i++) {
        int rc = dds_get_batch(s, names[i], outs[i], rows, nrows);
        if (rc && first == DDS_OK) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", dds_last_error());
        }
    }
    return first ? dds_err(first, "%s", msg) : DDS_OK;
}

/* Where reads are collective: one collective read of every variable, one
 * step and (where reads gather) one exchange. A rank whose arguments are
 * bad still takes part, so none waits for it. */
static int batch_vars_collective(dds_store *s, int32_t nvars, const char *const *names, void *const *outs,
                                 const int64_t *rows, int64_t nrows)
{
    uint64_t t0 = dds_now_ns();
    op_list *lists = calloc((size_t)nvars, sizeof *lists);
    dds_var **vars = calloc((size_t)nvars, sizeof *vars);
    int rc = lists && vars ? DDS_OK : dds_err(DDS_ENOMEM, "out of memory for a read of %d variables", (int)nvars);
    for (int32_t i = 0; rc == DDS_OK && i < nvars; i++) {
        bool live;
        if (!names[i])
            rc = dds_err(DDS_EINVAL, "dds_get_batch_vars: names[%d] is NULL", (int)i);
        else
            rc = read_begin(s, names[i], outs[i], nrows, &vars[i], &live);
        if (rc == DDS_OK)
            rc = batch_ops(s, vars[i], outs[i], rows, nrows, &lists[i]);
    }
    rc = gather_read(s, vars, lists, rc == DDS_OK ? (size_t)nvars : 0, rc);
    for (int32_t i = 0; lists && i < nvars; i++)
        free(lists[i].ops);
    free(lists);
    free(vars);
    read_end(s, t0);
    atomic_fetch_add(&s->st_calls, (uint64_t)nvars - 1); /* a read of each variable */
    return rc;
}

DDS_API int dds_get_batch_vars(dds_store *s, int32_t nvars, const char *const *names, void *const *outs,
                               const int64_t *rows, int64_t nrows)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (nvars < 0 || (nvars > 0 && (!names || !outs))) {
        rc = dds_err(DDS_EINVAL, "dds_get_batch_vars: %s",
                     nvars < 0 ? "negative variable count" : "names or outs is NULL");
        /* Where reads are collective the others are in this read: take
         * part with the error, so that it fails on every rank, not hangs. */
        if (dds_reads_collective(s)) {
            uint64_t t0 = dds_now_ns();
            rc = gather_read(s, NULL, NULL, 0, rc);
            read_end(s, t0);
        }
        return rc;
    }
    if (nvars > 0 && dds_reads_collective(s))
        return batch_vars_collective(s, nvars, names, outs, rows, nrows);
    /* One request per owner for all variables needs a transport that
     * gathers them together without a collective read; else (and for one
     * variable) this is dds_get_batch of each. */
    if (nvars < 2 || !s->tp->gather_vars || s->tp->collective_reads)
        return batch_vars_each(s, nvars, names, outs, rows, nrows);
    uint64_t t0 = dds_now_ns();
    op_list *lists = calloc((size_t)nvars, sizeof *lists);
    dds_var **vars = calloc((size_t)nvars, sizeof *vars);
    size_t *nremote = calloc((size_t)nvars, sizeof *nremote);
    if (!lists || !vars || !nremote) {
        free(lists);
        free(vars);
        free(nremote);
        return dds_err(DDS_ENOMEM, "out of memory for a read of %d variables", (int)nvars);
    }
    size_t ngather = 0;
    for (int32_t i = 0; rc == DDS_OK && i < nvars; i++) {
        bool live;
        if (!names[i]) {
            rc = dds_err(DDS_EINVAL, "dds_get_batch_vars: names[%d] is NULL", (int)i);
            break;
        }
        rc = read_begin(s, names[i], outs[i], nrows, &vars[i], &live);
        if (rc == DDS_OK)
            rc = batch_ops(s, vars[i], outs[i], rows, nrows, &lists[i]);
        if (rc || !lists[i].n)
            continue;
        dds_var *gen;
        rc = dds_gen_of(s, vars[i], &gen);
        if (rc == DDS_OK && !gen && dds_gather_chosen(s, vars[i], false)) {
            /* Node-local rows are copied here; the rest wait for the
             * gather of all variables below. */
            rc = dds_read_split(s, vars[i], lists[i].ops, lists[i].n, &nremote[i]);
            ngather += nremote[i] > 0;
        } else if (rc == DDS_OK) {
            rc = execute(s, vars[i], &lists[i], false);
        }
    }
    if (rc == DDS_OK && ngather) {
        dds_read_op **ops = calloc((size_t)nvars, sizeof *ops);
        if (!ops) {
            rc = dds_err(DDS_ENOMEM, "out of memory for a read of %d variables", (int)nvars);
        } else {
            for (int32_t i = 0; i < nvars; i++)
                ops[i] = lists[i].ops;
            rc = s->tp->gather_vars(s, vars, (const dds_read_op *const *)ops, nremote, (size_t)nvars);
            free(ops);
        }
    }
    for (int32_t i = 0; i < nvars; i++)
        free(lists[i].ops);
    read_end(s, t0);
    atomic_fetch_add(&s->st_calls, (uint64_t)nvars - 1); /* a read of each variable */
    free(lists);
    free(vars);
    free(nremote);
    return rc;
}

DDS_API int dds_get_ranges(dds_store *s, const char *name, void *out, const int64_t *starts,
                           const int64_t *counts, int64_t nranges)
{
    dds_err_clear();
    uint64_t t0 = dds_now_ns();
    dds_var *v;
    bool live;
    int rc = read_begin(s, name, out, 0, &v, &live);
    if (rc == DDS_OK && nranges < 0)
        rc = dds_err(DDS_EINVAL, "variable '%s': negative range count %lld", name, (long long)nranges);
    if (rc == DDS_OK && nranges > 0 && (!starts || !counts))
        rc = dds_err(DDS_EINVAL, "variable '%s': starts or counts is NULL", name);
    op_list l = { 0 };
    if (rc == DDS_OK && nranges > 0) {
        int64_t total = v->offsets[s->group_size];
        int64_t sum = 0;
        for (int64_t i = 0; i < nranges; i++) {
            int64_t st = starts[i], n = counts[i];
            if (n < 0 || st < 0 || st > total || n > total - st) {
                rc = dds_err(DDS_ERANGE, "variable '%s': range %lld (%lld rows from row %lld) is outside [0, %lld)",
                             name, (long long)i, (long long)n, (long long)st, (long long)total);
                break;
            }
            if (sum > INT64_MAX / v->row_bytes - n) {
                rc = dds_err(DDS_EOVERFLOW, "variable '%s': ranges overflow the output size", name);
                break;
            }
            sum += n;
        }
        if (rc == DDS_OK && sum > 0 && !out)
            rc = dds_err(DDS_EINVAL, "variable '%s': output buffer is NULL", name);
        if (rc == DDS_OK)
            rc = ops_reserve(&l, (size_t)nranges + 8, name);
        char *dst = out;
        for (int64_t i = 0; rc == DDS_OK && i < nranges; i++) {
            rc = ops_push_range(&l, v, s->group_size, starts[i], counts[i], dst);
            dst += counts[i] * v->row_bytes;
        }
    }
    return batched_read_finish(s, v, &l, live, rc, t0);
}

DDS_API int dds_read_fail(dds_store *s, int code, const char *message)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (code >= 0)
        code = DDS_EINVAL;
    rc = dds_err(code, "%s", message ? message : dds_strerror(code));
    if (!dds_reads_collective(s))
        return rc;
    uint64_t t0 = dds_now_ns();
    rc = gather_read(s, NULL, NULL, 0, rc);
    read_end(s, t0);
    return rc;
}

/* ---- synchronisation ------------------------------------------------------------- */

static int sync_all_local(dds_store *s)
{
    int rc = DDS_OK;
    pthread_rwlock_rdlock(&s->vars_lock);
    for (int64_t i = 0; rc == DDS_OK && i < s->nvars; i++)
        rc = s->tp->sync(s, s->vars[i]);
    pthread_rwlock_unlock(&s->vars_lock);
    return rc;
}

/* Writer-side sync, a barrier over the group (tagged step) and, for the
 * store-wide sync, over comm, then reader-side sync: the MPI pattern that
 * orders local stores before other ranks' loads in shared windows. */
static int sync_over(dds_store *s, int kind, int rc)
{
    if (rc == DDS_OK && s->tp->sync)
        rc = sync_all_local(s);
    rc = dds_step(s, kind, rc, NULL);
    if (kind == DDS_COLL_SYNC && s->group_size != s->size && !s->broken)
        rc = dds_agree(s->comm, rc);
    if (rc == DDS_OK && s->tp->sync)
        rc = sync_all_local(s);
    return rc;
}

static int collective_begin(dds_store *s)
{
    return dds_core_begin(s, "has no epochs or synchronisation");
}

DDS_API int dds_sync(dds_store *s)
{
    int rc = collective_begin(s);
    if (rc)
        return rc;
    return sync_over(s, DDS_COLL_SYNC, DDS_OK);
}

DDS_API int dds_epoch_begin(dds_store *s)
{
    int rc = collective_begin(s);
    if (rc)
        return rc;
    rc = sync_over(s, DDS_COLL_EPOCH_BEGIN, DDS_OK);
    if (rc == DDS_OK)
        s->epoch_depth++;
    return rc;
}

DDS_API int dds_epoch_end(dds_store *s)
{
    int rc = collective_begin(s);
    if (rc)
        return rc;
    if (s->epoch_depth == 0)
        rc = dds_err(DDS_ESTATE, "epoch_end without a matching epoch_begin");
    rc = dds_step(s, DDS_COLL_EPOCH_END, rc, NULL);
    if (rc == DDS_OK)
        s->epoch_depth--;
    return rc;
}

/* ---- receive buffers ---------------------------------------------------------------- */

DDS_API int dds_register_recv(dds_store *s, void *buf, size_t len)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (!buf && len)
        return dds_err(DDS_EINVAL, "buffer is NULL");
    if (!s->tp->register_recv || len == 0)
        return DDS_OK;
    return s->tp->register_recv(s, buf, len);
}

DDS_API int dds_unregister_recv(dds_store *s, void *buf)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (!s->tp->unregister_recv || !buf)
        return DDS_OK;
    return s->tp->unregister_recv(s, buf);
}
