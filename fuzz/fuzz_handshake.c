/* libFuzzer harness for the method-2 handshake-file parser (dds_hs_parse in
 * libddstore/src/core/handshake.c): the only parser of bytes that come from
 * outside the process (files in a directory other jobs can read and, if
 * misconfigured, write).
 *
 * Each input is parsed twice:
 *   1. as it is, exactly as a reader would see the file on disk;
 *   2. with its length and checksum fields repaired (when it is long enough
 *      to hold a header), so that mutations reach the payload parser instead
 *      of stopping at the checksum.
 * Whenever a parse succeeds, the harness checks every promise of
 * handshake.h (counts and lengths within the limits, addresses inside the
 * parsed buffer, shard sizes within their registered memory, no overflow of
 * total rows x bytes per row, NUL-terminated bounded strings), and that
 * re-encoding the parsed file reproduces the input byte for byte (the
 * format is canonical, so anything else means a field was misread).
 * Any violation aborts, which libFuzzer reports as a crash.
 *
 * Build: meson, CC=clang -Dfuzz=enabled (tests/meson.build; tests/c/reliability.sh
 * does): -fsanitize=fuzzer,address,undefined
 * with handshake.c and error.c of libddstore. Seed corpus: fuzz/corpus/handshake
 * (real publications written by fuzz/gen_corpus.c through the encoder). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handshake.h"

#define REQUIRE(cond)                                                                      \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_handshake: invariant violated: %s (line %d)\n", #cond,  \
                    __LINE__);                                                             \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static int printable(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

static void check_store(const dds_hs_store *st, size_t len)
{
    REQUIRE(st->n_core >= 1 && st->n_core <= DDS_HS_MAX_CORE);
    REQUIRE(st->prov[0] != '\0' && printable(st->prov, DDS_HS_MAX_PROV));
    REQUIRE(printable(st->host, DDS_HS_MAX_HOST));
    REQUIRE(st->addr_len && st->addr && st->addr_buf);
    size_t used = 0;
    for (uint32_t i = 0; i < st->n_core; i++) {
        REQUIRE(st->addr_len[i] >= 1 && st->addr_len[i] <= DDS_HS_MAX_ADDR);
        REQUIRE(st->addr[i] >= st->addr_buf);
        size_t at = (size_t)(st->addr[i] - st->addr_buf);
        REQUIRE(at == used); /* addresses packed in order */
        used += st->addr_len[i];
        REQUIRE(used <= len);
        /* touch every byte: ASan catches a buffer shorter than promised */
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < st->addr_len[i]; k++)
            sink ^= st->addr[i][k];
        (void)sink;
    }
}

static void check_var(const dds_hs_var *v)
{
    REQUIRE(v->n_core >= 1 && v->n_core <= DDS_HS_MAX_CORE);
    size_t nlen = strnlen(v->name, DDS_NAME_MAX + 1);
    REQUIRE(nlen >= 1 && nlen <= DDS_NAME_MAX);
    REQUIRE(v->row_bytes >= 1);
    REQUIRE(v->shards);
    int64_t total = 0;
    for (uint32_t i = 0; i < v->n_core; i++) {
        const dds_hs_shard *sh = &v->shards[i];
        REQUIRE(sh->rows >= 0);
        REQUIRE(sh->len >= 1);
        REQUIRE(sh->rows == 0 || v->row_bytes <= INT64_MAX / sh->rows);
        REQUIRE((uint64_t)(sh->rows * v->row_bytes) <= sh->len);
        REQUIRE(sh->addr <= UINT64_MAX - sh->len);
        REQUIRE(sh->rows <= INT64_MAX - total);
        total += sh->rows;
    }
    REQUIRE(total == 0 || v->row_bytes <= INT64_MAX / total);
}

static void parse_and_check(const uint8_t *data, size_t size)
{
    dds_hs_file f;
    memset(&f, 0xa5, sizeof f); /* the parser must zero it itself */
    int rc = dds_hs_parse(data, size, &f);
    if (rc != DDS_OK) {
        REQUIRE(rc == DDS_EPROTO || rc == DDS_ENOMEM || rc == DDS_EINVAL);
        REQUIRE(dds_last_error()[0] != '\0');
        /* documented: nothing to release; clearing a zeroed struct is fine */
        REQUIRE(f.store.addr == NULL && f.store.addr_len == NULL && f.store.addr_buf == NULL &&
                f.var.shards == NULL);
        dds_hs_file_clear(&f);
        return;
    }
    REQUIRE(memcmp(f.run_id, data + 16, DDS_HS_RUN_ID_BYTES) == 0);
    uint8_t *enc = NULL;
    size_t elen = 0;
    int erc;
    if (f.kind == DDS_HS_KIND_STORE) {
        check_store(&f.store, size);
        erc = dds_hs_encode_store(f.run_id, &f.store, &enc, &elen);
    } else {
        REQUIRE(f.kind == DDS_HS_KIND_VAR);
        check_var(&f.var);
        erc = dds_hs_encode_var(f.run_id, &f.var, &enc, &elen);
    }
    REQUIRE(erc == DDS_OK);
    REQUIRE(elen == size);
    REQUIRE(memcmp(enc, data, size) == 0);
    free(enc);
    dds_hs_file_clear(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > ((size_t)1 << 20))
        return 0; /* the 64 MiB limit is checked by length alone; keep runs fast */
    parse_and_check(data, size);
    if (size >= DDS_HS_HEADER_BYTES) {
        uint8_t *copy = malloc(size);
        if (!copy)
            return 0;
        memcpy(copy, data, size);
        dds_hs_seal(copy, size); /* the library's own length + checksum */
        parse_and_check(copy, size);
        free(copy);
    }
    return 0;
}
