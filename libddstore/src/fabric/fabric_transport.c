/* The libfabric transport table (methods 1 and 2): dds_transport_fabric,
 * over the operations of fabric.c (open, expose, release, close),
 * fabric_read.c (reads, destination buffers) and fabric_gather.c
 * (owner-side gather). Core stores get it from dds_create, readers from
 * dds_join (fabric_join.c). Method 2's publication is part of open and
 * expose; fabric.c tells the methods apart. Where the provider gives no
 * tagged messages (or DDSTORE_FABRIC_PROGRESS=none leaves no thread to
 * serve requests), the store's table becomes dds_transport_fabric_onesided,
 * the same without gather, so that gather.c's rule never chooses it. */
#include <stdio.h>
#include <string.h>

#include "fabric_internal.h"

/* Open as dds_transport.open asks: a result agreed over s->comm, and
 * nothing left open on failure (another group may be the one that failed). */
static int fab_open(dds_store *s)
{
    int rc = dds_fab_open(s);
    rc = dds_agree(s->comm, rc);
    if (rc)
        dds_fab_close(s);
    else if (!s->fab->tagged)
        s->tp = &dds_transport_fabric_onesided; /* the group agreed on `tagged` */
    return rc;
}

/* Reads and gathers alike first check the transfers against the shards
 * this process knows (dds_fab_check_ops), then carry them out. `bounded`
 * changes nothing here: fi_read does not wait for targets (one-sided), and
 * the owner serves a gather request from its progress thread whatever the
 * read's kind (versioned reads check their generations around it). */
static int fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)bounded;
    int rc = dds_fab_check_ops(s, v, ops, nops);
    return rc ? rc : dds_fab_read(s, v, ops, nops);
}

static int fab_gather(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)bounded;
    int rc = dds_fab_check_ops(s, v, ops, nops);
    return rc ? rc : dds_fab_gather(s, v, ops, nops);
}

static int fab_gather_vars(dds_store *s, dds_var *const *vars, const dds_read_op *const *ops, const size_t *nops,
                           size_t nvars)
{
    for (size_t i = 0; i < nvars; i++) {
        int rc = nops[i] ? dds_fab_check_ops(s, vars[i], ops[i], nops[i]) : DDS_OK;
        if (rc)
            return rc;
    }
    return dds_fab_gather_vars(s, vars, ops, nops, nvars);
}

/* Whether one-sided reads go through the target's CPU (the provider's
 * class, fabric.c); there gather.c always gathers, elsewhere it switches
 * by row size. */
static bool fab_rma_emulated(const dds_store *s)
{
    return s->fab && s->fab->rma_emulated;
}

static void fab_describe(const dds_store *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "libfabric:%s", s->fab ? s->fab->prov : "?");
}

static void fab_describe_domain(const dds_store *s, bool why, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", !s->fab ? "" : why ? s->fab->nic.why : s->fab->nic.domain);
}

const dds_transport dds_transport_fabric = {
    .name = "libfabric",
    .page_shards = true,
    .collective_reads = false, /* one-sided: the target does nothing */
    .open = fab_open,
    .close = dds_fab_close,
    .map_shard = NULL, /* memory is registered by expose, once the rows are in */
    .expose = dds_fab_var_expose,
    .release = dds_fab_var_release,
    .read = fab_read,
    .sync = NULL, /* fi_read reads memory; no window to synchronise */
    .register_recv = dds_fab_register_recv,
    .unregister_recv = dds_fab_unregister_recv,
    .describe = fab_describe,
    .describe_domain = fab_describe_domain,
    .gather = fab_gather,
    .gather_vars = fab_gather_vars,
    .gather_begin = NULL, /* reads are not collective: nothing travels in a step */
    .rma_emulated = fab_rma_emulated,
};

const dds_transport dds_transport_fabric_onesided = {
    .name = "libfabric",
    .page_shards = true,
    .collective_reads = false,
    .open = fab_open,
    .close = dds_fab_close,
    .map_shard = NULL,
    .expose = dds_fab_var_expose,
    .release = dds_fab_var_release,
    .read = fab_read,
    .sync = NULL,
    .register_recv = dds_fab_register_recv,
    .unregister_recv = dds_fab_unregister_recv,
    .describe = fab_describe,
    .describe_domain = fab_describe_domain,
    .gather = NULL,
    .gather_vars = NULL,
    .rma_emulated = fab_rma_emulated,
};
