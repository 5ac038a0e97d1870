/* Methods 1 and 2 in a build without libfabric: the transport table and the
 * reader entry points report DDS_ENOTSUP, so the rest of the library
 * (method 0) works unchanged. dds_create refuses methods 1 and 2 before it
 * chooses a transport (dds_has_fabric), and dds_join fails here, so no store
 * ever holds this table: it has the one operation that would report why. */
#include "internal.h"

static int no_fabric(void)
{
    return dds_err(DDS_ENOTSUP, "libddstore was built without libfabric: methods 1 and 2 are "
                                "unavailable (rebuild with libfabric, or use method 0)");
}

static int nofab_open(dds_store *s) { (void)s; return no_fabric(); }

const dds_transport dds_transport_fabric = {
    .name = "libfabric (not built)",
    .open = nofab_open,
};

int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s)
{
    (void)out; (void)dir; (void)n_core; (void)timeout_s;
    return no_fabric();
}
int dds_fab_attach(dds_store *s, const char *name) { (void)s; (void)name; return no_fabric(); }
