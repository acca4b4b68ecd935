#include "run.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dist.h"
#include "json.h"
#include "sha256.h"
#include "study_interp.h"
#include "study_prune.h"

/* The command line as a JSON array of strings (malloc'd): runs.args. */
static char *args_json(int argc, char **argv)
{
    size_t n = 3;
    for (int i = 0; i < argc; i++)
        n += 2 * strlen(argv[i]) + 4;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    *p++ = '[';
    for (int i = 0; i < argc; i++) {
        if (i)
            *p++ = ',';
        *p++ = '"';
        for (const char *c = argv[i]; *c; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = (unsigned char)*c < 0x20 ? ' ' : *c; /* control characters become spaces */
        }
        *p++ = '"';
    }
    *p++ = ']';
    *p = 0;
    return s;
}

/* The command line without the options that cannot change a result
 * (--resume and s's neutral ones), as JSON, each --opt=value spelt
 * --opt value: a resumed run must match its original on everything else,
 * however either spelt its options. */
static char *result_args(const hs_run_spec *s, int argc, char **argv)
{
    size_t bytes = 1;
    for (int i = 0; i < argc; i++)
        bytes += strlen(argv[i]) + 1;
    /* the arguments copied into copy, each --opt=value cut at its '=' */
    char **kept = calloc(2 * (size_t)argc + 1, sizeof *kept), *copy = malloc(bytes), *p = copy;
    int n = 0;
    for (int i = 0; kept && copy && i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int drop = len == 8 && !strncmp(a, "--resume", 8), value = drop;
        for (int k = 0; !drop && k < s->n_options; k++)
            if (s->options[k].neutral && strlen(s->options[k].name) == len &&
                !strncmp(a, s->options[k].name, len))
                drop = 1, value = s->options[k].takes_value;
        if (drop) {
            i += value && !eq; /* its value is the next argument */
            continue;
        }
        kept[n++] = strcpy(p, a);
        if (eq) {
            p[len] = 0;
            kept[n++] = p + len + 1;
        }
        p += strlen(a) + 1;
    }
    char *json = kept && copy ? args_json(n, kept) : NULL;
    free(kept);
    free(copy);
    return json;
}

/* result_args of a command line recorded as a JSON array of strings. */
static char *stored_result_args(const hs_run_spec *s, const char *json)
{
    cJSON *a = NULL;
    if (hs_json_parse(&a, json, strlen(json), "the run's recorded command line"))
        return NULL;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    char **argv = n >= 0 ? calloc((size_t)n + 1, sizeof *argv) : NULL;
    char *out = NULL;
    if (argv) {
        int ok = 1;
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_GetArrayItem(a, i);
            ok &= cJSON_IsString(e);
            argv[i] = ok ? e->valuestring : NULL;
        }
        out = ok ? result_args(s, n, argv) : NULL;
    }
    free(argv);
    cJSON_Delete(a);
    return out;
}

/* What a rank read: its model file's, config.json's, data's and options'
 * sha256 (each "" when the run has none; the model file as the run hashes
 * it, config.json beside it, which a sharded checkpoint has alone). */
enum { FP_MODEL, FP_CONFIG, FP_DATA, FP_ARGS, FP_COUNT };
typedef struct {
    char sha[FP_COUNT][65];
} fingerprint;

struct hs_run {
    hs_index *ix;
    long long run_id;
    char model_sha[80], data_sha[80];
    int hashed_model, hashed_data;
};

/* sha256 of path into hex: known's (the ranks' agreement hashed it) or read. */
static int hash_once(const char *path, const char *known, char hex[80])
{
    if (known && *known) {
        snprintf(hex, 80, "%s", known);
        return HS_OK;
    }
    return hs_sha256_file(path, hex, NULL);
}

/* Rank 0's part of hs_run_open: hash (what f, the ranks' agreement, has not
 * hashed already), open, insert or reopen. */
