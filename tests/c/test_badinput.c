/* Table-driven bad-input test of libddstore's public C API.
 *
 * Every case makes one bad call (NULL pointers, bad/freed/forged handles,
 * bad names, bad row ranges, size overflow, ranks that disagree, bad MPI
 * handles, calls in the wrong state) on every rank in the same order, then
 * checks, on every rank:
 *   - the return code is the documented one (the same on every rank for
 *     collective calls: a bad argument on one rank is an error everywhere),
 *   - dds_last_error() holds a non-empty message set by that call,
 *   - out-parameters of failed calls are left NULL where documented,
 *   - the store still works afterwards: a valid get, get_batch, get_ranges and
 *     an epoch return the right bytes, and the variable count did not move
 *     (a failed add leaves nothing behind).
 * Positive boundary checks (free(NULL), a 255-byte name...) run separately
 * and are not counted as bad inputs.
 *
 * Run under mpiexec with any number of ranks, with DDSTORE_NODE_LOCAL=0 and
 * =1. Any failure aborts the whole job (MPI_Abort), so a broken case can
 * never hang the others.
 *
 * Environment:
 *   DDS_BADINPUT_ONLY=<substring>  run only cases whose name contains it
 *                                  (=<name>: only the case of exactly that name).
 *   DDS_BADINPUT_KNOWN_BUGS=1      also run cases that hang or abort with the
 *                                  current library (each is marked KNOWN_BUG
 *                                  below with the reason); off by default so
 *                                  that CI stays green until the fix lands.
 *                                  A marked case that passes fails the run
 *                                  (exit 3): its mark is stale and must go.
 *   DDS_BADINPUT_LIST_KNOWN_BUGS=1 print the marked cases' names, one a line,
 *                                  and exit (no MPI traffic besides init).
 * tests/c/reliability.sh runs every marked case alone with the mark lifted
 * and fails CI when one passes, so a fixed bug cannot stay skipped.
 */
#include <limits.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

#include "check.h"

static int rank, size;

enum { ROW_WORDS = 3 };
static const int64_t RB = ROW_WORDS * (int64_t)sizeof(int64_t);

/* Word w of global row r of the reference variable. */
static int64_t value(int64_t r, int w) { return r * 1000 + w + 17; }

/* Every rank holds at least one row, so local-row cases behave the same
 * everywhere; shard sizes are uneven so reads cross shard boundaries. */
static int64_t rows_of(int group_rank) { return 3 + group_rank; }

typedef struct ctx {
    dds_store *s;      /* the store every case runs against (width 0) */
    dds_store *s1;     /* a second store, width 1 (one group per rank) */
    dds_store *freed;  /* a handle that was valid and has been freed */
    int64_t total, mine, first;
    int64_t nvars;     /* variables the store must hold after each case */
    int64_t *local;    /* this rank's rows of "ref" */
    int64_t *buf;      /* total rows */
    bool batch_agrees; /* get_batch errors are agreed over the group (see case) */
    dds_store *reader; /* method 2 only: this process joined the main store as a reader */
} ctx;

static int world_f(void) { return MPI_Comm_c2f(MPI_COMM_WORLD); }

/* Sentinel stored in an out-parameter before a call that must reset it. */
#define SENTINEL ((dds_store *)(uintptr_t)0x5eed)

/* Method 2 publishes each store in its own handshake directory, and a live
 * store locks its directory: give every store of this test its own, under
 * DDSTORE_HANDSHAKE_DIR (else /tmp), made unique by rank 0's pid. */
static char hs_base[512];

static const char *hs_dir(const char *tag)
{
    static char dirs[3][600];
    static int next;
    char *d = dirs[next++ % 3];
    snprintf(d, sizeof dirs[0], "%s/%s", hs_base, tag);
    return d;
}

/* ---- library and store creation -------------------------------------------- */

static int c_create_out_null(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return dds_create(NULL, world_f(), NULL);
}

static int create_expect_null(dds_store **t, int rc)
{
    CHECK(*t == NULL, "failed dds_create left *out = %p", (void *)*t);
    return rc;
}

static int c_create_comm_null(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, MPI_Comm_c2f(MPI_COMM_NULL), NULL));
}

static int c_create_comm_garbage(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, 987654, NULL));
}

static int c_create_comm_negative(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, -12345, NULL));
}

static int c_create_comm_intmax(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, INT_MAX, NULL));
}

/* The Fortran handle of a communicator that has since been freed. Open MPI
 * removes it from its handle table (f2c gives NULL); MPICH keeps the bits and
 * its own validity check of a freed object is fatal, so this case only runs
 * with Open MPI (flag OMPI_ONLY). */
static int c_create_comm_freed(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int f = MPI_Comm_c2f(dup);
    MPI_Comm_free(&dup);
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, f, NULL));
}

/* A datatype handle where a communicator is expected. Only MPICH encodes the
 * object kind in its handles; Open MPI's Fortran handles are table indices
 * that may name a real communicator, so this case is MPICH-only. */
static int c_create_comm_is_datatype(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, (int)MPI_Type_c2f(MPI_INT), NULL));
}

static int c_create_opts_size_zero(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_options o;
    dds_options_init(&o);
    o.size = 0;
    dds_store *t = SENTINEL;
    return create_expect_null(&t, dds_create(&t, world_f(), &o));
}

static int create_with(int method, int width)
{
    dds_options o;
    dds_options_init(&o);
    o.method = method;
    o.width = width;
    dds_store *t = SENTINEL;
    int rc = dds_create(&t, world_f(), &o);
    if (rc == DDS_OK)
        dds_free(t); /* not expected; keeps the job consistent if it happens */
    else
        CHECK(t == NULL, "failed dds_create left *out set");
    return rc;
}

static int c_create_method_7(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return create_with(7, 0);
}

static int c_create_method_negative(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return create_with(-5, 0);
}

/* Only the last rank asks for a bad method: every rank must fail. */
static int c_create_method_one_rank(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return create_with(rank == size - 1 ? 9 : 0, 0);
}

static int c_create_width_negative(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return create_with(0, -1);
}

static int c_create_width_too_big(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return create_with(0, size + 1);
}

