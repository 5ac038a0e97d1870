/* Read-only shard pages for methods 1 and 2.
 *
 * Shards are registered with libfabric for remote READ only, and providers
 * that move data in the target (tcp, verbs) refuse a write with such a key.
 * The shm provider does not ask the target: for a plain fi_write it copies
 * straight into the target's memory with process_vm_writev (its "fast RMA"
 * path) without looking at the key's access. So the pages themselves are
 * made read-only in every process that maps them (the owner, and node peers
 * that read a shared-memory shard by memcpy): process_vm_writev then fails
 * with EFAULT and the initiator gets an error completion. dds_update()
 * opens the owner's own pages for the length of its copy.
 *
 * This keeps libfabric operations from writing a store; it is no boundary
 * against a process of the same Unix user, which can write a core's memory
 * anyway (ptrace, /proc/<pid>/mem, a node-local shard's /dev/shm file).
 * Method 0 is left alone: its MPI window is reachable only from ranks of
 * the job. File-backed shards (storage.c) are mapped read-only from the
 * start, for every method, and written with pwrite. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* dds_update() toggles page protection around its copy: two updates of
 * one shard in different threads must not re-protect under each other. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

size_t dds_page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t round_up(size_t n, size_t page) { return (n + page - 1) / page * page; }

/* Set `prot` on the pages of a shard; *done tells whether it did. */
static int set_prot(const dds_var *v, const char *base, size_t bytes, int prot, bool *done)
{
    size_t page = dds_page_size();
    *done = false;
    if (bytes == 0)
        return DDS_OK;
    if ((uintptr_t)base % page != 0) {
        /* Not ours to round down into: the page starts with another
         * rank's data or the MPI's own. Shards from our allocator and
         * from noncontiguous shared windows are page-aligned. */
        dds_debug("variable '%s': shard at %p is not page-aligned; left writable", v->name,
                  (const void *)base);
        return DDS_OK;
    }
    if (mprotect((void *)base, round_up(bytes, page), prot) != 0)
        return dds_err(DDS_EIO, "variable '%s': mprotect of %zu bytes failed: %s", v->name, bytes,
                       strerror(errno));
    *done = true;
    return DDS_OK;
}

/* Bytes of group rank g's shard. */
static size_t shard_bytes(const dds_var *v, int g)
{
    return (size_t)((v->offsets[g + 1] - v->offsets[g]) * v->row_bytes);
}

int dds_shard_protect(dds_store *s, dds_var *v, bool readonly)
{
    if (!s->tp->page_shards || v->file)
        return DDS_OK;
    int prot = readonly ? PROT_READ : PROT_READ | PROT_WRITE;
    int rc = DDS_OK;
    for (int g = 0; g < s->group_size; g++) {
        if (!v->peer_base[g])
            continue;
        bool done;
        int r = set_prot(v, v->peer_base[g], shard_bytes(v, g), prot, &done);
        if (r && rc == DDS_OK)
            rc = r;
        if (g == s->group_rank)
            v->readonly = readonly && done; /* dds_shard_write opens only what this made read-only */
    }
    return rc;
}

int dds_shard_write(dds_var *v, size_t offset, const void *data, size_t len)
{
    if (v->file)
        return dds_storage_write(v, offset, data, len);
    if (!v->readonly) {
        memcpy(v->base + offset, data, len);
        return DDS_OK;
    }
    size_t page = dds_page_size();
    size_t first = offset / page * page;
    size_t span = round_up(offset + len, page) - first;
    pthread_mutex_lock(&write_lock);
    int rc = DDS_OK;
    if (mprotect(v->base + first, span, PROT_READ | PROT_WRITE) != 0) {
        rc = dds_err(DDS_EIO, "variable '%s': cannot open its pages for writing: %s", v->name,
                     strerror(errno));
    } else {
        memcpy(v->base + offset, data, len);
        if (mprotect(v->base + first, span, PROT_READ) != 0)
            dds_debug("variable '%s': pages left writable after an update: %s", v->name,
                      strerror(errno));
    }
    pthread_mutex_unlock(&write_lock);
    return rc;
}

void dds_shard_write_lock(bool lock)
{
    if (lock)
        pthread_mutex_lock(&write_lock);
    else
        pthread_mutex_unlock(&write_lock);
}

int dds_shard_open(dds_var *v, size_t offset, size_t len, bool writable)
{
    if (!v->readonly || len == 0)
        return DDS_OK;
    size_t page = dds_page_size();
    size_t first = offset / page * page;
    size_t span = round_up(offset + len, page) - first;
    if (mprotect(v->base + first, span, writable ? PROT_READ | PROT_WRITE : PROT_READ) != 0) {
        if (!writable) {
            dds_debug("variable '%s': pages left writable after an update: %s", v->name, strerror(errno));
            return DDS_OK;
        }
        return dds_err(DDS_EIO, "variable '%s': cannot open its pages for writing: %s", v->name,
                       strerror(errno));
    }
    return DDS_OK;
}
