/* The viewer's feature page data (viewer_export.h): a features file (SPEC
 * §19) and its run's rows in the index, as data.js. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "maps.h"
#include "viewer_export.h"

/* SPEC §19's metric names (analyze/metrics.c's, which store/ does not include). */
static const char FREQUENCY[] = "frequency", MEAN_ACT[] = "mean_act", HEAD_SHARE[] = "head_share";

/* Tokens shown around an example: this many before it (itself included)
 * and after it. */
enum { CTX_BEFORE = 64, CTX_AFTER = 8 };

/* One sequence's tokens, strings and CSR rows, read when an example needs them. */
typedef struct {
    long long seq;
    int32_t *tok;
    char **text;           /* NULL without /token_text */
    long long *indptr;
    int32_t *idx;
    float *val;
} seq_cache;

static void cache_drop(seq_cache *c, int T)
{
    hs_maps_free_token_text(c->text, c->text ? T : 0);
    free(c->text), free(c->tok), free(c->indptr), free(c->idx), free(c->val);
    memset(c, 0, sizeof *c);
    c->seq = -1;
}

static int cache_load(seq_cache *c, hs_maps_reader *r, long long seq)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    const int T = in->seq_len;
    if (c->seq == seq)
        return HS_OK;
    cache_drop(c, T);
    c->tok = calloc((size_t)T, sizeof *c->tok);
    c->indptr = calloc((size_t)T + 1, sizeof *c->indptr);
    c->text = in->has_token_text ? calloc((size_t)T, sizeof *c->text) : NULL;
    if (!c->tok || !c->indptr || (in->has_token_text && !c->text))
        return hs_fail(HS_ENOMEM, "out of memory for the viewer's features");
    int rc = hs_maps_read_tokens(r, seq, c->tok);
    if (!rc && c->text)
        rc = hs_maps_read_token_text(r, seq, c->text);
    if (!rc)
        rc = hs_maps_read_features(r, seq, c->indptr, &c->idx, &c->val);
    if (!rc)
        c->seq = seq;
    return rc;
}

/* A token's display string: the file's, a byte of a byte-level model, or its id. */
static cJSON *token_string(const seq_cache *c, int t, int byte_level)
{
    char buf[32];
    if (c->text)
        return cJSON_CreateString(c->text[t]);
    if (byte_level && c->tok[t] >= 32 && c->tok[t] < 127)
        snprintf(buf, sizeof buf, "%c", (char)c->tok[t]);
    else if (byte_level)
        snprintf(buf, sizeof buf, c->tok[t] == 10 ? "\\n" : "\\x%02x", (unsigned)c->tok[t]);
    else
        snprintf(buf, sizeof buf, "%d", (int)c->tok[t]);
    return cJSON_CreateString(buf);
}

/* Feature f's value at token t of the cached sequence (0 where inactive). */
static double feature_at(const seq_cache *c, int t, int f)
{
    for (long long i = c->indptr[t]; i < c->indptr[t + 1]; i++)
        if (c->idx[i] == f)
            return c->val[i];
    return 0;
}

/* One example: its window of tokens, f's activation on each, and its DFA
 * (heads x window) from rows (the feature's, ordered by seq, position). */
static cJSON *example_json(const seq_cache *c, const hs_feature_example_row *ex, int T, int H,
                           int byte_level, const hs_feature_dfa_row *dfa, int n_dfa)
{
    const int start = ex->position + 1 > CTX_BEFORE ? ex->position + 1 - CTX_BEFORE : 0;
    const int end = ex->position + CTX_AFTER < T ? ex->position + CTX_AFTER : T;
    cJSON *o = cJSON_CreateObject(), *toks = cJSON_CreateArray(), *acts = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "seq", (double)ex->seq);
    cJSON_AddNumberToObject(o, "pos", ex->position);
    cJSON_AddNumberToObject(o, "value", ex->value);
    cJSON_AddNumberToObject(o, "start", start);
    for (int t = start; t < end; t++) {
        cJSON_AddItemToArray(toks, token_string(c, t, byte_level));
        cJSON_AddItemToArray(acts, cJSON_CreateNumber(feature_at(c, t, ex->feature)));
    }
    cJSON_AddItemToObject(o, "tokens", toks);
    cJSON_AddItemToObject(o, "acts", acts);
    if (H <= 0 || !n_dfa)
        return o;
    double *grid = calloc((size_t)H * (end - start), sizeof *grid);
    double outside = 0; /* attribution through sources before the window */
    int found = 0;
    for (int i = 0; grid && i < n_dfa; i++) {
        const hs_feature_dfa_row *d = &dfa[i];
        if (d->seq != ex->seq || d->position != ex->position || d->head >= H)
            continue;
        found = 1;
        if (d->source >= start && d->source < end)
            grid[(size_t)d->head * (end - start) + (d->source - start)] += d->value;
        else
            outside += d->value;
    }
    if (grid && found) {
        cJSON *rows = cJSON_CreateArray();
        for (int h = 0; h < H; h++)
            cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(grid + (size_t)h * (end - start),
                                                               end - start));
        cJSON_AddItemToObject(o, "dfa", rows);
        cJSON_AddNumberToObject(o, "dfa_outside", outside);
    }
    free(grid);
    return o;
}

