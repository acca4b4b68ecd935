#include "prompts.h"

#include "json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v is a token id: a whole number in [0, 2^31), tested before any cast
 * (1e300 cast to int32_t is undefined) */
static int is_id(double v) { return v >= 0 && v < 2147483648.0 && v == (double)(int32_t)v; }

/* One parsed line. */
typedef struct {
    int32_t *clean, *corrupt;
    int T;
    int32_t answer, wrong;
    int line;
} prompt;

int hs_json_ids(const cJSON *a, const char *key, const char *path, int line, int vocab,
                int32_t **ids, int *n)
{
    int len = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || len == 0)
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" must be a non-empty array of token ids", path,
                       line, key);
    *ids = hs_calloc((size_t)len, sizeof **ids, "prompt ids");
    if (!*ids)
        return HS_ENOMEM;
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!is_id(v))
            return hs_fail(HS_EFORMAT, "%s:%d: \"%s\"[%d] is not a token id", path, line, key, i);
        if (v >= vocab)
            return hs_fail(HS_EINVAL, "%s:%d: \"%s\"[%d] = %.0f is outside the vocabulary (%d)",
                           path, line, key, i, v, vocab);
        (*ids)[i] = (int32_t)v;
    }
    *n = len;
    return HS_OK;
}

static int one_id(const cJSON *v, const char *key, const char *path, int line, int vocab,
                  int32_t *id)
{
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!is_id(x))
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" must be a token id", path, line, key);
    if (x >= vocab)
        return hs_fail(HS_EINVAL, "%s:%d: \"%s\" = %.0f is outside the vocabulary (%d)", path, line,
                       key, x, vocab);
    *id = (int32_t)x;
    return HS_OK;
}

static int encode(const hs_tokenizer *tok, const cJSON *v, const char *key, const char *path,
                  int line, int special, int32_t **ids, int *n)
{
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" must be a non-empty string", path, line, key);
    size_t len;
    int rc = hs_tokenizer_encode(tok, v->valuestring, strlen(v->valuestring), special, ids, &len);
    if (rc)
        return hs_fail(rc, "%s:%d: \"%s\": %s", path, line, key, hs_last_error());
    if (len == 0 || len > 1u << 30)
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" encodes to no token", path, line, key);
    *n = (int)len;
    return HS_OK;
}

/* The first token of text encoded without special tokens. */
static int first_token(const hs_tokenizer *tok, const cJSON *v, const char *key, const char *path,
                       int line, int32_t *id)
{
    int32_t *ids = NULL;
    int n, rc = encode(tok, v, key, path, line, 0, &ids, &n);
    if (!rc)
        *id = ids[0];
    free(ids);
    return rc;
}

/* The column (from 1) of a NUL in a line of len bytes: a NUL byte, or a
 * \u0000 escape (not itself escaped, \\u0000). cJSON ends a string at
 * its first NUL, so such a prompt would be cut short in silence; 0: none. */
static size_t nul_column(const char *text, size_t len)
{
    size_t z = strlen(text);
    if (z < len)
        return z + 1;
    for (const char *u = text; (u = strstr(u, "\\u0000")); u++) {
        size_t at = (size_t)(u - text), k = 0; /* k: backslashes before this one */
        while (k < at && text[at - 1 - k] == '\\')
            k++;
        if (k % 2 == 0)
            return at + 1;
    }
    return 0;
}

static const char *const TEXT_KEYS[] = { "clean", "corrupt", "answer", "wrong" };
static const char *const ID_KEYS[] = { "clean_ids", "corrupt_ids", "answer_id", "wrong_id" };