static int run_begin(hs_run *r, const hs_run_spec *s, const fingerprint *f)
{
    struct stat sb;
    if (s->resume > 0 && stat(s->db, &sb))
        return hs_fail(HS_EIO, "%s: no index to resume a run from (%s)", s->db, strerror(errno));
    int rc = s->model_file ? hash_once(s->model_file, f ? f->sha[FP_MODEL] : NULL, r->model_sha)
                           : HS_OK;
    r->hashed_model = s->model_file && !rc;
    if (!rc && s->data_path)
        rc = hash_once(s->data_path, f ? f->sha[FP_DATA] : NULL, r->data_sha);
    r->hashed_data = s->data_path && !rc;
    if (!rc)
        rc = hs_index_open(&r->ix, s->db);
    if (!rc && s->resume > 0) {
        char k[80], msha[80], dsha[80], status[16], args[4096];
        char *now = result_args(s, s->argc, s->argv), *then = NULL;
        const long long id = s->resume;
        rc = hs_index_run_get(r->ix, id, k, msha, dsha, status, args, sizeof args);
        if (!rc && strcmp(k, s->kind))
            rc = hs_fail(HS_EINVAL, "run %lld is a '%s' run, not '%s'", id, k, s->kind);
        else if (!rc && (strcmp(msha, r->model_sha) || strcmp(dsha, r->data_sha)))
            rc = hs_fail(HS_EINVAL, "run %lld was made with another model or data (sha256 "
                         "differs)", id);
        if (!rc && !(then = stored_result_args(s, args)))
            rc = hs_fail(HS_EFORMAT, "run %lld: its recorded command line is unreadable", id);
        else if (!rc && (!now || strcmp(then, now)))
            rc = hs_fail(HS_EINVAL, "run %lld was made with other options: %s (resume needs the "
                         "same ones, apart from --threads and --json)", id, args);
        free(now);
        free(then);
        if (!rc)
            rc = hs_index_run_reopen(r->ix, id);
        r->run_id = id;
    } else if (!rc) {
        char *args = args_json(s->argc, s->argv);
        hs_run_info info = { s->kind, s->model_path, s->model_file ? r->model_sha : NULL,
                             s->data_path, s->data_path ? r->data_sha : NULL, args };
        int64_t id = 0;
        rc = args ? hs_index_run_begin(r->ix, &info, &id) : HS_ENOMEM;
        r->run_id = id;
        free(args);
    }
    return rc;
}


static int fingerprint_of(fingerprint *f, const hs_run_spec *s)
{
    memset(f, 0, sizeof *f);
    int rc = HS_OK;
    if (s->model_file && !access(s->model_file, F_OK))
        rc = hs_sha256_file(s->model_file, f->sha[FP_MODEL], NULL);
    if (!rc && s->model_path) {
        char config[1100];
        snprintf(config, sizeof config, "%s/config.json", s->model_path);
        rc = access(config, F_OK) ? HS_OK : hs_sha256_file(config, f->sha[FP_CONFIG], NULL);
    }
    if (!rc && s->data_path)
        rc = hs_sha256_file(s->data_path, f->sha[FP_DATA], NULL);
    char *args = rc ? NULL : result_args(s, s->argc, s->argv);
    if (!rc && !args)
        rc = hs_fail(HS_ENOMEM, "run: the command line");
    if (!rc) {
        hs_sha256 h;
        hs_sha256_init(&h);
        hs_sha256_update(&h, args, strlen(args));
        hs_sha256_hex(&h, f->sha[FP_ARGS]);
    }
    free(args);
    return rc;
}

/* Under mpirun every rank must run on what rank 0 runs on: a rank with
 * another model, data or command line would compute other shapes than the
 * ones rank 0 gathers into (SPEC §12: N ranks give one process's result).
 * Each rank hashes its own files; rank 0 compares and names the first rank
 * that differs and in what. Costs a read of the model and data files on
 * every rank (rank 0's digests serve its run too). */
