/* Method 2, core side: the publication in the handshake directory
 * (handshake.c does the file format and locking), the runs published by
 * this process, and the check a reader makes that a publication is still
 * current. Calls nothing of the transport: fabric.c, fabric_read.c and
 * fabric_join.c call down into it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric_internal.h"

/* ---- runs published by this process ------------------------------------------- */

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static run_token *runs;

run_token *dds_fab_token_get(const uint8_t *run_id, bool create)
{
    pthread_mutex_lock(&run_lock);
    run_token *t = runs;
    while (t && memcmp(t->run_id, run_id, DDS_HS_RUN_ID_BYTES) != 0)
        t = t->next;
    if (!t && create) {
        t = calloc(1, sizeof *t);
        if (t) {
            memcpy(t->run_id, run_id, DDS_HS_RUN_ID_BYTES);
            atomic_init(&t->alive, 1);
            t->next = runs;
            runs = t;
        }
    }
    if (t)
        t->refs++;
    pthread_mutex_unlock(&run_lock);
    return t;
}

void dds_fab_token_put(run_token *t, bool kill_run)
{
    if (!t)
        return;
    pthread_mutex_lock(&run_lock);
    if (kill_run)
        atomic_store(&t->alive, 0);
    if (--t->refs == 0) {
        run_token **pp = &runs;
        while (*pp && *pp != t)
            pp = &(*pp)->next;
        if (*pp)
            *pp = t->next;
        free(t);
    }
    pthread_mutex_unlock(&run_lock);
}

/* ---- method-2 publication (group rank 0) ----------------------------------------- */

int dds_fab_hostname_of(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0)
        snprintf(buf, cap, "unknown");
    buf[cap - 1] = '\0';
    for (char *p = buf; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    return DDS_OK;
}

int dds_fab_publish_store(dds_store *s, struct dds_fabric *F, int n, uint16_t *alen, uint8_t **addr)
{
    int rc = dds_hs_open_dir(F->pubdir, 1, &F->dirfd, NULL);
    if (rc == DDS_ENOENT)
        rc = dds_err(DDS_EIO, "handshake directory '%s' vanished while being created", F->pubdir);
    if (rc)
        return rc;
    /* Existing directory or not: remember whether this run made it, to
     * remove it again at free. */
    rc = dds_hs_lock(F->dirfd, F->pubdir, DDS_HS_LOCK_FILE, &F->lock_fd);
    if (rc)
        return rc;
    /* Nobody else publishes here now: whatever is left is stale. */
    dds_hs_remove_all(F->dirfd, NULL);
    dds_hs_random(F->run_id, sizeof F->run_id);
    dds_hs_live_name(F->run_id, F->live_name);
    rc = dds_hs_lock(F->dirfd, F->pubdir, F->live_name, &F->live_fd);
    if (rc)
        return rc;
    dds_hs_store st;
    memset(&st, 0, sizeof st);
    st.n_core = (uint32_t)n;
    st.group_index = (uint32_t)s->group_index;
    st.addr_format = F->info->addr_format;
    st.pid = (uint32_t)getpid();
    st.mr_mode = F->mr_mode;
    st.start_time = dds_hs_proc_start((int)getpid());
    snprintf(st.prov, sizeof st.prov, "%s", F->prov);
    dds_fab_hostname_of(st.host, sizeof st.host);
    st.addr_len = alen;
    st.addr = addr;
    uint8_t *bytes;
    size_t len;
    rc = dds_hs_encode_store(F->run_id, &st, &bytes, &len);
    if (rc)
        return rc;
    rc = dds_hs_write_file(F->dirfd, F->pubdir, DDS_HS_STORE_FILE, bytes, len);
    free(bytes);
    if (rc == DDS_OK)
        dds_debug("fabric: published %d endpoints in '%s'", n, F->pubdir);
    return rc;
}

void dds_fab_var_file_name(uint32_t index, char name[32])
{
    snprintf(name, 32, "var-%08x.dds", index);
}

void dds_fab_withdraw(struct dds_fabric *F)
{
    if (F->dirfd < 0)
        return;
    /* store.dds first, so that no reader starts on a half-removed set. */
    unlinkat(F->dirfd, DDS_HS_STORE_FILE, 0);
    dds_hs_remove_all(F->dirfd, NULL);
    if (F->live_fd >= 0) {
        close(F->live_fd);
        F->live_fd = -1;
    }
    if (F->lock_fd >= 0) {
        unlinkat(F->dirfd, DDS_HS_LOCK_FILE, 0);
        close(F->lock_fd);
        F->lock_fd = -1;
    }
    close(F->dirfd);
    F->dirfd = -1;
    if (F->dir_created)
        rmdir(F->pubdir); /* fails harmlessly when the user left files there */
}

/* ---- readers: is the publication still current? ------------------------------ */

/* Is the joined publication still the one in the directory, and live?
 * 1 yes, 0 no, negative: error reading it. */
int dds_fab_still_current(struct dds_fabric *F)
{
    uint8_t *bytes;
    size_t len;
    int rc = dds_hs_read_file(F->dirfd, F->pubdir, DDS_HS_STORE_FILE, &bytes, &len);
    if (rc == DDS_ENOENT)
        return 0;
    if (rc)
        return rc;
    dds_hs_file f;
    rc = dds_hs_parse(bytes, len, &f);
    free(bytes);
    if (rc)
        return rc;
    int same = memcmp(f.run_id, F->run_id, sizeof F->run_id) == 0;
    dds_hs_file_clear(&f);
    if (same) {
        char live[64];
        dds_hs_live_name(F->run_id, live);
        if (dds_hs_is_locked(F->dirfd, live) == 0)
            same = 0; /* the publisher died without withdrawing */
    }
    return same;
}
