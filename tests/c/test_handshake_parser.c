/* Test of the method-2 handshake parser (dds_hs_parse, handshake.c) under a
 * fixed mutation stream; also a fuzz harness.
 *
 * Built with -DDDS_LIBFUZZER (clang -fsanitize=fuzzer,address) it is a
 * libFuzzer target. Built plainly (best with -fsanitize=address,undefined)
 * it is a deterministic test: valid store and variable files made by the
 * encoder must parse back to what was encoded, then a fixed-seed stream of
 * mutations (bit flips, byte overwrites, truncation, extension, absurd
 * counts, with and without a repaired length and checksum) is parsed from
 * exact-size heap copies, so any read past the input is caught. Every input
 * must either parse or be rejected with DDS_EPROTO; nothing else is allowed.
 *
 * It links handshake.c and error.c directly (the parser is not exported).
 * Usage: test_handshake_parser [iterations]   (default 200000) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handshake.h"

static int check_one(const uint8_t *data, size_t len)
{
    /* An exact-size copy: a sanitizer sees any access beyond it. */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return 0;
    if (len)
        memcpy(copy, data, len);
    dds_hs_file f;
    int rc = dds_hs_parse(copy, len, &f);
    if (rc == DDS_OK) {
        /* Touch everything the parser claims is there. */
        volatile uint64_t sink = 0;
        if (f.kind == DDS_HS_KIND_STORE) {
            for (uint32_t i = 0; i < f.store.n_core; i++)
                for (uint16_t j = 0; j < f.store.addr_len[i]; j++)
                    sink += f.store.addr[i][j];
        } else {
            for (uint32_t i = 0; i < f.var.n_core; i++)
                sink += (uint64_t)f.var.shards[i].rows + f.var.shards[i].len;
        }
        (void)sink;
        dds_hs_file_clear(&f);
    }
    free(copy);
    return rc;
}

#ifdef DDS_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = check_one(data, size);
    if (rc != DDS_OK && rc != DDS_EPROTO && rc != DDS_ENOMEM)
        abort();
    return 0;
}
#else

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Length and checksum repaired with the library's own (handshake_sum.h). */
static void repair(uint8_t *p, size_t len)
{
    if (len >= DDS_HS_HEADER_BYTES)
        dds_hs_seal(p, len);
}

#define FAIL(...)                            \
    do {                                     \
        fprintf(stderr, "test_handshake_parser: "); \
        fprintf(stderr, __VA_ARGS__);        \
        fprintf(stderr, "\n");               \
        return 1;                            \
    } while (0)

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    uint8_t run[DDS_HS_RUN_ID_BYTES] = { 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

    dds_hs_store st = { .n_core = 3, .addr_format = 5, .pid = 4242, .mr_mode = 0x10, .start_time = 123456,
                        .prov = "tcp;ofi_rxm", .host = "node-17" };
    uint16_t alen[3] = { 16, 7, 300 };
    uint8_t a0[16], a1[7], a2[300];
    memset(a0, 0xA0, sizeof a0);
    memset(a1, 0xA1, sizeof a1);
    memset(a2, 0xA2, sizeof a2);
    uint8_t *addr[3] = { a0, a1, a2 };
    st.addr_len = alen;
    st.addr = addr;
    uint8_t *sb;
    size_t sl;
    if (dds_hs_encode_store(run, &st, &sb, &sl))
        FAIL("encode store: %s", dds_last_error());

    dds_hs_var var = { .index = 3, .dtype = 11, .row_bytes = 12, .n_core = 3, .name = "label/record_array" };
    dds_hs_shard sh[3] = { { 5, 4096, 7, 60 }, { 0, 8192, 8, 1 }, { 2, 0, 9, 24 } };
    var.shards = sh;
    uint8_t *vb;
    size_t vl;
    if (dds_hs_encode_var(run, &var, &vb, &vl))
        FAIL("encode var: %s", dds_last_error());

    /* Round trips. */
    dds_hs_file f;
    if (dds_hs_parse(sb, sl, &f) || f.kind != DDS_HS_KIND_STORE || f.store.n_core != 3 ||
        f.store.addr_len[2] != 300 || memcmp(f.store.addr[1], a1, 7) || strcmp(f.store.prov, st.prov) ||
        strcmp(f.store.host, st.host) || f.store.pid != 4242 || f.store.start_time != 123456 ||
        memcmp(f.run_id, run, sizeof run))
        FAIL("store round trip: %s", dds_last_error());
    dds_hs_file_clear(&f);
    if (dds_hs_parse(vb, vl, &f) || f.kind != DDS_HS_KIND_VAR || f.var.index != 3 || f.var.dtype != 11 ||
        f.var.row_bytes != 12 || strcmp(f.var.name, var.name) || f.var.shards[0].rows != 5 ||
        f.var.shards[1].addr != 8192 || f.var.shards[2].key != 9)
        FAIL("var round trip: %s", dds_last_error());
    dds_hs_file_clear(&f);

    /* Mutations. */
    size_t cap = (sl > vl ? sl : vl) + 64;
    uint8_t *buf = malloc(cap);
    long parsed = 0, rejected = 0;
    for (long it = 0; it < iters; it++) {
        const uint8_t *src = (it & 1) ? sb : vb;
        size_t n = (it & 1) ? sl : vl;
        memcpy(buf, src, n);
        int muts = 1 + (int)(next() % 4);
        for (int m = 0; m < muts; m++) {
            switch (next() % 5) {
            case 0:
                buf[next() % n] ^= (uint8_t)(1u << (next() % 8));
                break;
            case 1:
                buf[next() % n] = (uint8_t)next();
                break;
            case 2:
                n = (size_t)(next() % (n + 1));
                break;
            case 3: {
                size_t k = 1 + (size_t)(next() % 16);
                if (n + k <= cap) {
                    for (size_t i = 0; i < k; i++)
                        buf[n + i] = (uint8_t)next();
                    n += k;
                }
                break;
            }
            default:
                /* An absurd or borderline 32-bit count anywhere in the payload. */
                if (n >= DDS_HS_HEADER_BYTES + 4) {
                    size_t off = DDS_HS_HEADER_BYTES + (size_t)(next() % (n - DDS_HS_HEADER_BYTES - 3));
                    uint32_t x = (next() & 1) ? (uint32_t)next() : (uint32_t)(next() % 70000);
                    memcpy(buf + off, &x, 4);
                }
                break;
            }
            if (n == 0)
                break;
        }
        if (next() % 4 != 0)
            repair(buf, n); /* get past the header checks to the payload */
        int rc = check_one(buf, n);
        if (rc == DDS_OK)
            parsed++;
        else if (rc == DDS_EPROTO)
            rejected++;
        else
            FAIL("iteration %ld: unexpected code %d (%s)", it, rc, dds_last_error());
    }
    free(buf);
    free(sb);
    free(vb);
    printf("test_handshake_parser: %ld inputs, %ld parsed, %ld rejected with DDS_EPROTO\n", iters, parsed, rejected);
    return 0;
}
#endif
