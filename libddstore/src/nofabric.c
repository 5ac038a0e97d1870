/* Methods 1 and 2 in a build without libfabric: every entry point reports
 * DDS_ENOTSUP, so the rest of the library (method 0) works unchanged. */
#include "internal.h"

static int no_fabric(void)
{
    return dds_err(DDS_ENOTSUP, "libddstore was built without libfabric: methods 1 and 2 are "
                                "unavailable (rebuild with libfabric, or use method 0)");
}

int dds_fab_open(dds_store *s) { (void)s; return no_fabric(); }
int dds_fab_var_expose(dds_store *s, dds_var *v) { (void)s; (void)v; return no_fabric(); }
void dds_fab_var_release(dds_store *s, dds_var *v) { (void)s; (void)v; }
int dds_fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops)
{
    (void)s; (void)v; (void)ops; (void)nops;
    return no_fabric();
}
int dds_fab_register_recv(dds_store *s, void *buf, size_t len)
{
    (void)s; (void)buf; (void)len;
    return no_fabric();
}
int dds_fab_unregister_recv(dds_store *s, void *buf) { (void)s; (void)buf; return no_fabric(); }
void dds_fab_close(dds_store *s) { (void)s; }
int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s)
{
    (void)out; (void)dir; (void)n_core; (void)timeout_s;
    return no_fabric();
}
int dds_fab_attach(dds_store *s, const char *name) { (void)s; (void)name; return no_fabric(); }
