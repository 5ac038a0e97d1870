/* Transfers: one list of dds_read_op of one variable carried out.
 * Transfers from shards this process can address (its own, or a node
 * peer's in shared memory) are memcpy; the rest go to the transport (MPI RMA
 * or libfabric), grouped by owner, as one-sided reads or by owner-side
 * gather (the rule: gather.c). Below read.c and generation.c, which both
 * build transfer lists. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int dds_read_split(dds_store *s, dds_var *v, dds_read_op *ops, size_t nops, size_t *nremote)
{
    *nremote = 0;
    if (nops == 0)
        return DDS_OK;
    size_t owners = (size_t)s->group_size;
    dds_read_op *sorted = dds_scratch(DDS_SCRATCH_SPLIT_OPS, nops * sizeof *sorted);
    size_t *count = dds_scratch(DDS_SCRATCH_SPLIT_COUNT, (owners + 1) * sizeof *count);
    if (!sorted || !count)
        return dds_err(DDS_ENOMEM, "variable '%s': out of memory sorting %zu transfers", v->name, nops);
    memset(count, 0, (owners + 1) * sizeof *count);
    /* One pass: copy what this process can address, keep the rest in
     * ops[0..n) and count it by owner; then a stable placement by owner (a
     * counting sort), so that each target is addressed in one burst. */
    uint64_t bytes_local = 0, bytes_remote = 0;
    int self = s->is_reader ? -1 : s->group_rank;
    size_t n = 0;
    for (size_t i = 0; i < nops; i++) {
        dds_read_op op = ops[i];
        if (op.owner == self)
            bytes_local += (uint64_t)op.len;
        else
            bytes_remote += (uint64_t)op.len;
        const char *peer = v->peer_base ? v->peer_base[op.owner] : NULL;
        if (peer) {
            memcpy(op.dst, peer + op.src_offset, (size_t)op.len);
        } else {
            count[op.owner + 1]++;
            ops[n++] = op;
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
    for (size_t i = 0; i < n; i++)
        sorted[count[ops[i].owner]++] = ops[i];
    memcpy(ops, sorted, n * sizeof *ops);
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
