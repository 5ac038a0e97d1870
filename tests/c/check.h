/* Checks shared by the C tests.
 *
 * CHECK(cond, fmt, ...) counts a check; when cond is false it prints where
 * and why, with the library's last error, and ends the whole job:
 * MPI_Abort on an MPI rank (a failing rank must not leave the others
 * waiting in a collective), exit(1) in a process a test started outside
 * mpiexec (set check_in_reader there; it prints "reader <pid>").
 * OK(call) checks that a libddstore call returns DDS_OK.
 * The including test defines `int rank` (its rank in MPI_COMM_WORLD). */
#ifndef DDS_TEST_CHECK_H
#define DDS_TEST_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

static _Atomic int checks;   /* checks made so far (atomic: tests check from threads) */
static int check_in_reader; /* this process runs without MPI (started by a test) */

__attribute__((format(printf, 5, 6))) static void check_failed(int rank, const char *file, int line,
                                                                const char *cond, const char *fmt, ...)
{
    if (check_in_reader)
        fprintf(stderr, "reader %d: %s:%d: check failed: %s: ", (int)getpid(), file, line, cond);
    else
        fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " [last error: %s]\n", dds_last_error());
    fflush(stderr);
    if (check_in_reader)
        exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        checks++;                                                        \
        if (!(cond))                                                     \
            check_failed(rank, __FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

#define OK(call) CHECK((call) == DDS_OK, "%s", #call)

#endif /* DDS_TEST_CHECK_H */