/* A width that does not divide the communicator (or exceeds it for 1-2 ranks). */
static int c_create_width_not_dividing(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    int w = size + 1;
    for (int k = 2; k < size; k++)
        if (size % k != 0) {
            w = k;
            break;
        }
    return create_with(0, w);
}

/* Ranks disagree on the width: rank 0 asks for groups of 1, the others for
 * the whole communicator. Each width is valid on its own. */
static int c_create_width_mismatch(ctx *c, int *e)
{
    (void)c;
    int rc = create_with(0, rank == 0 ? 1 : size);
    /* EMISMATCH is the documented code; EINVAL is an acceptable spelling of
     * the same refusal. One rank: nothing to disagree with, a valid call. */
    *e = size == 1 ? DDS_OK : (rc == DDS_EINVAL ? DDS_EINVAL : DDS_EMISMATCH);
    return rc;
}

/* Methods 1 and 2 without libfabric: ENOTSUP. With libfabric, an unknown
 * provider name: ENOTSUP (header: "or when the provider is absent"). */
static int create_fabric(int method)
{
    dds_options o;
    dds_options_init(&o);
    o.method = method;
    o.fabric = "no-such-provider-xyz";
    o.handshake_dir = "/tmp/dds-badinput-hs-never-used";
    dds_store *t = SENTINEL;
    int rc = dds_create(&t, world_f(), &o);
    if (rc == DDS_OK)
        dds_free(t);
    else
        CHECK(t == NULL, "failed dds_create left *out set");
    return rc;
}

static int c_create_method1_unavailable(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ENOTSUP;
    return create_fabric(1);
}

static int c_create_method2_unavailable(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ENOTSUP;
    return create_fabric(2);
}

static int c_create_env_method_garbage(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    const char *old = getenv("DDSTORE_METHOD");
    char *saved = old ? strdup(old) : NULL;
    setenv("DDSTORE_METHOD", "zero", 1);
    int rc = create_with(DDS_METHOD_DEFAULT, 0);
    if (saved) {
        setenv("DDSTORE_METHOD", saved, 1);
        free(saved);
    } else {
        unsetenv("DDSTORE_METHOD");
    }
    return rc;
}

/* ---- handles ----------------------------------------------------------------- */

static int c_free_garbage(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ESTATE;
    int64_t junk[64] = { 0 };
    return dds_free((dds_store *)junk);
}

static int c_free_double(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_free(c->freed);
}

/* A handle freed just before another store was created: the allocator
 * tends to hand the new store the same address, and a registry of live
 * pointers then takes the stale handle for the new store (ABA), so a double
 * free would free someone else's store. */
static int c_free_stale_handle_after_new_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ESTATE;
    dds_options o;
    dds_options_init(&o);
    o.handshake_dir = hs_dir("stale");
    dds_store *old = NULL, *fresh = NULL;
    OK(dds_create(&old, world_f(), &o));
    OK(dds_free(old));
    /* Create up to 16 stores until one lands on the old address on some
     * rank (the ranks decide together, so they make the same collective
     * calls). The stale handle must stay invalid through all of them. */
    for (int tries = 0; tries < 16; tries++) {
        OK(dds_create(&fresh, world_f(), &o));
        int alias = fresh == old, any = 0;
        MPI_Allreduce(&alias, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any)
            break;
        OK(dds_free(fresh));
        fresh = NULL;
    }
    if (!fresh)
        OK(dds_create(&fresh, world_f(), &o));
    int rc = dds_free(old); /* must not free `fresh` */
    if (rc == DDS_OK)
        return rc; /* `fresh` is gone already */
    int64_t n = -1;
    CHECK(dds_var_count(fresh, &n) == DDS_OK && n == 0, "the new store was damaged");
    OK(dds_free(fresh));
    return rc;
}

/* A forged handle: memory that starts with the store's magic number but was
 * never returned by dds_create. */
static int c_get_forged_magic(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    uint32_t fake[256];
    for (size_t i = 0; i < 256; i++)
        fake[i] = 0x44445354u;
    return dds_get((dds_store *)fake, "ref", c->buf, 0, 1);
}

static int c_get_null_store(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get(NULL, "ref", c->buf, 0, 1);
}

static int c_get_garbage_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_get((dds_store *)&rank, "ref", c->buf, 0, 1);
}

static int c_get_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_get(c->freed, "ref", c->buf, 0, 1);
}

static int c_add_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_add(c->freed, "x", c->local, c->mine, RB, DDS_DTYPE_INT64);
}

static int c_init_null_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return dds_init(NULL, "x", 1, RB, DDS_DTYPE_INT64);
}

static int c_update_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_update(c->freed, "ref", c->local, 1, 0);
}

static int c_sync_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_sync(c->freed);
}

static int c_sync_null_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return dds_sync(NULL);
}

static int c_epoch_begin_null_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return dds_epoch_begin(NULL);
}

static int c_epoch_end_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_epoch_end(c->freed);
}

static int c_batch_freed_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    int64_t r = 0;
    return dds_get_batch(c->freed, "ref", c->buf, &r, 1);
}

static int c_ranges_garbage_store(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    int64_t st = 0, n = 1;
    return dds_get_ranges((dds_store *)c->local, "ref", c->buf, &st, &n, 1);
}

static int c_query_garbage_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ESTATE;
    dds_var_info vi = { .size = sizeof vi };
    return dds_query((dds_store *)&vi, "ref", &vi);
}

static int c_query_null_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_var_info vi = { .size = sizeof vi };
    return dds_query(NULL, "ref", &vi);
}

static int c_info_null_store(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    dds_store_info si = { .size = sizeof si };
    return dds_store_info_get(NULL, &si);
}

static int c_info_null_info(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_store_info_get(c->s, NULL);
}

static int c_info_size_zero(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    dds_store_info si = { .size = 0 };
    return dds_store_info_get(c->s, &si);
}

static int c_property_null_key(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    char buf[8];
    return dds_store_property(c->s, NULL, buf, sizeof buf);
}

static int c_property_null_buf(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_store_property(c->s, "transport", NULL, 8);
}

static int c_property_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    char buf[8];
    return dds_store_property(c->freed, "transport", buf, sizeof buf);
}

static int c_var_count_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    int64_t n;
    return dds_var_count(c->freed, &n);
}

