/* Writes the seed corpus of the fuzz harnesses: real handshake publications
 * produced by libddstore's own encoder (so the seeds follow the format as
 * the library writes it today), plus edge cases around the limits, and
 * variable names for fuzz_name.
 *
 * Usage: gen_corpus <corpus-dir>   (writes the handshake and name sub-directories)
 * Rerun it when the handshake format changes (tests/c/reliability.sh does,
 * into a scratch copy, before fuzzing). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "handshake.h"

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* An encoder's result (rc, out[0..len)) written as dir/name, or exit. */
static void write_encoded(const char *dir, const char *name, int rc, uint8_t *out, size_t len, const char *what)
{
    if (rc != DDS_OK) {
        fprintf(stderr, "gen_corpus: encode %s: %s\n", what, dds_last_error());
        exit(1);
    }
    write_file(dir, name, out, len);
    free(out);
}

static void store_seed(const char *dir, const char *name, uint32_t n_core, const char *prov,
                       const char *host, uint16_t alen)
{
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    for (int i = 0; i < DDS_HS_RUN_ID_BYTES; i++)
        run_id[i] = (uint8_t)(0x10 + i);
    dds_hs_store st;
    memset(&st, 0, sizeof st);
    st.n_core = n_core;
    st.group_index = n_core > 1 ? 1 : 0;
    st.addr_format = 1;
    st.pid = 4242;
    st.mr_mode = 0x1f;
    st.start_time = 123456789;
    snprintf(st.prov, sizeof st.prov, "%s", prov);
    snprintf(st.host, sizeof st.host, "%s", host);
    st.addr_len = calloc(n_core, sizeof *st.addr_len);
    st.addr = calloc(n_core, sizeof *st.addr);
    uint8_t *buf = malloc((size_t)n_core * alen);
    for (uint32_t i = 0; i < n_core; i++) {
        st.addr_len[i] = alen;
        st.addr[i] = buf + (size_t)i * alen;
        for (uint16_t k = 0; k < alen; k++)
            st.addr[i][k] = (uint8_t)(i * 31 + k);
    }
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = dds_hs_encode_store(run_id, &st, &out, &len);
    write_encoded(dir, name, rc, out, len, "store");
    free(buf);
    free(st.addr);
    free(st.addr_len);
}

static void var_seed(const char *dir, const char *name, const char *vname, uint32_t n_core,
                     int64_t row_bytes, int64_t rows)
{
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    for (int i = 0; i < DDS_HS_RUN_ID_BYTES; i++)
        run_id[i] = (uint8_t)(0x10 + i);
    dds_hs_var v;
    memset(&v, 0, sizeof v);
    v.index = 3;
    v.dtype = 11;
    v.row_bytes = row_bytes;
    v.n_core = n_core;
    snprintf(v.name, sizeof v.name, "%s", vname);
    v.shards = calloc(n_core, sizeof *v.shards);
    for (uint32_t i = 0; i < n_core; i++) {
        v.shards[i].rows = i == 1 ? 0 : rows + i;
        v.shards[i].len = (uint64_t)((v.shards[i].rows ? v.shards[i].rows : 1) * row_bytes);
        v.shards[i].addr = 0x7f0000000000ull + 0x100000ull * i;
        v.shards[i].key = 0xabc0 + i;
    }
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = dds_hs_encode_var(run_id, &v, &out, &len);
    write_encoded(dir, name, rc, out, len, "var");
    free(v.shards);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus <corpus-dir>\n");
        return 2;
    }
    char hs[4096], nm[4096];
    snprintf(hs, sizeof hs, "%s/handshake", argv[1]);
    snprintf(nm, sizeof nm, "%s/name", argv[1]);
    mkdir(argv[1], 0755);
    mkdir(hs, 0755);
    mkdir(nm, 0755);

    store_seed(hs, "store-1rank-tcp", 1, "tcp", "node001", 16);
    store_seed(hs, "store-4rank-shm", 4, "shm", "localhost", 24);
    store_seed(hs, "store-3rank-verbs", 3, "verbs;ofi_rxm", "a-host.example.org", 3);
    store_seed(hs, "store-2rank-emptyhost", 2, "cxi", "", 64);
    var_seed(hs, "var-int64", "label/record_array", 4, 24, 5);
    var_seed(hs, "var-bytes", "x", 1, 1, 1000);
    var_seed(hs, "var-utf8", "na\xc3\xafve/\xe2\x82\xac", 3, 8, 2);
    var_seed(hs, "var-bigrows", "big", 2, 1 << 20, 1 << 12);

    static const char *names[] = {
        "x", "label/record_array", "label/key", "trainset/x", "na\xc3\xafve", "\xe2\x82\xac",
        "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82",
        "\xf4\x90\x80\x80", "\xff", "\x80", "a\x01" "b",
    };
    char fname[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(fname, sizeof fname, "name-%02zu", i);
        write_file(nm, fname, names[i], strlen(names[i]));
    }
    char longname[DDS_NAME_MAX + 2];
    memset(longname, 'a', sizeof longname);
    write_file(nm, "name-255", longname, DDS_NAME_MAX);
    write_file(nm, "name-256", longname, DDS_NAME_MAX + 1);
    printf("gen_corpus: seeds written under %s\n", argv[1]);
    return 0;
}