static int parse_line(prompt *p, const char *text, size_t len, const hs_tokenizer *tok, int vocab,
                      const char *path, int line)
{
    memset(p, 0, sizeof *p);
    p->line = line;
    size_t nul = nul_column(text, len);
    if (nul)
        return hs_fail(HS_EFORMAT, "%s:%d: a NUL character at column %zu (a prompt is text without"
                       " NUL)", path, line, nul);
    char what[1100];
    snprintf(what, sizeof what, "%s:%d", path, line);
    cJSON *o = NULL;
    if (hs_json_parse(&o, text, len, what))
        return HS_EFORMAT;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return hs_fail(HS_EFORMAT, "%s:%d: not a JSON object", path, line);
    }
    int rc = HS_OK, has_text = 0, has_ids = 0;
    for (const cJSON *e = o->child; e && !rc; e = e->next) {
        int known = 0;
        for (int k = 0; k < 4; k++) {
            has_text += !strcmp(e->string, TEXT_KEYS[k]);
            has_ids += !strcmp(e->string, ID_KEYS[k]);
            known |= !strcmp(e->string, TEXT_KEYS[k]) || !strcmp(e->string, ID_KEYS[k]);
        }
        if (!known)
            rc = hs_fail(HS_EFORMAT, "%s:%d: unknown key \"%s\" (expected clean, corrupt, answer,"
                         " wrong or clean_ids, corrupt_ids, answer_id, wrong_id)", path, line,
                         e->string);
    }
    const char *const *keys = has_ids ? ID_KEYS : TEXT_KEYS;
    if (!rc && has_text && has_ids)
        rc = hs_fail(HS_EFORMAT, "%s:%d: mixes text keys and id keys", path, line);
    for (int k = 0; !rc && k < 4; k++)
        if (!cJSON_GetObjectItemCaseSensitive(o, keys[k]))
            rc = hs_fail(HS_EFORMAT, "%s:%d: missing \"%s\"", path, line, keys[k]);
    if (!rc && !has_ids && !tok)
        rc = hs_fail(HS_EFORMAT, "%s:%d: text prompts need a tokenizer (--tokenizer PATH, or a"
                     " tokenizer file in the model directory)", path, line);
    int nc = 0, nx = 0;
    const cJSON *v[4];
    for (int k = 0; k < 4; k++)
        v[k] = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
    if (!rc && has_ids) {
        rc = hs_json_ids(v[0], keys[0], path, line, vocab, &p->clean, &nc);
        if (!rc)
            rc = hs_json_ids(v[1], keys[1], path, line, vocab, &p->corrupt, &nx);
        if (!rc)
            rc = one_id(v[2], keys[2], path, line, vocab, &p->answer);
        if (!rc)
            rc = one_id(v[3], keys[3], path, line, vocab, &p->wrong);
    } else if (!rc) {
        rc = encode(tok, v[0], keys[0], path, line, 1, &p->clean, &nc);
        if (!rc)
            rc = encode(tok, v[1], keys[1], path, line, 1, &p->corrupt, &nx);
        if (!rc)
            rc = first_token(tok, v[2], keys[2], path, line, &p->answer);
        if (!rc)
            rc = first_token(tok, v[3], keys[3], path, line, &p->wrong);
        for (int i = 0; !rc && i < nc + nx; i++) {
            int32_t id = i < nc ? p->clean[i] : p->corrupt[i - nc];
            if (id >= vocab)
                rc = hs_fail(HS_EINVAL, "%s:%d: token id %d is outside the model's vocabulary"
                             " (%d)", path, line, id, vocab);
        }
        if (!rc && (p->answer >= vocab || p->wrong >= vocab))
            rc = hs_fail(HS_EINVAL, "%s:%d: the answer or wrong token is outside the model's"
                         " vocabulary (%d)", path, line, vocab);
    }
    if (!rc && nc != nx)
        rc = hs_fail(HS_EFORMAT, "%s:%d: clean has %d tokens and corrupt %d: they must be equal",
                     path, line, nc, nx);
    if (!rc && p->answer == p->wrong) { /* SPEC §21: a logit difference of 0 on every run */
        char text[48] = "", piece[64] = "";
        if (tok && !hs_tokenizer_token_text(tok, p->answer, text, sizeof text))
            snprintf(piece, sizeof piece, ", \"%s\"", text);
        rc = hs_fail(HS_EFORMAT, "%s:%d: the answer and wrong tokens are the same token (id %d%s):"
                     " their logit difference is 0 whatever the model does", path, line,
                     (int)p->answer, piece);
    }
    p->T = nc;
    cJSON_Delete(o);
    return rc;
}