static int c_stats_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    dds_stats_info st = { .size = sizeof st };
    return dds_stats(c->freed, &st);
}

static int c_stats_reset_garbage(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ESTATE;
    char junk[512] = { 0 };
    return dds_stats_reset((dds_store *)junk);
}

static int c_register_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_register_recv(c->freed, c->buf, 8);
}

static int c_attach_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_attach(c->freed, "ref");
}

/* Versioned variables (dds_init_versioned, dds_generation, dds_var_block_rows). */
static int c_init_versioned_freed(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_init_versioned(c->freed, "ver", 2, 8, DDS_DTYPE_INT64, 1);
}

static int c_init_versioned_block_rows_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_init_versioned(c->s, "ver", 2, 8, DDS_DTYPE_INT64, -1);
}

static int c_init_versioned_name_too_long(ctx *c, int *e)
{
    *e = DDS_EINVAL; /* fits DDS_NAME_MAX, but not with the counters' suffix */
    char name[DDS_NAME_MAX + 1];
    memset(name, 'v', DDS_NAME_MAX);
    name[DDS_NAME_MAX] = '\0';
    return dds_init_versioned(c->s, name, 2, 8, DDS_DTYPE_INT64, 1);
}

static int c_generation_out_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_generation(c->s, "ref", 0, NULL);
}

static int c_generation_not_versioned(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    uint64_t g;
    return dds_generation(c->s, "ref", 0, &g);
}

static int c_generation_garbage(ctx *c, int *e)
{
    (void)c;
    *e = DDS_ESTATE;
    char junk[512] = { 0 };
    uint64_t g;
    return dds_generation((dds_store *)junk, "ref", 0, &g);
}

static int c_block_rows_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_var_block_rows(c->s, "ref", NULL);
}

static int c_block_rows_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    int64_t b;
    return dds_var_block_rows(c->s, "no/such", &b);
}

/* ---- names ------------------------------------------------------------------- */

static int add_named(ctx *c, const char *name)
{
    return dds_add(c->s, name, c->local, c->mine, RB, DDS_DTYPE_INT64);
}

static int c_add_name_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, NULL);
}

static int c_add_name_empty(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "");
}

static int c_add_name_too_long(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    char name[DDS_NAME_MAX + 2];
    memset(name, 'n', DDS_NAME_MAX + 1);
    name[DDS_NAME_MAX + 1] = '\0';
    return add_named(c, name);
}

/* A very long name (64 KiB): must be rejected without reading it all. */
static int c_add_name_huge(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    size_t n = 1 << 16;
    char *name = malloc(n + 1);
    memset(name, 'h', n);
    name[n] = '\0';
    int rc = add_named(c, name);
    free(name);
    return rc;
}

static int c_add_name_invalid_byte(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "bad\xff\xfe");
}

static int c_add_name_overlong(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "slash\xc0\xaf"); /* overlong '/' */
}

static int c_add_name_surrogate(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "sur\xed\xa0\x80"); /* U+D800 */
}

static int c_add_name_truncated_utf8(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "euro\xe2\x82"); /* first two bytes of U+20AC */
}

static int c_add_name_beyond_unicode(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "big\xf4\x90\x80\x80"); /* U+110000 */
}

static int c_add_name_lone_continuation(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, "\x80x");
}

static int c_add_name_duplicate(ctx *c, int *e)
{
    *e = DDS_EEXIST;
    return add_named(c, "ref");
}

static int c_init_name_duplicate(ctx *c, int *e)
{
    *e = DDS_EEXIST;
    return dds_init(c->s, "ref", c->mine, RB, DDS_DTYPE_INT64);
}

/* Only the last rank passes a bad name: every rank fails. */
static int c_add_name_bad_on_one_rank(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return add_named(c, rank == size - 1 ? "\xff" : "one-bad");
}

/* Ranks pass different (valid) names. */
static int c_add_name_mismatch(ctx *c, int *e)
{
    *e = size > 1 ? DDS_EMISMATCH : DDS_OK;
    char name[32];
    snprintf(name, sizeof name, "mm%d", rank);
    int rc = add_named(c, name);
    if (rc == DDS_OK)
        c->nvars++; /* one rank: a valid add */
    return rc;
}

static int c_get_name_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    return dds_get(c->s, "no/such/var", c->buf, 0, 1);
}

static int c_get_name_invalid(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get(c->s, "r\xe9", c->buf, 0, 1);
}

static int c_get_name_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get(c->s, NULL, c->buf, 0, 1);
}

/* A variable of the other store: names are per store. */
static int c_get_name_of_other_store(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    return dds_get(c->s, "only-in-s1", c->buf, 0, 1);
}

static int c_query_name_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    dds_var_info vi = { .size = sizeof vi };
    return dds_query(c->s, "nope", &vi);
}

static int c_update_name_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    return dds_update(c->s, "nope", c->local, 1, 0);
}

static int c_offsets_name_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    int64_t offs[8];
    return dds_var_offsets(c->s, "nope", offs, 8);
}

static int c_attach_core_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    return dds_attach(c->s, "nope");
}

static int c_attach_core_bad_name(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_attach(c->s, "");
}

static int c_batch_name_unknown(ctx *c, int *e)
{
    *e = DDS_ENOENT;
    int64_t r = 0;
    return dds_get_batch(c->s, "nope", c->buf, &r, 1);
}

/* ---- rows, sizes, dtypes --------------------------------------------------------- */

static int c_add_negative_rows(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "neg", c->local, -1, RB, DDS_DTYPE_INT64);
}

static int c_add_negative_rows_one_rank(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "neg1", c->local, rank == size - 1 ? -3 : c->mine, RB, DDS_DTYPE_INT64);
}

static int c_add_row_bytes_zero(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "rb0", c->local, c->mine, 0, DDS_DTYPE_INT64);
}

static int c_add_row_bytes_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "rbneg", c->local, c->mine, -8, DDS_DTYPE_INT64);
}

static int c_add_data_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "nodata", NULL, c->mine, RB, DDS_DTYPE_INT64);
}

static int c_add_data_null_one_rank(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_add(c->s, "nodata1", rank == 0 ? NULL : c->local, c->mine, RB, DDS_DTYPE_INT64);
}

