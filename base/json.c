#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

static int by_key(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* The first repeated key of any object in v, searched depth first: HS_OK,
 * or HS_EFORMAT naming it and where (path: the keys and indices leading to
 * v, "" at the top). */
static int check_unique(const cJSON *v, char *path, size_t cap, const char *what)
{
    const size_t len = strlen(path);
    int rc = HS_OK, k = 0;
    if (cJSON_IsObject(v)) {
        const int n = cJSON_GetArraySize(v);
        const cJSON **keys = n > 1 ? malloc((size_t)n * sizeof *keys) : NULL;
        if (n > 1 && !keys)
            return hs_fail(HS_ENOMEM, "%s: out of memory checking its keys", what);
        for (const cJSON *c = v->child; keys && c; c = c->next)
            keys[k++] = c;
        if (keys)
            qsort(keys, (size_t)n, sizeof *keys, by_key);
        for (int i = 1; keys && i < n && !rc; i++)
            if (!by_key(&keys[i - 1], &keys[i]))
                rc = hs_fail(HS_EFORMAT, "%s: key \"%.200s\" is repeated in %s%s%s (Python "
                             "would keep its last value, cJSON its first: refused)", what,
                             keys[i]->string, *path ? "\"" : "the top-level object",
                             path, *path ? "\"" : "");
        free(keys);
    }
    k = 0;
    for (const cJSON *c = cJSON_IsObject(v) || cJSON_IsArray(v) ? v->child : NULL; c && !rc;
         c = c->next, k++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c))
            continue;
        if (cJSON_IsObject(v))
            snprintf(path + len, cap - len, "%s%.80s", len ? "." : "", c->string);
        else
            snprintf(path + len, cap - len, "[%d]", k);
        rc = check_unique(c, path, cap, what);
        path[len] = 0;
    }
    return rc;
}

int hs_json_parse(cJSON **out, const char *text, size_t n, const char *what)
{
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        const size_t off = at && at >= text && at <= text + n ? (size_t)(at - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off; i++)
            line += text[i] == '\n';
        return hs_fail(HS_EFORMAT, "%s: not valid JSON (line %d, byte %zu)", what, line, off);
    }
    size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : n;
    while (off < n && strchr(" \t\r\n", text[off]) && text[off])
        off++;
    if (off < n) {
        cJSON_Delete(root);
        return hs_fail(HS_EFORMAT, "%s: text after the JSON value at byte %zu (one value is "
                       "read, whole)", what, off);
    }
    char path[512] = "";
    int rc = check_unique(root, path, sizeof path, what);
    if (rc)
        cJSON_Delete(root);
    else
        *out = root;
    return rc;
}