/* Per feature its metric's value (NAN where absent) into v (d_sae). */
static int feature_values(hs_index *ix, long long run, const char *metric, double *v, int d_sae,
                          int H, double *share)
{
    hs_feature_row *rows;
    int n, rc = hs_index_feature_metric(ix, run, metric, &rows, &n);
    for (int i = 0; !rc && i < n; i++) {
        const hs_feature_row *r = &rows[i];
        if (r->feature < 0 || r->feature >= d_sae)
            continue;
        if (share && r->head >= 0 && r->head < H)
            share[(size_t)r->feature * H + r->head] = r->value;
        else if (!share && r->head < 0)
            v[r->feature] = r->value;
    }
    free(rows);
    return rc;
}

/* The features array: every feature with an example, in id order. */
static int features_json(cJSON *arr, hs_maps_reader *r, hs_index *ix, long long run, int H,
                         int *count)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    const int d = in->d_sae, T = in->seq_len, byte_level = in->vocab_size == 256;
    double *freq = malloc(sizeof *freq * d), *mean = malloc(sizeof *mean * d);
    double *share = H > 0 ? malloc(sizeof *share * (size_t)d * H) : NULL;
    hs_feature_example_row *ex = NULL;
    int n_ex = 0, rc = freq && mean && (H <= 0 || share) ? HS_OK : HS_ENOMEM;
    for (int f = 0; !rc && f < d; f++)
        freq[f] = mean[f] = NAN;
    for (size_t i = 0; !rc && share && i < (size_t)d * H; i++)
        share[i] = NAN;
    if (!rc)
        rc = feature_values(ix, run, FREQUENCY, freq, d, H, NULL);
    if (!rc)
        rc = feature_values(ix, run, MEAN_ACT, mean, d, H, NULL);
    if (!rc && share)
        rc = feature_values(ix, run, HEAD_SHARE, NULL, d, H, share);
    if (!rc)
        rc = hs_index_feature_examples(ix, run, &ex, &n_ex);
    seq_cache c = { .seq = -1 };
    for (int i = 0; !rc && i < n_ex;) {
        const int f = ex[i].feature;
        int j = i;
        while (j < n_ex && ex[j].feature == f)
            j++;
        hs_feature_dfa_row *dfa = NULL;
        int n_dfa = 0;
        if (f >= 0 && f < d && H > 0)
            rc = hs_index_feature_dfa(ix, run, f, &dfa, &n_dfa);
        cJSON *o = cJSON_CreateObject(), *exs = cJSON_CreateArray();
        cJSON_AddNumberToObject(o, "id", f);
        cJSON_AddNumberToObject(o, "frequency", f < d ? freq[f] : NAN);
        cJSON_AddNumberToObject(o, "mean_act", f < d ? mean[f] : NAN);
        if (share && f < d)
            cJSON_AddItemToObject(o, "head_share", cJSON_CreateDoubleArray(share + (size_t)f * H, H));
        for (int k = i; !rc && k < j; k++)
            if (ex[k].seq < in->n_seq && ex[k].position < T && !(rc = cache_load(&c, r, ex[k].seq)))
                cJSON_AddItemToArray(exs, example_json(&c, &ex[k], T, H, byte_level, dfa, n_dfa));
        cJSON_AddItemToObject(o, "examples", exs);
        cJSON_AddItemToArray(arr, o);
        (*count)++;
        free(dfa);
        i = j;
    }
    cache_drop(&c, T);
    free(freq), free(mean), free(share), free(ex);
    return rc;
}

int hs_viewer_features_data(FILE *f, const char *tmp, hs_maps_reader *r, hs_index *ix,
                            long long run, const char *source, int *count)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    *count = 0;
    /* the hook's heads: a hook_z SAE's head_share rows say how many */
    hs_feature_row *rows;
    int n, H = 0, rc = hs_index_feature_metric(ix, run, HEAD_SHARE, &rows, &n);
    for (int i = 0; !rc && i < n; i++)
        H = rows[i].head + 1 > H ? rows[i].head + 1 : H;
    if (!rc)
        free(rows);
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "format", "headscope-viewer");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "mode", "features");
    cJSON_AddStringToObject(root, "source", source);
    cJSON_AddNumberToObject(root, "run_id", (double)run);
    cJSON_AddStringToObject(root, "hook", in->features_hook);
    cJSON_AddNumberToObject(root, "d_sae", in->d_sae);
    cJSON_AddNumberToObject(root, "seq_len", in->seq_len);
    cJSON_AddNumberToObject(root, "heads", H);
    cJSON_AddStringToObject(root, "token_source", in->has_token_text ? "token_text"
                                                  : in->vocab_size == 256 ? "bytes" : "ids");
    if (!rc)
        rc = features_json(arr, r, ix, run, H, count);
    cJSON_AddItemToObject(root, "features", arr);
    char *txt = rc ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!rc && !txt)
        rc = hs_fail(HS_ENOMEM, "viewer index");
    if (!rc && fprintf(f, "HS_DATA = %s;\n", txt) < 0)
        rc = hs_fail(HS_EIO, "%s: write failed: %s", tmp, strerror(errno));
    free(txt);
    return rc;
}