/* nrows x row_bytes beyond 2^63 on one rank. */
static int c_add_local_overflow(ctx *c, int *e)
{
    *e = DDS_EOVERFLOW;
    return dds_add(c->s, "ovf", c->local, INT64_MAX / 2, 16, DDS_DTYPE_INT64);
}

static int c_init_local_overflow_one_rank(ctx *c, int *e)
{
    *e = DDS_EOVERFLOW;
    return dds_init(c->s, "ovf1", rank == 0 ? ((int64_t)1 << 62) : 1, 4, DDS_DTYPE_UINT32);
}

/* Every local size fits, the sum of rows fits, but total rows x row_bytes
 * does not (one rank: the local size already overflows). No memory is
 * allocated before the check. */
static int c_init_total_bytes_overflow(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EOVERFLOW;
    int64_t local = ((int64_t)1 << 62) / size;
    return dds_init(c->s, "ovft", local, 3, DDS_DTYPE_BYTES);
}

/* The sum of row counts itself overflows int64 (needs two ranks or more). */
static int c_init_total_rows_overflow(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EOVERFLOW;
    int64_t local = size > 1 ? INT64_MAX / size + 1 : INT64_MAX;
    /* one rank: no sum to overflow; 2-byte rows make the local size overflow */
    return dds_init(c->s, "ovfr", local, size > 1 ? 1 : 2, DDS_DTYPE_BYTES);
}

static int c_add_row_bytes_mismatch(ctx *c, int *e)
{
    *e = size > 1 ? DDS_EMISMATCH : DDS_OK;
    int rc = dds_add(c->s, "rbmm", c->local, c->mine, rank == size - 1 ? RB - 8 : RB, DDS_DTYPE_INT64);
    if (rc == DDS_OK)
        c->nvars++;
    return rc;
}

static int c_add_dtype_mismatch(ctx *c, int *e)
{
    *e = size > 1 ? DDS_EMISMATCH : DDS_OK;
    int rc = dds_add(c->s, "dtmm", c->local, c->mine, RB,
                     rank == size - 1 ? DDS_DTYPE_FLOAT64 : DDS_DTYPE_INT64);
    if (rc == DDS_OK)
        c->nvars++;
    return rc;
}

static int c_add_zero_total_rows(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_add(c->s, "empty", c->local, 0, RB, DDS_DTYPE_INT64);
}

static int c_init_zero_total_rows(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_init(c->s, "empty2", 0, 1, DDS_DTYPE_UINT8);
}

static int c_init_negative_rows(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_init(c->s, "ineg", -1, RB, DDS_DTYPE_INT64);
}

/* A shard far larger than this machine's memory on the last rank only: a
 * clean ENOMEM (or EMPI from the shared-window allocation) on every rank,
 * and the ranks whose shards were allocated release them.
 * DDS_BADINPUT_HUGE_BYTES overrides the size (default 16 TiB), e.g. to stay
 * below physical memory and hit a `ulimit -v` instead. */
static int c_init_huge_allocation(ctx *c, int *e)
{
    (void)c;
    const char *hb = getenv("DDS_BADINPUT_HUGE_BYTES");
    int64_t huge = hb ? atoll(hb) : ((int64_t)1 << 44);
    int64_t rows = rank == size - 1 ? huge : 2;
    int rc = dds_init(c->s, "huge", rows, 1, DDS_DTYPE_UINT8);
    *e = (rc == DDS_EMPI) ? DDS_EMPI : DDS_ENOMEM;
    return rc;
}

static int c_get_out_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get(c->s, "ref", NULL, 0, 1);
}

static int c_get_start_negative(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, -1, 1);
}

static int c_get_start_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, c->total + 1, 0);
}

static int c_get_range_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, c->total - 1, 2);
}

static int c_get_start_int64_max(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, INT64_MAX, 1);
}

static int c_get_start_int64_min(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, INT64_MIN, 1);
}

static int c_get_count_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get(c->s, "ref", c->buf, 0, -1);
}

/* start + nrows wraps around int64 if computed naively. */
static int c_get_count_wraps(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->s, "ref", c->buf, 1, INT64_MAX / RB);
}

/* nrows x row_bytes beyond 2^63. */
static int c_get_count_overflow(ctx *c, int *e)
{
    *e = DDS_EOVERFLOW;
    return dds_get(c->s, "ref", c->buf, 0, INT64_MAX);
}

static int c_batch_row_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t rows[3] = { 0, c->total, 1 };
    return dds_get_batch(c->s, "ref", c->buf, rows, 3);
}

static int c_batch_row_negative(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t rows[2] = { 1, -1 };
    return dds_get_batch(c->s, "ref", c->buf, rows, 2);
}

static int c_batch_rows_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_get_batch(c->s, "ref", c->buf, NULL, 2);
}

static int c_batch_out_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t rows[1] = { 0 };
    return dds_get_batch(c->s, "ref", NULL, rows, 1);
}

static int c_batch_count_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t rows[1] = { 0 };
    return dds_get_batch(c->s, "ref", c->buf, rows, -1);
}

static int c_batch_count_overflow(ctx *c, int *e)
{
    *e = DDS_EOVERFLOW;
    int64_t rows[1] = { 0 };
    return dds_get_batch(c->s, "ref", c->buf, rows, INT64_MAX);
}

/* A bad row on the last rank only. get_batch is group-collective for
 * method 0; the error reaches the other ranks when the read synchronises over
 * the group (ranks not all sharing memory); with the node shared-memory fast
 * path there is no synchronisation and the others succeed. */
static int c_batch_bad_row_one_rank(ctx *c, int *e)
{
    int64_t rows[2] = { 0, rank == size - 1 ? c->total + 5 : 1 };
    *e = (rank == size - 1 || c->batch_agrees) ? DDS_ERANGE : DDS_OK;
    return dds_get_batch(c->s, "ref", c->buf, rows, 2);
}

static int c_ranges_starts_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t n = 1;
    return dds_get_ranges(c->s, "ref", c->buf, NULL, &n, 1);
}

static int c_ranges_counts_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t st = 0;
    return dds_get_ranges(c->s, "ref", c->buf, &st, NULL, 1);
}

