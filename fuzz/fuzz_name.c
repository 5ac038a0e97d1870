/* libFuzzer harness for the variable-name validator (dds_check_name in
 * libddstore/src/core/vartable.c): every name a user or a binding passes goes
 * through it before it is copied, compared or written into a handshake file.
 *
 * Differential: the library's answer must equal an independent validator
 * written from the Unicode standard's table of well-formed UTF-8 byte
 * sequences (Unicode 15, table 3-7), plus the length rule (1 to
 * DDS_NAME_MAX bytes before the first NUL). The input is used as a C
 * string (the API's type), so bytes after a NUL are ignored by both.
 * A disagreement or a non-empty/empty message mismatch aborts.
 *
 * Build: meson, CC=clang -Dfuzz=enabled (tests/meson.build; tests/c/reliability.sh
 * does): -fsanitize=fuzzer,address,undefined
 * with libddstore's sources (no MPI call is ever made). Seed corpus:
 * fuzz/corpus/name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Table 3-7: the only well-formed byte sequences. */
static int wellformed_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (b <= 0x7F) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b == 0xE0) {
            need = 2;
            lo = 0xA0;
        } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
            need = 2;
        } else if (b == 0xED) {
            need = 2;
            hi = 0x9F;
        } else if (b == 0xF0) {
            need = 3;
            lo = 0x90;
        } else if (b >= 0xF1 && b <= 0xF3) {
            need = 3;
        } else if (b == 0xF4) {
            need = 3;
            hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < need)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += need + 1;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *name = malloc(size + 1);
    if (!name)
        return 0;
    memcpy(name, data, size);
    name[size] = '\0';
    size_t n = strlen(name);
    int expect_ok = n >= 1 && n <= DDS_NAME_MAX && wellformed_utf8((const unsigned char *)name, n);
    dds_err_clear();
    int rc = dds_check_name(name);
    if ((rc == DDS_OK) != expect_ok || (rc != DDS_OK && rc != DDS_EINVAL)) {
        fprintf(stderr, "fuzz_name: dds_check_name gave %d for a %zu-byte name, reference says %s\n", rc,
                n, expect_ok ? "valid" : "invalid");
        abort();
    }
    if (rc != DDS_OK && dds_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz_name: error without a message\n");
        abort();
    }
    free(name);
    return 0;
}
