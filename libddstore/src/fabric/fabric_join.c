/* Method 2, reader side: join a store from its publication and attach
 * variables published later. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>

#include "fabric_internal.h"

static double now_s(void) { return (double)dds_now_ns() * 1e-9; }

/* ---- method-2 readers ------------------------------------------------------------------ */

/* Load store.dds from `dir` if it is a live, current publication. Returns
 * DDS_OK, 1 (not yet: `why` says what is missing), or a negative error that
 * waiting will not cure. */
static int try_store(const char *dir, int n_core, int *dirfd, dds_hs_file *f, char *why, size_t cap)
{
    *dirfd = -1;
    int fd;
    int rc = dds_hs_open_dir(dir, 0, &fd, NULL);
    if (rc == DDS_ENOENT) {
        snprintf(why, cap, "the directory does not exist (yet)");
        return 1;
    }
    if (rc)
        return rc;
    uint8_t *bytes;
    size_t len;
    rc = dds_hs_read_file(fd, dir, DDS_HS_STORE_FILE, &bytes, &len);
    if (rc == DDS_ENOENT) {
        close(fd);
        snprintf(why, cap, "no %s in it: the core group has not published (yet)", DDS_HS_STORE_FILE);
        return 1;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    rc = dds_hs_parse(bytes, len, f);
    free(bytes);
    if (rc == DDS_OK && f->kind != DDS_HS_KIND_STORE) {
        dds_hs_file_clear(f);
        rc = dds_err(DDS_EPROTO, "'%s/%s' is not a store publication", dir, DDS_HS_STORE_FILE);
    } else if (rc) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", dds_last_error());
        rc = dds_err(rc, "'%s/%s': %s", dir, DDS_HS_STORE_FILE, msg);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    char live[64];
    dds_hs_live_name(f->run_id, live);
    int locked = dds_hs_is_locked(fd, live);
    bool alive = locked == 1;
    if (locked < 0) {
        /* No lock support: judge by the publishing process when it runs here. */
        char host[DDS_HS_MAX_HOST + 1];
        dds_fab_hostname_of(host, sizeof host);
        if (strcmp(host, f->store.host) != 0)
            alive = true;
        else
            alive = kill((pid_t)f->store.pid, 0) == 0 &&
                    (f->store.start_time == 0 || dds_hs_proc_start((int)f->store.pid) == f->store.start_time);
    }
    if (!alive) {
        snprintf(why, cap,
                 "%s is stale: its publisher (pid %u on %s) is gone, waiting for a new core group",
                 DDS_HS_STORE_FILE, f->store.pid, f->store.host);
        dds_hs_file_clear(f);
        close(fd);
        return 1;
    }
    if (n_core > 0 && (uint32_t)n_core != f->store.n_core) {
        rc = dds_err(DDS_EMISMATCH, "'%s' holds a store of %u core ranks, %d expected (n_core / DDSTORE_N_CORE)",
                     dir, f->store.n_core, n_core);
        dds_hs_file_clear(f);
        close(fd);
        return rc;
    }
    *dirfd = fd;
    return DDS_OK;
}

/* Build a reader's variable from its publication. */
static int make_reader_var(const struct dds_fabric *F, const dds_hs_var *hv, dds_var **out)
{
    (void)F;
    int n = (int)hv->n_core;
    dds_var *v = calloc(1, sizeof *v);
    struct dds_fabric_var *FV = calloc(1, sizeof *FV);
    if (v)
        v->offsets = calloc((size_t)n + 1, sizeof *v->offsets);
    if (FV) {
        FV->raddr = calloc((size_t)n, sizeof *FV->raddr);
        FV->key = calloc((size_t)n, sizeof *FV->key);
        FV->len = calloc((size_t)n, sizeof *FV->len);
    }
    if (!v || !FV || !v->offsets || !FV->raddr || !FV->key || !FV->len) {
        dds_var_free(v);
        dds_fab_var_free(FV);
        return dds_err(DDS_ENOMEM, "out of memory attaching variable '%s'", hv->name);
    }
    snprintf(v->name, sizeof v->name, "%s", hv->name);
    v->dtype = hv->dtype;
    v->row_bytes = hv->row_bytes;
    v->shm_win = v->win = MPI_WIN_NULL;
    for (int i = 0; i < n; i++) {
        v->offsets[i + 1] = v->offsets[i] + hv->shards[i].rows; /* overflow ruled out by the parser */
        FV->raddr[i] = hv->shards[i].addr;
        FV->key[i] = hv->shards[i].key;
        FV->len[i] = hv->shards[i].len;
    }
    FV->index = hv->index;
    v->fab = FV;
    *out = v;
    return DDS_OK;
}

typedef struct parsed_var {
    dds_hs_file f;
} parsed_var;

static int cmp_index(const void *a, const void *b)
{
    const parsed_var *x = a, *y = b;
    return x->f.var.index < y->f.var.index ? -1 : x->f.var.index > y->f.var.index ? 1 : 0;
}

/* Load every published variable of the joined run that the store does not
 * know yet, in the order the core group added them. */
static int load_vars(dds_store *s)
{
    struct dds_fabric *F = s->fab;
    int fd = dup(F->dirfd);
    if (fd < 0)
        return dds_err(DDS_EIO, "cannot read '%s': %s", F->pubdir, strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return dds_err(DDS_EIO, "cannot read '%s': %s", F->pubdir, strerror(errno));
    }
    rewinddir(d);
    parsed_var *pv = NULL;
    size_t n = 0, cap = 0;
    int rc = DDS_OK;
    struct dirent *e;
    while (rc == DDS_OK && (e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        if (strncmp(nm, "var-", 4) != 0 || l < 9 || strcmp(nm + l - 4, ".dds") != 0)
            continue;
        uint8_t *bytes;
        size_t len;
        int r = dds_hs_read_file(F->dirfd, F->pubdir, nm, &bytes, &len);
        if (r == DDS_ENOENT)
            continue; /* withdrawn meanwhile */
        if (r) {
            rc = r;
            break;
        }
        dds_hs_file f;
        r = dds_hs_parse(bytes, len, &f);
        free(bytes);
        if (r) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", dds_last_error());
            rc = dds_err(r, "'%s/%s': %s", F->pubdir, nm, msg);
            break;
        }
        if (f.kind != DDS_HS_KIND_VAR || memcmp(f.run_id, F->run_id, sizeof F->run_id) != 0) {
            dds_hs_file_clear(&f); /* another run's leftover: never mixed in */
            continue;
        }
        if (f.var.n_core != (uint32_t)F->npeers) {
            dds_hs_file_clear(&f);
            rc = dds_err(DDS_EPROTO, "'%s/%s' lists %u core ranks, the store has %d", F->pubdir, nm,
                         f.var.n_core, F->npeers);
            break;
        }
        if (dds_var_find(s, f.var.name)) {
            dds_hs_file_clear(&f);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            parsed_var *q = realloc(pv, nc * sizeof *q);
            if (!q) {
                dds_hs_file_clear(&f);
                rc = dds_err(DDS_ENOMEM, "out of memory");
                break;
            }
            pv = q;
            cap = nc;
        }
        pv[n++].f = f;
    }
    closedir(d);
    if (rc == DDS_OK && n > 1)
        qsort(pv, n, sizeof *pv, cmp_index);
    for (size_t i = 0; i < n; i++) {
        if (rc == DDS_OK) {
            bool dup_name = false;
            for (size_t j = 0; j < i; j++)
                if (strcmp(pv[j].f.var.name, pv[i].f.var.name) == 0)
                    dup_name = true;
            if (dup_name) {
                rc = dds_err(DDS_EPROTO, "'%s' publishes variable '%s' twice", F->pubdir, pv[i].f.var.name);
            } else {
                dds_var *v = NULL;
                rc = make_reader_var(F, &pv[i].f.var, &v);
                if (rc == DDS_OK) {
                    rc = dds_var_append(s, v);
                    if (rc) {
                        dds_fab_var_release(s, v);
                        dds_var_free(v);
                    }
                }
            }
        }
        dds_hs_file_clear(&pv[i].f);
    }
    free(pv);
    return rc;
}

static double resolve_timeout(double timeout_s)
{
    if (timeout_s >= 0)
        return timeout_s;
    const char *e = dds_env("DDSTORE_HANDSHAKE_TIMEOUT_S");
    if (e) {
        char *end;
        double t = strtod(e, &end);
        if (*end == '\0' && t >= 0)
            return t;
        dds_debug("DDSTORE_HANDSHAKE_TIMEOUT_S='%s' is not a number of seconds; using 300", e);
    }
    return 300.0;
}

int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s)
{
    *out = NULL;
    if (!dir)
        dir = dds_env("DDSTORE_HANDSHAKE_DIR");
    if (!dir)
        dir = "./ddstore_hs";
    if (n_core <= 0) {
        const char *e = dds_env("DDSTORE_N_CORE");
        if (e) {
            char *end;
            long v = strtol(e, &end, 10);
            if (*end != '\0' || v <= 0 || v > (long)DDS_HS_MAX_CORE)
                return dds_err(DDS_EINVAL, "DDSTORE_N_CORE='%s' is not a positive number of core ranks", e);
            n_core = (int)v;
        }
    }
    if (timeout_s != timeout_s)
        return dds_err(DDS_EINVAL, "timeout is NaN");
    double timeout = resolve_timeout(timeout_s);
    double deadline = now_s() + timeout;
    char why[512] = "nothing found";
    dds_hs_file f;
    int dirfd = -1;
    double pause = 0.02;
    for (;;) {
        memset(&f, 0, sizeof f);
        int rc = try_store(dir, n_core, &dirfd, &f, why, sizeof why);
        if (rc == DDS_OK)
            break;
        if (rc < 0)
            return rc;
        double left = deadline - now_s();
        if (left <= 0)
            return dds_err(DDS_ETIMEDOUT, "no current ddstore publication in '%s' after %.1f s: %s", dir,
                           timeout, why);
        sleep_s(pause < left ? pause : left);
        if (pause < 0.25)
            pause *= 2;
    }

    struct dds_fabric *F = calloc(1, sizeof *F);
    dds_store *s = dds_store_alloc(); /* the constructor of core stores: one place sets up a handle */
    int rc = (F && s) ? DDS_OK : dds_err(DDS_ENOMEM, "out of memory joining '%s'", dir);
    if (F) {
        dds_fab_init_struct(F);
        F->method = DDS_METHOD_FILE;
        F->is_reader = true;
        F->dirfd = dirfd;
        dirfd = -1;
        F->timeout_s = timeout;
        F->read_timeout_ns = dds_fab_read_timeout_ns(true);
        memcpy(F->run_id, f.run_id, sizeof F->run_id);
        F->token = dds_fab_token_get(F->run_id, false);
        F->pubdir = strdup(dir);
        if (!F->pubdir)
            rc = dds_err(DDS_ENOMEM, "out of memory");
    }
    if (rc == DDS_OK)
        rc = dds_fab_open_domain(F, f.store.prov, f.store.addr_format);
    if (rc == DDS_OK && ((uint64_t)F->mr_mode & FI_MR_VIRT_ADDR) != (f.store.mr_mode & FI_MR_VIRT_ADDR))
        rc = dds_err(DDS_ENOTSUP,
                     "provider %s here addresses remote memory differently (mr_mode 0x%llx) from the "
                     "core group's (0x%llx)",
                     F->prov, (unsigned long long)F->mr_mode, (unsigned long long)f.store.mr_mode);
    if (rc == DDS_OK)
        rc = dds_fab_insert_peers(F, (int)f.store.n_core, f.store.addr);
    if (rc == DDS_OK) {
        s->is_reader = true;
        s->method = DDS_METHOD_FILE;
        /* Owners serve gather when their provider gives tagged messages;
         * this reader's, the same provider, gives them too or not at all.
         * Not over shm: there every owner is on this node, and a one-sided
         * read (cross-memory attach) of a killed owner fails at once, while
         * a gather request to it waits until the publication is seen
         * withdrawn, which takes as long as the launcher takes to end the
         * rest of the core job (seen: over 20 s on a loaded machine). And
         * when a core rank of the run lives in this process (F->token), its
         * target endpoint would insert this reader's address, which shm maps
         * in-process to the reader's own region, and poll it after the
         * reader closed (seen: a segfault in the core's progress thread). */
        F->tagged = F->tagged && strstr(F->prov, "shm") == NULL;
        s->tp = F->tagged ? &dds_transport_fabric : &dds_transport_fabric_onesided;
        s->rank = -1;
        s->size = 0;
        s->width = (int)f.store.n_core;
        s->group_rank = -1;
        s->group_index = -1;
        s->group_size = (int)f.store.n_core;
        s->fabric_name = strdup(F->prov);
        s->handshake_dir = strdup(dir);
        if (!s->fabric_name || !s->handshake_dir)
            rc = dds_err(DDS_ENOMEM, "out of memory");
        s->fab = F;
    }
    if (rc == DDS_OK)
        rc = dds_gather_setup(s);
    if (rc == DDS_OK)
        rc = load_vars(s);
    dds_hs_file_clear(&f);
    if (dirfd >= 0)
        close(dirfd);
    if (rc) {
        if (s) {
            for (int64_t i = 0; i < s->nvars; i++) {
                dds_fab_var_release(s, s->vars[i]);
                dds_var_free(s->vars[i]);
            }
            dds_store_destroy(s);
        }
        dds_fab_free(F);
        return rc;
    }
    dds_debug("fabric: joined '%s': %d core ranks, provider %s, %lld variables", dir, s->group_size, F->prov,
              (long long)s->nvars);
    dds_store_track(s, true);
    *out = s;
    return DDS_OK;
}

int dds_fab_attach(dds_store *s, const char *name)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    pthread_mutex_lock(&F->attach_lock);
    double deadline = now_s() + F->timeout_s;
    double pause = 0.02;
    int rc;
    for (;;) {
        rc = load_vars(s);
        if (rc)
            break;
        if (dds_var_find(s, name))
            break;
        int cur = dds_fab_still_current(F);
        if (cur < 0) {
            rc = cur;
            break;
        }
        if (cur == 0) {
            rc = dds_err(DDS_ESTATE,
                         "the store published in '%s' was withdrawn (its core group freed it) before "
                         "variable '%s' appeared",
                         F->pubdir, name);
            break;
        }
        double left = deadline - now_s();
        if (left <= 0) {
            rc = dds_err(DDS_ETIMEDOUT, "variable '%s' is not published in '%s' after %.1f s", name, F->pubdir,
                         F->timeout_s);
            break;
        }
        sleep_s(pause < left ? pause : left);
        if (pause < 0.25)
            pause *= 2;
    }
    pthread_mutex_unlock(&F->attach_lock);
    return rc;
}