static int by_length(const void *a, const void *b)
{
    const prompt *x = a, *y = b;
    return x->T != y->T ? (x->T > y->T) - (x->T < y->T) : (x->line > y->line) - (x->line < y->line);
}

/* Moves the sorted prompts into groups of equal length. */
static int group(hs_prompt_set *set, prompt *p, int n)
{
    qsort(p, (size_t)n, sizeof *p, by_length);
    int groups = 0;
    for (int i = 0; i < n; i++)
        groups += i == 0 || p[i].T != p[i - 1].T;
    set->group = hs_calloc((size_t)groups, sizeof *set->group, "prompt groups");
    if (!set->group)
        return HS_ENOMEM;
    for (int i = 0, j; i < n; i = j) {
        for (j = i; j < n && p[j].T == p[i].T; j++)
            ;
        hs_prompt_group *g = &set->group[set->n_group++];
        g->T = p[i].T;
        g->n = j - i;
        size_t nt = (size_t)g->n * (size_t)g->T;
        g->clean = hs_calloc(nt, sizeof *g->clean, "prompt tokens");
        g->corrupt = hs_calloc(nt, sizeof *g->corrupt, "prompt tokens");
        g->answer = hs_calloc((size_t)g->n, sizeof *g->answer, "prompt answers");
        g->wrong = hs_calloc((size_t)g->n, sizeof *g->wrong, "prompt answers");
        g->line = hs_calloc((size_t)g->n, sizeof *g->line, "prompt lines");
        if (!g->clean || !g->corrupt || !g->answer || !g->wrong || !g->line)
            return HS_ENOMEM;
        for (int k = 0; k < g->n; k++) {
            memcpy(g->clean + (size_t)k * g->T, p[i + k].clean, (size_t)g->T * sizeof *g->clean);
            memcpy(g->corrupt + (size_t)k * g->T, p[i + k].corrupt,
                   (size_t)g->T * sizeof *g->corrupt);
            g->answer[k] = p[i + k].answer;
            g->wrong[k] = p[i + k].wrong;
            g->line[k] = p[i + k].line;
        }
    }
    set->n = n;
    return HS_OK;
}

int hs_prompts_load(hs_prompt_set *set, const char *path, const hs_tokenizer *tok, int vocab_size,
                    int max_len)
{
    memset(set, 0, sizeof *set);
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return HS_EIO;
    prompt *p = NULL;
    int n = 0, cap = 0, line = 0, rc = HS_OK;
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t got;
    while (!rc && (got = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        if (strspn(buf, " \t\r\n") == (size_t)got)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            prompt *q = realloc(p, (size_t)cap * sizeof *p);
            if (!q) {
                rc = hs_fail(HS_ENOMEM, "%s: out of memory reading prompts", path);
                break;
            }
            p = q;
        }
        rc = parse_line(&p[n], buf, (size_t)got, tok, vocab_size, path, line);
        n++;
        if (!rc && max_len > 0 && p[n - 1].T > max_len)
            rc = hs_fail(HS_EINVAL, "%s:%d: %d tokens exceed the model's context of %d", path,
                         line, p[n - 1].T, max_len);
    }
    if (!rc && ferror(f))
        rc = hs_fail(HS_EIO, "%s: read error", path);
    if (!rc && n == 0)
        rc = hs_fail(HS_EFORMAT, "%s: no prompts (one JSON object a line)", path);
    fclose(f);
    free(buf);
    if (!rc)
        rc = group(set, p, n);
    for (int i = 0; i < n; i++) {
        free(p[i].clean);
        free(p[i].corrupt);
    }
    free(p);
    if (rc)
        hs_prompt_set_free(set);
    return rc;
}

void hs_prompt_set_free(hs_prompt_set *set)
{
    for (int i = 0; i < set->n_group; i++) {
        hs_prompt_group *g = &set->group[i];
        free(g->clean);
        free(g->corrupt);
        free(g->answer);
        free(g->wrong);
        free(g->line);
    }
    free(set->group);
    memset(set, 0, sizeof *set);
}