static int ranks_agree(const hs_run_spec *s, fingerprint *mine)
{
    const int n = hs_dist_size();
    fingerprint *all = hs_dist_rank() ? NULL : hs_calloc((size_t)n, sizeof *all, "ranks");
    int rc = fingerprint_of(mine, s);
    if (!rc && !hs_dist_rank() && !all)
        rc = HS_ENOMEM;
    if ((rc = hs_dist_gather(rc, mine, all, sizeof *mine)) || hs_dist_rank()) {
        free(all);
        return hs_dist_agree(rc);
    }
    static const char *const what[FP_COUNT] = { "model file", "config.json",
                                                 "data (or prompts)", "command line" };
    for (int r = 1; !rc && r < n; r++)
        for (int k = 0; !rc && k < FP_COUNT; k++) {
            const char *a = all[0].sha[k], *b = all[r].sha[k];
            if (strcmp(a, b))
                rc = hs_fail(HS_EINVAL, "rank %d of %d runs on another %s than rank 0 (sha256 "
                             "%.12s... against %.12s...): every rank needs the same inputs",
                             r, n, what[k], *b ? b : "(none)", *a ? a : "(none)");
        }
    free(all);
    return hs_dist_agree(rc);
}

/* path joined to the working directory when it is relative (malloc'd; NULL
 * for NULL or out of memory); "-" (a standard stream) as it is. Symbolic
 * links are kept as written. */
static char *absolute(const char *path)
{
    char cwd[PATH_MAX];
    if (!path || path[0] == '/' || !strcmp(path, "-") || !getcwd(cwd, sizeof cwd))
        return path ? strdup(path) : NULL;
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    const size_t n = strlen(cwd) + strlen(path) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s/%s", cwd, !strcmp(path, ".") ? "" : path);
    return out;
}

/* s's command line with every path option's value absolute (--opt value
 * and --opt=value), into argv (argc strings, each malloc'd). */
static int absolute_args(const hs_run_spec *s, char **argv)
{
    int path_next = 0;
    for (int i = 0; i < s->argc; i++) {
        const char *a = s->argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int path = 0;
        for (int k = 0; k < s->n_options && !strncmp(a, "--", 2); k++)
            path |= s->options[k].path && strlen(s->options[k].name) == len &&
                    !strncmp(a, s->options[k].name, len);
        char *abs = path_next || (path && eq) ? absolute(path_next ? a : eq + 1) : NULL;
        if (abs && eq) {
            const size_t n = len + strlen(abs) + 2;
            char *joined = malloc(n);
            if (joined)
                snprintf(joined, n, "%.*s=%s", (int)len, a, abs);
            free(abs);
            abs = joined;
        }
        argv[i] = abs ? abs : strdup(a);
        if (!argv[i])
            return HS_ENOMEM;
        path_next = path && !eq;
    }
    return HS_OK;
}

int hs_run_open(hs_run **out, const hs_run_spec *s)
{
    *out = NULL;
    fingerprint mine; /* under mpirun: what this rank read, hashed once */
    const int ranks = hs_dist_size() > 1;
    int rc = ranks ? ranks_agree(s, &mine) : HS_OK;
    if (rc)
        return rc;
    if (!s->db || hs_dist_rank() > 0) /* under mpirun rank 0 alone writes the index */
        return s->db ? hs_dist_agree(HS_OK) : HS_OK;
    /* recorded with absolute paths: model, data and the path options' values */
    hs_run_spec abs = *s;
    char **argv = hs_calloc((size_t)s->argc + 1, sizeof *argv, "command line");
    char *model = absolute(s->model_path), *data = absolute(s->data_path);
    rc = argv && (model || !s->model_path) && (data || !s->data_path) ? absolute_args(s, argv)
                                                                       : HS_ENOMEM;
    abs.argv = argv, abs.model_path = model, abs.data_path = data;
    hs_run *r = rc ? NULL : hs_calloc(1, sizeof *r, "run");
    rc = r ? run_begin(r, &abs, ranks ? &mine : NULL) : rc ? rc : HS_ENOMEM;
    for (int i = 0; argv && i < s->argc; i++)
        free(argv[i]);
    free(argv), free(model), free(data);
    if (rc && r) {
        hs_index_close(r->ix);
        free(r);
        r = NULL;
    }
    *out = r;
    return hs_dist_size() > 1 ? hs_dist_agree(rc) : rc;
}

