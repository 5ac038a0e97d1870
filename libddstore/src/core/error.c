/* Error codes, per-thread messages, version queries, small utilities. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "internal.h"
#include "version.h"

#define ERRBUF_LEN 1024

static _Thread_local char errbuf[ERRBUF_LEN];

DDS_API const char *dds_version(void) { return DDS_VERSION_STRING; }

DDS_API int dds_abi_version(void) { return DDS_ABI_MAJOR; }

DDS_API const char *dds_strerror(int code)
{
    switch (code) {
    case DDS_OK: return "success";
    case DDS_EINVAL: return "invalid argument";
    case DDS_ENOMEM: return "out of memory";
    case DDS_ENOENT: return "no such variable";
    case DDS_EEXIST: return "variable already exists";
    case DDS_ERANGE: return "rows out of range";
    case DDS_EMPI: return "MPI error";
    case DDS_EFABRIC: return "libfabric error";
    case DDS_ENOTSUP: return "not supported";
    case DDS_ESTATE: return "invalid state";
    case DDS_EPEER: return "failed on another rank";
    case DDS_ETIMEDOUT: return "timed out";
    case DDS_EIO: return "I/O error";
    case DDS_EPROTO: return "corrupt handshake data";
    case DDS_EOVERFLOW: return "size overflow";
    case DDS_EMISMATCH: return "ranks disagree";
    case DDS_EAGAIN: return "rows changed during every read attempt";
    default: return "unknown error";
    }
}

DDS_API const char *dds_last_error(void) { return errbuf; }

int dds_err(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return code;
}

int dds_err_mpi(int mpi_rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", mpi_rc);
    return dds_err(DDS_EMPI, "%s failed: %s", what, msg);
}

void dds_err_clear(void) { errbuf[0] = '\0'; }

char *dds_err_buf(size_t *len)
{
    *len = sizeof errbuf;
    return errbuf;
}

const char *dds_env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

bool dds_env_flag(const char *name, bool dflt)
{
    const char *v = dds_env(name);
    if (!v)
        return dflt;
    return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
             strcasecmp(v, "off") == 0);
}

void dds_debug(const char *fmt, ...)
{
    static int enabled = -1; /* benign race: every thread computes the same value */
    if (enabled < 0)
        enabled = dds_env_flag("DDSTORE_DEBUG", false);
    if (!enabled)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("[ddstore] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint64_t dds_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