static int c_ranges_count_negative(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t st[2] = { 0, 2 }, n[2] = { 1, -1 };
    return dds_get_ranges(c->s, "ref", c->buf, st, n, 2);
}

static int c_ranges_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t st[2] = { 0, c->total - 1 }, n[2] = { 1, 2 };
    return dds_get_ranges(c->s, "ref", c->buf, st, n, 2);
}

static int c_ranges_nranges_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t st = 0, n = 1;
    return dds_get_ranges(c->s, "ref", c->buf, &st, &n, -2);
}

static int c_ranges_out_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    int64_t st = 0, n = 1;
    return dds_get_ranges(c->s, "ref", NULL, &st, &n, 1);
}

static int c_ranges_start_int64_max(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t st = INT64_MAX, n = INT64_MAX;
    return dds_get_ranges(c->s, "ref", c->buf, &st, &n, 1);
}

static int c_update_offset_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_update(c->s, "ref", c->local, 1, -1);
}

static int c_update_count_negative(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_update(c->s, "ref", c->local, -1, 0);
}

static int c_update_past_shard(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_update(c->s, "ref", c->local, c->mine + 1, 0);
}

static int c_update_offset_past_shard(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_update(c->s, "ref", c->local, 0, c->mine + 1);
}

static int c_update_wraps(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_update(c->s, "ref", c->local, INT64_MAX, 1);
}

static int c_update_data_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_update(c->s, "ref", NULL, 1, 0);
}

static int c_offsets_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_var_offsets(c->s, "ref", NULL, 100);
}

static int c_offsets_too_short(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t offs[64];
    return dds_var_offsets(c->s, "ref", offs, size); /* size + 1 needed */
}

static int c_offsets_negative_n(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t offs[64];
    return dds_var_offsets(c->s, "ref", offs, -1);
}

static int c_var_count_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_var_count(c->s, NULL);
}

static int c_var_name_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_var_name(c->s, 0, NULL, 64);
}

static int c_var_name_index_negative(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    char nm[64];
    return dds_var_name(c->s, -1, nm, sizeof nm);
}

static int c_var_name_index_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    char nm[64];
    return dds_var_name(c->s, c->nvars, nm, sizeof nm);
}

static int c_var_name_buflen_zero(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    char nm[1] = { 'x' };
    int rc = dds_var_name(c->s, 0, nm, 0);
    CHECK(nm[0] == 'x', "dds_var_name wrote into a 0-byte buffer");
    return rc;
}

static int c_query_info_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_query(c->s, "ref", NULL);
}

static int c_query_info_size_zero(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    dds_var_info vi;
    memset(&vi, 0xab, sizeof vi);
    vi.size = 0;
    return dds_query(c->s, "ref", &vi);
}

static int c_stats_null(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_stats(c->s, NULL);
}

static int c_register_null_buf(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_register_recv(c->s, NULL, 64);
}

/* ---- state ------------------------------------------------------------------- */

static int c_epoch_end_without_begin(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_epoch_end(c->s);
}

static int c_epoch_end_twice(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    OK(dds_epoch_begin(c->s));
    OK(dds_epoch_end(c->s));
    return dds_epoch_end(c->s);
}

static int c_join_out_null(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EINVAL;
    return dds_join(NULL, "/tmp/dds-badinput-no-such-dir", 1, 0.1);
}

/* A core store's reader-only call with a bad name; and dds_join on a
 * directory that holds no publication: ENOTSUP without libfabric, a timeout
 * (or I/O error) with it. */
static int c_join_missing_dir(ctx *c, int *e)
{
    (void)c;
    dds_store *t = SENTINEL;
    int rc = dds_join(&t, "/tmp/dds-badinput-no-such-dir", 1, 0.2);
    if (!dds_has_fabric())
        *e = DDS_ENOTSUP;
    else
        *e = (rc == DDS_EIO) ? DDS_EIO : DDS_ETIMEDOUT;
    CHECK(t == NULL, "failed dds_join left *out set");
    return rc;
}

/* ---- method 2: core-only calls on a reader ------------------------------------ */

static int c_reader_add(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_add(c->reader, "r", c->local, 1, RB, DDS_DTYPE_INT64);
}

static int c_reader_init(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_init(c->reader, "r", 1, RB, DDS_DTYPE_INT64);
}

static int c_reader_update(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_update(c->reader, "ref", c->local, 1, 0);
}

static int c_reader_sync(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_sync(c->reader);
}

static int c_reader_epoch_begin(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_epoch_begin(c->reader);
}

static int c_reader_epoch_end(ctx *c, int *e)
{
    *e = DDS_ESTATE;
    return dds_epoch_end(c->reader);
}

static int c_reader_get_past_end(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    return dds_get(c->reader, "ref", c->buf, c->total, 1);
}

static int c_reader_batch_negative_row(ctx *c, int *e)
{
    *e = DDS_ERANGE;
    int64_t rows[2] = { 0, -7 };
    return dds_get_batch(c->reader, "ref", c->buf, rows, 2);
}

static int c_reader_attach_bad_name(ctx *c, int *e)
{
    *e = DDS_EINVAL;
    return dds_attach(c->reader, "\xc3");
}

/* Waits the join timeout (2 s here) for a variable nobody publishes. */
static int c_reader_attach_never_published(ctx *c, int *e)
{
    *e = DDS_ETIMEDOUT;
    return dds_attach(c->reader, "never/published");
}

static int c_join_wrong_n_core(ctx *c, int *e)
{
    (void)c;
    *e = DDS_EMISMATCH;
    dds_store *t = SENTINEL;
    int rc = dds_join(&t, hs_dir("main"), size + 1, 2.0);
    CHECK(t == NULL, "failed dds_join left *out set");
    return rc;
}

/* ---- the table ---------------------------------------------------------------- */

enum { KNOWN_BUG = 1, OMPI_ONLY = 2, MPICH_ONLY = 4, READER = 8 };

typedef struct bad_case {
    const char *name;
    int (*run)(ctx *c, int *expect);
    int flags;
    const char *why; /* for KNOWN_BUG: what happens today */
} bad_case;

#define CASE(fn) { #fn + 2, fn, 0, NULL }
#define CASE_F(fn, f, w) { #fn + 2, fn, f, w }

