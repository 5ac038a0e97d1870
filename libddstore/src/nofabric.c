/* Methods 1 and 2 in a build without libfabric: the transport table and the
 * reader entry points report DDS_ENOTSUP, so the rest of the library
 * (method 0) works unchanged. dds_create refuses methods 1 and 2 before it
 * opens a transport (dds_has_fabric), so only dds_join reaches this. */
#include "internal.h"

static int no_fabric(void)
{
    return dds_err(DDS_ENOTSUP, "libddstore was built without libfabric: methods 1 and 2 are "
                                "unavailable (rebuild with libfabric, or use method 0)");
}

static int nofab_open(dds_store *s) { (void)s; return no_fabric(); }
static int nofab_expose(dds_store *s, dds_var *v) { (void)s; (void)v; return no_fabric(); }
static void nofab_release(dds_store *s, dds_var *v) { (void)s; (void)v; }
static int nofab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops, bool bounded)
{
    (void)s; (void)v; (void)ops; (void)nops; (void)bounded;
    return no_fabric();
}
static int nofab_register_recv(dds_store *s, void *buf, size_t len)
{
    (void)s; (void)buf; (void)len;
    return no_fabric();
}
static int nofab_unregister_recv(dds_store *s, void *buf) { (void)s; (void)buf; return no_fabric(); }
static void nofab_close(dds_store *s) { (void)s; }

const dds_transport dds_transport_fabric = {
    .size = sizeof(dds_transport),
    .name = "libfabric (not built)",
    .page_shards = true,
    .collective_reads = false,
    .open = nofab_open,
    .close = nofab_close,
    .map_shard = NULL,
    .expose = nofab_expose,
    .release = nofab_release,
    .read = nofab_read,
    .sync = NULL,
    .register_recv = nofab_register_recv,
    .unregister_recv = nofab_unregister_recv,
};

int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s)
{
    (void)out; (void)dir; (void)n_core; (void)timeout_s;
    return no_fabric();
}
int dds_fab_attach(dds_store *s, const char *name) { (void)s; (void)name; return no_fabric(); }
