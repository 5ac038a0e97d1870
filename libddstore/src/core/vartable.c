/* Ground floor: the variable table of a store and variable names. Name
 * checks, lookup and append under the store's vars_lock, and the owner of a
 * global row. Calls nothing of the library but error.c. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return false;
        if (i + k >= n)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

int dds_check_name(const char *name)
{
    if (!name)
        return dds_err(DDS_EINVAL, "variable name is NULL");
    size_t n = strnlen(name, DDS_NAME_MAX + 1);
    if (n == 0)
        return dds_err(DDS_EINVAL, "variable name is empty");
    if (n > DDS_NAME_MAX)
        return dds_err(DDS_EINVAL, "variable name is longer than %d bytes", DDS_NAME_MAX);
    if (!utf8_valid((const unsigned char *)name, n))
        return dds_err(DDS_EINVAL, "variable name is not valid UTF-8");
    return DDS_OK;
}

dds_var *dds_var_find(const dds_store *s, const char *name)
{
    dds_var *found = NULL;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&s->vars_lock);
    for (int64_t i = 0; i < s->nvars; i++)
        if (strcmp(s->vars[i]->name, name) == 0) {
            found = s->vars[i];
            break;
        }
    pthread_rwlock_unlock((pthread_rwlock_t *)&s->vars_lock);
    return found;
}

dds_var *dds_var_lookup(const dds_store *s, const char *name)
{
    if (dds_check_name(name) != DDS_OK)
        return NULL;
    dds_var *v = dds_var_find(s, name);
    if (!v)
        dds_err(DDS_ENOENT, "no variable named '%s' in this store", name);
    return v;
}

int dds_var_get(const dds_store *s, const char *name, dds_var **out)
{
    *out = dds_var_lookup(s, name);
    if (*out)
        return DDS_OK;
    return dds_check_name(name) ? DDS_EINVAL : DDS_ENOENT;
}

void dds_var_free(dds_var *v)
{
    if (!v)
        return;
    free(v->offsets);
    free(v->peer_base);
    free(v);
}

int dds_var_append(dds_store *s, dds_var *v)
{
    int rc = DDS_OK;
    pthread_rwlock_wrlock(&s->vars_lock);
    if (s->nvars == s->vars_cap) {
        int64_t cap = s->vars_cap ? 2 * s->vars_cap : 8;
        dds_var **nv = realloc(s->vars, (size_t)cap * sizeof *nv);
        if (!nv)
            rc = dds_err(DDS_ENOMEM, "out of memory adding variable '%s'", v->name);
        else {
            s->vars = nv;
            s->vars_cap = cap;
        }
    }
    if (rc == DDS_OK)
        s->vars[s->nvars++] = v;
    pthread_rwlock_unlock(&s->vars_lock);
    return rc;
}