static const bad_case cases[] = {
    /* store creation and MPI handles */
    CASE(c_create_out_null),
    CASE(c_create_comm_null),
    CASE(c_create_comm_garbage),
    CASE(c_create_comm_negative),
    CASE(c_create_comm_intmax),
    CASE_F(c_create_comm_freed, OMPI_ONLY, NULL),
    CASE_F(c_create_comm_is_datatype, MPICH_ONLY, NULL),
    CASE(c_create_opts_size_zero),
    CASE(c_create_method_7),
    CASE(c_create_method_negative),
    CASE(c_create_method_one_rank),
    CASE(c_create_width_negative),
    CASE(c_create_width_too_big),
    CASE(c_create_width_not_dividing),
    CASE(c_create_width_mismatch),
    CASE(c_create_method1_unavailable),
    CASE(c_create_method2_unavailable),
    CASE(c_create_env_method_garbage),
    /* handles */
    CASE(c_free_garbage),
    CASE(c_free_double),
    CASE(c_free_stale_handle_after_new_store),
    CASE(c_get_forged_magic),
    CASE(c_get_null_store),
    CASE(c_get_garbage_store),
    CASE(c_get_freed_store),
    CASE(c_add_freed_store),
    CASE(c_init_null_store),
    CASE(c_update_freed_store),
    CASE(c_sync_freed_store),
    CASE(c_sync_null_store),
    CASE(c_epoch_begin_null_store),
    CASE(c_epoch_end_freed_store),
    CASE(c_batch_freed_store),
    CASE(c_ranges_garbage_store),
    CASE(c_query_garbage_store),
    CASE(c_query_null_store),
    CASE(c_info_null_store),
    CASE(c_info_null_info),
    CASE(c_info_size_zero),
    CASE(c_property_null_key),
    CASE(c_property_null_buf),
    CASE(c_property_freed),
    CASE(c_var_count_freed),
    CASE(c_stats_freed),
    CASE(c_stats_reset_garbage),
    CASE(c_register_freed),
    CASE(c_attach_freed),
    CASE(c_init_versioned_freed),
    CASE(c_init_versioned_block_rows_negative),
    CASE(c_init_versioned_name_too_long),
    CASE(c_generation_out_null),
    CASE(c_generation_not_versioned),
    CASE(c_generation_garbage),
    CASE(c_block_rows_null),
    CASE(c_block_rows_unknown),
    /* names */
    CASE(c_add_name_null),
    CASE(c_add_name_empty),
    CASE(c_add_name_too_long),
    CASE(c_add_name_huge),
    CASE(c_add_name_invalid_byte),
    CASE(c_add_name_overlong),
    CASE(c_add_name_surrogate),
    CASE(c_add_name_truncated_utf8),
    CASE(c_add_name_beyond_unicode),
    CASE(c_add_name_lone_continuation),
    CASE(c_add_name_duplicate),
    CASE(c_init_name_duplicate),
    CASE(c_add_name_bad_on_one_rank),
    CASE(c_add_name_mismatch),
    CASE(c_get_name_unknown),
    CASE(c_get_name_invalid),
    CASE(c_get_name_null),
    CASE(c_get_name_of_other_store),
    CASE(c_query_name_unknown),
    CASE(c_update_name_unknown),
    CASE(c_offsets_name_unknown),
    CASE(c_attach_core_unknown),
    CASE(c_attach_core_bad_name),
    CASE(c_batch_name_unknown),
    /* rows, sizes, dtypes */
    CASE(c_add_negative_rows),
    CASE(c_add_negative_rows_one_rank),
    CASE(c_add_row_bytes_zero),
    CASE(c_add_row_bytes_negative),
    CASE(c_add_data_null),
    CASE(c_add_data_null_one_rank),
    CASE(c_add_local_overflow),
    CASE(c_init_local_overflow_one_rank),
    CASE(c_init_total_bytes_overflow),
    CASE(c_init_total_rows_overflow),
    CASE(c_add_row_bytes_mismatch),
    CASE(c_add_dtype_mismatch),
    CASE(c_add_zero_total_rows),
    CASE(c_init_zero_total_rows),
    CASE(c_init_negative_rows),
    CASE(c_init_huge_allocation),
    CASE(c_get_out_null),
    CASE(c_get_start_negative),
    CASE(c_get_start_past_end),
    CASE(c_get_range_past_end),
    CASE(c_get_start_int64_max),
    CASE(c_get_start_int64_min),
    CASE(c_get_count_negative),
    CASE(c_get_count_wraps),
    CASE(c_get_count_overflow),
    CASE(c_batch_row_past_end),
    CASE(c_batch_row_negative),
    CASE(c_batch_rows_null),
    CASE(c_batch_out_null),
    CASE(c_batch_count_negative),
    CASE(c_batch_count_overflow),
    CASE(c_batch_bad_row_one_rank),
    CASE(c_ranges_starts_null),
    CASE(c_ranges_counts_null),
    CASE(c_ranges_count_negative),
    CASE(c_ranges_past_end),
    CASE(c_ranges_nranges_negative),
    CASE(c_ranges_out_null),
    CASE(c_ranges_start_int64_max),
    CASE(c_update_offset_negative),
    CASE(c_update_count_negative),
    CASE(c_update_past_shard),
    CASE(c_update_offset_past_shard),
    CASE(c_update_wraps),
    CASE(c_update_data_null),
    CASE(c_offsets_null),
    CASE(c_offsets_too_short),
    CASE(c_offsets_negative_n),
    CASE(c_var_count_null),
    CASE(c_var_name_null),
    CASE(c_var_name_index_negative),
    CASE(c_var_name_index_past_end),
    CASE(c_var_name_buflen_zero),
    CASE(c_query_info_null),
    CASE(c_query_info_size_zero),
    CASE(c_stats_null),
    CASE(c_register_null_buf),
    /* state */
    CASE(c_epoch_end_without_begin),
    CASE(c_epoch_end_twice),
    CASE(c_join_out_null),
    CASE(c_join_missing_dir),
    /* method 2 readers (run when DDSTORE_METHOD=2 and libfabric is there) */
    CASE_F(c_reader_add, READER, NULL),
    CASE_F(c_reader_init, READER, NULL),
    CASE_F(c_reader_update, READER, NULL),
    CASE_F(c_reader_sync, READER, NULL),
    CASE_F(c_reader_epoch_begin, READER, NULL),
    CASE_F(c_reader_epoch_end, READER, NULL),
    CASE_F(c_reader_get_past_end, READER, NULL),
    CASE_F(c_reader_batch_negative_row, READER, NULL),
    CASE_F(c_reader_attach_bad_name, READER, NULL),
    CASE_F(c_reader_attach_never_published, READER, NULL),
    CASE_F(c_join_wrong_n_core, READER, NULL),
};

