/* Ground floor: the store handle itself. Allocation and release of the
 * struct, the table of live handles that every public call checks, and the
 * graveyard that keeps freed addresses from being reused too soon. Calls
 * nothing of the library but error.c, so that every other file may use it. */
#include <stdlib.h>

#include "internal.h"

/* ---- live handle registry -------------------------------------------------
 * Handles are checked against this table so that a call on a freed or
 * garbage handle is an error instead of a use-after-free. Few stores live at
 * once, so a linear scan is cheap next to any read. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static dds_store **registry;
static size_t registry_len, registry_cap;

void dds_store_track(dds_store *s, bool live)
{
    pthread_mutex_lock(&registry_lock);
    if (live) {
        if (registry_len == registry_cap) {
            size_t cap = registry_cap ? 2 * registry_cap : 16;
            dds_store **r = realloc(registry, cap * sizeof *r);
            if (!r) { /* cannot track: the handle still works, checks just miss it */
                pthread_mutex_unlock(&registry_lock);
                return;
            }
            registry = r;
            registry_cap = cap;
        }
        registry[registry_len++] = s;
    } else {
        for (size_t i = 0; i < registry_len; i++)
            if (registry[i] == s) {
                registry[i] = registry[--registry_len];
                break;
            }
    }
    pthread_mutex_unlock(&registry_lock);
}

int dds_store_check(const dds_store *s)
{
    if (!s)
        return dds_err(DDS_EINVAL, "store handle is NULL");
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++)
        if (registry[i] == s) {
            found = true;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    if (!found || s->magic != DDS_STORE_MAGIC)
        return dds_err(DDS_ESTATE, "store handle is not a live store (freed, or never created)");
    return DDS_OK;
}

int dds_store_check_out(const dds_store *s, const void *out, const char *what)
{
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (!out)
        return dds_err(DDS_EINVAL, "%s is NULL", what);
    return DDS_OK;
}

int dds_core_begin(const dds_store *s, const char *refusal)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (s->is_reader)
        return dds_err(DDS_ESTATE, "a reader (dds_join) %s", refusal);
    return DDS_OK;
}

/* Freed store structs wait here (magic cleared) until 64 more stores have
 * been freed: the allocator would otherwise give the next store the same
 * address, and a stale handle would pass dds_store_check() as that new
 * store (a double free would free someone else's store). */
#define GRAVEYARD 64
static dds_store *graveyard[GRAVEYARD];
static size_t grave_next;

void dds_store_destroy(dds_store *s)
{
    s->magic = 0;
    free(s->node_rank_of);
    free(s->node_server);
    free(s->fabric_name);
    free(s->nic_map);
    free(s->handshake_dir);
    free(s->vars);
    pthread_rwlock_destroy(&s->vars_lock);
    pthread_mutex_lock(&registry_lock);
    dds_store *oldest = graveyard[grave_next];
    graveyard[grave_next] = s;
    grave_next = (grave_next + 1) % GRAVEYARD;
    pthread_mutex_unlock(&registry_lock);
    free(oldest);
}

dds_store *dds_store_alloc(void)
{
    dds_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->magic = DDS_STORE_MAGIC;
    s->comm = s->group = s->node = s->gather_comm = MPI_COMM_NULL;
    pthread_rwlock_init(&s->vars_lock, NULL);
    return s;
}
