/* Per-thread scratch buffers (internal.h: dds_scratch). Reads need working
 * memory on every call (the transfer sort, gather bounce buffers); a fresh
 * allocation each time cost as much as the work (and a page fault per page
 * of a large bounce buffer), so each thread keeps its buffers between
 * calls, and they are freed when the thread exits. */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

typedef struct scratch_set {
    void *buf[DDS_SCRATCH_SLOTS];
    size_t cap[DDS_SCRATCH_SLOTS];
} scratch_set;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_rc = -1;

static void scratch_free(void *p)
{
    scratch_set *t = p;
    for (int i = 0; i < DDS_SCRATCH_SLOTS; i++)
        free(t->buf[i]);
    free(t);
}

static void scratch_init(void) { scratch_key_rc = pthread_key_create(&scratch_key, scratch_free); }

static scratch_set *this_thread(bool create)
{
    pthread_once(&scratch_once, scratch_init);
    if (scratch_key_rc != 0)
        return NULL;
    scratch_set *t = pthread_getspecific(scratch_key);
    if (!t && create) {
        t = calloc(1, sizeof *t);
        if (t && pthread_setspecific(scratch_key, t) != 0) {
            free(t);
            t = NULL;
        }
    }
    return t;
}

void *dds_scratch(dds_scratch_slot slot, size_t n)
{
    scratch_set *t = this_thread(true);
    if (!t)
        return NULL;
    if (t->cap[slot] < n || !t->buf[slot]) {
        free(t->buf[slot]);
        t->buf[slot] = malloc(n ? n : 1);
        t->cap[slot] = t->buf[slot] ? n : 0;
    }
    return t->buf[slot];
}

void dds_scratch_forget(dds_scratch_slot slot, const void *buf)
{
    scratch_set *t = this_thread(false);
    if (t && t->buf[slot] == buf) {
        t->buf[slot] = NULL;
        t->cap[slot] = 0;
    }
}
