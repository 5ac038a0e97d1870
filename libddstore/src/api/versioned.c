/* Versioned variables, public functions: dds_init_versioned (which makes
 * the counters and the variable with dds_init), dds_var_block_rows and
 * dds_generation. The seqlock machinery under them is generation.c; this
 * file sits above store.c because it creates variables through it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

DDS_API int dds_init_versioned(dds_store *s, const char *name, int64_t nrows, int64_t row_bytes,
                               uint32_t dtype, int64_t block_rows)
{
    int rc = dds_core_begin(s, "cannot add variables");
    if (rc)
        return rc; /* no communicator to agree over */
    char cname[DDS_NAME_MAX + 1];
    rc = dds_check_name(name);
    if (rc == DDS_OK)
        rc = dds_gen_name(name, cname);
    if (rc == DDS_OK && dds_gen_hidden(name))
        rc = dds_err(DDS_EINVAL, "variable name '%s' ends in the suffix reserved for generation counters",
                     name);
    if (rc == DDS_OK && block_rows < 1)
        rc = dds_err(DDS_EINVAL, "versioned variable '%s': block_rows must be at least 1 (got %lld)", name,
                     (long long)block_rows);
    if (rc == DDS_OK && nrows < 0)
        rc = dds_err(DDS_EINVAL, "variable '%s': negative row count %lld", name, (long long)nrows);
    if (rc == DDS_OK && row_bytes < 1)
        rc = dds_err(DDS_EINVAL, "variable '%s': bytes per row must be at least 1 (got %lld)", name,
                     (long long)row_bytes);
    if (rc == DDS_OK && nrows > 0 && row_bytes > INT64_MAX / nrows)
        rc = dds_err(DDS_EOVERFLOW, "variable '%s': %lld rows x %lld bytes overflows 2^63", name,
                     (long long)nrows, (long long)row_bytes);
    if (rc == DDS_OK && s->storage)
        rc = dds_err(DDS_ENOTSUP, "versioned variable '%s': versioned rows are rewritten in place while "
                     "they are read and live in memory; make them in a store without a storage directory",
                     name);
    if (rc == DDS_OK && (dds_var_find(s, name) || dds_var_find(s, cname)))
        rc = dds_err(DDS_EEXIST, "variable '%s' already exists", name);
    /* Everything dds_init() would check across ranks, checked before the
     * counters are made, so that a mismatch leaves nothing behind. */
    int64_t mine[6] = { rc == DDS_OK ? 0 : -1, row_bytes, -row_bytes, (int64_t)dtype, -(int64_t)dtype,
                        block_rows }, all[6];
    int64_t mine_b = -block_rows, all_b;
    int mrc = MPI_Allreduce(mine, all, 6, MPI_INT64_T, MPI_MIN, s->comm);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Allreduce(&mine_b, &all_b, 1, MPI_INT64_T, MPI_MIN, s->comm);
    if (mrc != MPI_SUCCESS && rc == DDS_OK)
        rc = dds_err_mpi(mrc, "MPI_Allreduce (versioned variable)");
    if (rc == DDS_OK && all[0] == 0 && (all[1] != -all[2] || all[3] != -all[4] || all[5] != -all_b))
        rc = dds_err(DDS_EMISMATCH, "versioned variable '%s': ranks disagree on row_bytes (%lld to %lld), "
                     "dtype (%lld to %lld) or block_rows (%lld to %lld)", name, (long long)all[1],
                     (long long)-all[2], (long long)all[3], (long long)-all[4], (long long)all[5],
                     (long long)-all_b);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;

    int64_t nblocks = dds_gen_blocks(nrows, block_rows);
    rc = dds_init(s, cname, 1 + nblocks, DDS_GEN_ROW_BYTES, DDS_DTYPE_UINT64);
    if (rc)
        return rc;
    dds_var *c = dds_var_find(s, cname);
    uint64_t header = (uint64_t)block_rows;
    rc = c ? dds_shard_write(c, 0, &header, sizeof header) : dds_err(DDS_ESTATE, "counters of '%s' vanished", name);
    if (rc == DDS_OK && s->tp->sync)
        rc = s->tp->sync(s, c);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;
    rc = dds_init(s, name, nrows, row_bytes, dtype); /* its last step is a barrier: header visible */
    if (rc)
        return rc;
    dds_var *v = dds_var_find(s, name);
    v->gen_block_rows = block_rows;
    atomic_store(&v->gen_looked_up, 1);
    atomic_store_explicit(&v->gen, c, memory_order_release);
    return DDS_OK;
}

/* Start of a query of a versioned variable: clears the calling thread's
 * message, checks the handle and that the out-parameter `what` is set. */
static int query_begin(dds_store *s, const void *out, const char *what)
{
    dds_err_clear();
    return dds_store_check_out(s, out, what);
}

/* *v: the variable `name`; *gen: its counters, NULL when not versioned. */
static int versioned_var(dds_store *s, const char *name, dds_var **v, dds_var **gen)
{
    int rc = dds_var_get(s, name, v);
    return rc ? rc : dds_gen_of(s, *v, gen);
}

DDS_API int dds_var_block_rows(dds_store *s, const char *name, int64_t *block_rows)
{
    int rc = query_begin(s, block_rows, "block_rows");
    if (rc)
        return rc;
    *block_rows = 0;
    dds_var *v, *gen;
    rc = versioned_var(s, name, &v, &gen);
    if (rc == DDS_OK && gen)
        *block_rows = v->gen_block_rows;
    return rc;
}

DDS_API int dds_generation(dds_store *s, const char *name, int64_t row, uint64_t *out)
{
    int rc = query_begin(s, out, "gen");
    if (rc)
        return rc;
    dds_var *v, *gen;
    rc = versioned_var(s, name, &v, &gen);
    if (rc)
        return rc;
    if (!gen)
        return dds_err(DDS_EINVAL, "variable '%s' is not versioned (create it with dds_init_versioned)", name);
    int64_t total = v->offsets[s->group_size];
    if (row < 0 || row >= total)
        return dds_err(DDS_ERANGE, "variable '%s': row %lld is outside [0, %lld)", name, (long long)row,
                       (long long)total);
    int owner = dds_owner_of(v, s->group_size, row);
    int64_t b = (row - v->offsets[owner]) / v->gen_block_rows;
    uint64_t g = 0;
    dds_read_op op = { .owner = owner, .src_offset = (1 + b) * DDS_GEN_ROW_BYTES, .len = DDS_GEN_ROW_BYTES,
                       .dst = (char *)&g };
    rc = dds_read_ops(s, gen, &op, 1, false);
    if (rc == DDS_OK)
        *out = g;
    return rc;
}