/* ---- the harness -------------------------------------------------------------- */

static bool is_mpich(void)
{
#if defined(MPICH) || defined(MPICH_VERSION)
    return true;
#else
    return false;
#endif
}

/* The store still answers valid calls with the right bytes: get over all
 * shards, a group-collective batch, ranges, an epoch, and the variable count. */
static void verify_store(ctx *c, const char *after)
{
    memset(c->buf, 0, (size_t)(c->total * RB));
    CHECK(dds_get(c->s, "ref", c->buf, 0, c->total) == DDS_OK, "get after %s", after);
    for (int64_t r = 0; r < c->total; r++)
        for (int w = 0; w < ROW_WORDS; w++)
            CHECK(c->buf[r * ROW_WORDS + w] == value(r, w), "after %s: row %lld word %d = %lld",
                  after, (long long)r, w, (long long)c->buf[r * ROW_WORDS + w]);
    int64_t rows[3] = { c->total - 1, 0, (rank * 7) % c->total };
    CHECK(dds_get_batch(c->s, "ref", c->buf, rows, 3) == DDS_OK, "get_batch after %s", after);
    for (int i = 0; i < 3; i++)
        CHECK(c->buf[i * ROW_WORDS] == value(rows[i], 0), "after %s: batch row %lld", after,
              (long long)rows[i]);
    int64_t st[2] = { c->total - 2, 0 }, n[2] = { 2, 1 };
    CHECK(dds_get_ranges(c->s, "ref", c->buf, st, n, 2) == DDS_OK, "get_ranges after %s", after);
    CHECK(c->buf[0] == value(c->total - 2, 0) && c->buf[ROW_WORDS] == value(c->total - 1, 0) &&
              c->buf[2 * ROW_WORDS] == value(0, 0),
          "after %s: ranges", after);
    CHECK(dds_epoch_begin(c->s) == DDS_OK, "epoch_begin after %s", after);
    CHECK(dds_get(c->s, "ref", c->buf, c->total - 1, 1) == DDS_OK &&
              c->buf[0] == value(c->total - 1, 0),
          "get in epoch after %s", after);
    CHECK(dds_epoch_end(c->s) == DDS_OK, "epoch_end after %s", after);
    int64_t nv = -1;
    CHECK(dds_var_count(c->s, &nv) == DDS_OK && nv == c->nvars,
          "after %s: %lld variables, expected %lld (a failed add left one behind?)", after,
          (long long)nv, (long long)c->nvars);
    if (c->reader) {
        memset(c->buf, 0, (size_t)(c->total * RB));
        CHECK(dds_get(c->reader, "ref", c->buf, 0, c->total) == DDS_OK, "reader get after %s", after);
        for (int64_t r = 0; r < c->total; r++)
            CHECK(c->buf[r * ROW_WORDS + 2] == value(r, 2), "after %s: reader row %lld", after,
                  (long long)r);
    }
    /* second store too */
    int64_t one = -1;
    CHECK(dds_get(c->s1, "only-in-s1", &one, 0, 1) == DDS_OK && one == 4242,
          "width-1 store after %s", after);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void setup(ctx *c)
{
    memset(c, 0, sizeof *c);
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const char *base = getenv("DDSTORE_HANDSHAKE_DIR");
    snprintf(hs_base, sizeof hs_base, "%s/badinput-%d", base ? base : "/tmp", pid);
    dds_options o;
    dds_options_init(&o);
    o.handshake_dir = hs_dir("main");
    OK(dds_create(&c->s, world_f(), &o));
    o.width = 1;
    o.handshake_dir = hs_dir("width1");
    OK(dds_create(&c->s1, world_f(), &o));
    int64_t v = 4242;
    OK(dds_add(c->s1, "only-in-s1", &v, 1, sizeof v, DDS_DTYPE_INT64));

    dds_store_info si = { .size = sizeof si };
    OK(dds_store_info_get(c->s, &si));
    /* Only method 0 synchronises batched reads, and not on its node
     * shared-memory fast path. */
    c->batch_agrees = si.method == 0 && !si.node_local;
    for (int g = 0; g < size; g++) {
        if (g < rank)
            c->first += rows_of(g);
        c->total += rows_of(g);
    }
    c->mine = rows_of(rank);
    c->local = malloc((size_t)(c->mine * RB));
    c->buf = malloc((size_t)((c->total + 8) * RB));
    for (int64_t i = 0; i < c->mine; i++)
        for (int w = 0; w < ROW_WORDS; w++)
            c->local[i * ROW_WORDS + w] = value(c->first + i, w);
    OK(dds_add(c->s, "ref", c->local, c->mine, RB, DDS_DTYPE_INT64));
    c->nvars = 1;

    if (si.method == 2)
        OK(dds_join(&c->reader, hs_dir("main"), size, 2.0));
    /* Last, so that no later store reuses its address (see
     * c_free_stale_handle_after_new_store). */
    dds_store *t = NULL;
    dds_options_init(&o);
    o.handshake_dir = hs_dir("freed");
    OK(dds_create(&t, world_f(), &o));
    OK(dds_free(t));
    c->freed = t;
}

/* Positive boundary checks next to the bad inputs (not counted as cases). */
static void boundaries(ctx *c)
{
    CHECK(dds_free(NULL) == DDS_OK, "free(NULL)");
    dds_options_init(NULL); /* documented as not NULL; must not crash either */
    CHECK(dds_last_error() != NULL, "last_error never NULL");
    CHECK(strcmp(dds_strerror(12345), dds_strerror(-12345)) == 0, "unknown codes share a text");
    for (int code = DDS_EMISMATCH; code <= DDS_OK; code++)
        CHECK(dds_strerror(code) && dds_strerror(code)[0], "strerror(%d)", code);
    char name[DDS_NAME_MAX + 1];
    memset(name, 'm', DDS_NAME_MAX);
    name[DDS_NAME_MAX] = '\0';
    OK(dds_add(c->s, name, c->local, c->mine, RB, DDS_DTYPE_INT64)); /* exactly 255 bytes */
    OK(dds_add(c->s, "na\xc3\xafve/\xe2\x82\xac/\xf0\x9f\x98\x80", c->local, c->mine, RB,
               DDS_DTYPE_INT64)); /* valid 2-, 3- and 4-byte UTF-8 */
    c->nvars += 2;
    char back[DDS_NAME_MAX + 1];
    OK(dds_var_name(c->s, c->nvars - 2, back, sizeof back));
    CHECK(strcmp(back, name) == 0, "255-byte name round trip");
    CHECK(dds_var_name(c->s, c->nvars - 2, back, DDS_NAME_MAX) == DDS_ERANGE, "one byte short");
    /* zero-row reads at the very end, NULL buffers allowed with zero rows */
    OK(dds_get(c->s, "ref", NULL, c->total, 0));
    OK(dds_get_batch(c->s, "ref", NULL, NULL, 0));
    OK(dds_get_ranges(c->s, "ref", NULL, NULL, NULL, 0));
    int64_t st = c->total, n = 0;
    OK(dds_get_ranges(c->s, "ref", NULL, &st, &n, 1));
    OK(dds_update(c->s, "ref", NULL, 0, c->mine));
    OK(dds_register_recv(c->s, NULL, 0));
    OK(dds_unregister_recv(c->s, NULL));
    OK(dds_attach(c->s, "ref")); /* reader-only call on a core store: known name is fine */
    /* ranks may hold zero rows, as long as the group holds some */
    OK(dds_add(c->s, "sparse", c->local, rank == 0 ? c->mine : 0, RB, DDS_DTYPE_INT64));
    c->nvars++;
    /* a name that failed before can be added once the call is right */
    OK(dds_add(c->s, "rb0", c->local, c->mine, RB, DDS_DTYPE_INT64));
    c->nvars++;
    verify_store(c, "boundaries");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *only = getenv("DDS_BADINPUT_ONLY");
    const char *kb = getenv("DDS_BADINPUT_KNOWN_BUGS");
    bool known_bugs = kb && strcmp(kb, "1") == 0;
    bool verbose = getenv("DDS_BADINPUT_VERBOSE") != NULL;
    size_t ncases = sizeof cases / sizeof cases[0];

    if (getenv("DDS_BADINPUT_LIST_KNOWN_BUGS")) {
        for (size_t i = 0; rank == 0 && i < ncases; i++)
            if (cases[i].flags & KNOWN_BUG)
                printf("%s\n", cases[i].name);
        MPI_Finalize();
        return 0;
    }

    ctx c;
    setup(&c);
    verify_store(&c, "setup");

    int ran = 0, skipped = 0, stale = 0;
    for (size_t i = 0; i < ncases; i++) {
        const bad_case *k = &cases[i];
        if (only && (only[0] == '=' ? strcmp(k->name, only + 1) != 0 : !strstr(k->name, only)))
            continue;
        bool skip = ((k->flags & KNOWN_BUG) && !known_bugs) || ((k->flags & OMPI_ONLY) && is_mpich()) ||
                    ((k->flags & MPICH_ONLY) && !is_mpich()) || ((k->flags & READER) && !c.reader);
        if (skip) {
            /* The reason is printed every time: a skip nobody reads is how a
             * mark outlives its bug. */
            if (rank == 0 && (k->flags & KNOWN_BUG))
                printf("test_badinput: skipped %s (known bug: %s; DDS_BADINPUT_KNOWN_BUGS=1 runs it)\n",
                       k->name, k->why);
            skipped++;
            continue;
        }
        /* A valid call clears the thread's message, so a non-empty message
         * afterwards was set by the case itself. */
        OK(dds_get(c.s, "ref", NULL, 0, 0));
        CHECK(dds_last_error()[0] == '\0', "message not cleared before %s", k->name);
        int expect = 12345;
        int rc = k->run(&c, &expect);
        CHECK(expect != 12345, "case %s set no expectation", k->name);

        int mine[2] = { rc, expect }, all[2 * 64];
        CHECK(size <= 64, "at most 64 ranks");
        MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
        bool good = true;
        for (int r = 0; r < size; r++)
            good = good && all[2 * r] == all[2 * r + 1];
        if (!good && rank == 0) {
            fprintf(stderr, "test_badinput: case %s: codes per rank (got/expected):", k->name);
            for (int r = 0; r < size; r++)
                fprintf(stderr, " %d:%d/%d", r, all[2 * r], all[2 * r + 1]);
            fprintf(stderr, "\n");
        }
        CHECK(rc == expect, "case %s: got %d (%s), expected %d (%s)", k->name, rc, dds_strerror(rc),
              expect, dds_strerror(expect));
        if (rc != DDS_OK)
            CHECK(dds_last_error()[0] != '\0', "case %s: empty dds_last_error()", k->name);
        if (verbose && rank == size - 1)
            printf("  %-32s rc=%-4d %s\n", k->name, rc, dds_last_error());
        verify_store(&c, k->name);
        ran++;
        if (k->flags & KNOWN_BUG) {
            if (rank == 0)
                printf("test_badinput: STALE MARK: %s is marked KNOWN_BUG but passes; remove the mark\n",
                       k->name);
            stale++;
        }
    }
    boundaries(&c);

    OK(dds_free(c.reader));
    OK(dds_free(c.s1));
    OK(dds_free(c.s));
    CHECK(dds_free(c.s) == DDS_ESTATE, "double free of the main store");
    free(c.local);
    free(c.buf);
    int total_ran = 0;
    MPI_Allreduce(&ran, &total_ran, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_badinput: %d ranks, %d bad-input cases passed (%d skipped), %d checks\n", size,
               ran, skipped, checks);
    MPI_Finalize();
    return stale ? 3 : 0;
}
