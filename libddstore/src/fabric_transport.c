/* The libfabric transport table (methods 1 and 2): dds_transport_fabric,
 * over the operations of fabric.c (open, expose, release, close) and
 * fabric_read.c (reads, destination buffers). Core stores get it from
 * dds_create, readers from dds_join (fabric_join.c). Method 2's publication
 * is part of open and expose; fabric.c tells the methods apart. */
#include <stdio.h>

#include "fabric_internal.h"

/* Open as dds_transport.open asks: a result agreed over s->comm, and
 * nothing left open on failure (another group may be the one that failed). */
static int fab_open(dds_store *s)
{
    int rc = dds_fab_open(s);
    rc = dds_agree(s->comm, rc);
    if (rc)
        dds_fab_close(s);
    return rc;
}

/* fi_read does not wait for targets (one-sided), so no read is bounded
 * differently from another. */
static int fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)bounded;
    return dds_fab_read(s, v, ops, nops);
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
    .size = sizeof(dds_transport),
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
};