long long hs_run_id(const hs_run *r) { return r ? r->run_id : 0; }

hs_index *hs_run_index(const hs_run *r) { return r ? r->ix : NULL; }

const char *hs_run_model_sha(const hs_run *r)
{
    return r && r->hashed_model ? r->model_sha : NULL;
}

const char *hs_run_data_sha(const hs_run *r) { return r && r->hashed_data ? r->data_sha : NULL; }

int hs_run_param(hs_run *r, const char *key, const char *value)
{
    return r ? hs_index_param_set(r->ix, r->run_id, key, value) : HS_OK;
}

int hs_run_position_labels(hs_run *r, const hs_prompt_set *ps, const hs_tokenizer *tk,
                           int vocab_size)
{
    int rc = HS_OK;
    for (int g = 0; r && !rc && g < ps->n_group; g++) {
        const hs_prompt_group *grp = &ps->group[g]; /* one length, prompts in file order */
        cJSON *a = grp->n ? cJSON_CreateArray() : NULL;
        for (int p = 0; a && p < grp->T; p++) {
            const int32_t id = grp->clean[p];
            char text[64];
            if (!(tk && !hs_tokenizer_token_text(tk, id, text, sizeof text))) {
                if (!tk && vocab_size == 256 && id > 0 && id < 128)
                    snprintf(text, sizeof text, "%c", (char)id);
                else
                    snprintf(text, sizeof text, "#%d", (int)id);
            }
            cJSON_AddItemToArray(a, cJSON_CreateString(text));
        }
        if (!grp->n)
            continue;
        char key[48], *json = a ? cJSON_PrintUnformatted(a) : NULL;
        snprintf(key, sizeof key, "positions_%d", grp->T);
        rc = json ? hs_run_param(r, key, json) : hs_fail(HS_ENOMEM, "run: position labels");
        free(json);
        cJSON_Delete(a);
    }
    return rc;
}

int hs_run_rows(hs_run *r, const hs_head_table *t, const hs_study_curve *curves, int n_curves)
{
    return r ? hs_study_record(r->ix, r->run_id, t, curves, n_curves) : HS_OK;
}

int hs_run_study_rows(hs_run *r, const hs_study_rows *rows)
{
    return r ? hs_study_rows_record(r->ix, r->run_id, rows) : HS_OK;
}

int hs_run_artifact(hs_run *r, const char *path, const char *sha256, long long bytes)
{
    if (!r)
        return HS_OK;
    return sha256 ? hs_index_artifact_add(r->ix, r->run_id, path, sha256, (int64_t)bytes, 1)
                  : hs_study_record_artifact(r->ix, r->run_id, path);
}

int hs_run_close(hs_run *r, int rc, const char *model_sha)
{
    if (!r)
        return rc;
    char prior[1024];
    snprintf(prior, sizeof prior, "%s", rc ? hs_last_error() : "");
    int end = hs_index_run_finish(r->ix, r->run_id, rc ? "failed" : "complete", model_sha);
    if (end) {
        /* One retry, as `failed`, after the lock or the space may have come back;
         * what still cannot be written is found `running` by a later open with
         * its process gone, and marked failed then (hs_index_open). */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hs_last_error());
        usleep(100000);
        hs_index_run_finish(r->ix, r->run_id, "failed", NULL);
        hs_fail(end, "%s (run %lld is not marked %s)", msg, r->run_id, rc ? "failed" : "complete");
    }
    hs_index_close(r->ix);
    free(r);
    if (rc && end)
        hs_fail(rc, "%s", prior);
    return rc ? rc : end;
}
