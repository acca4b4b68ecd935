#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "dist.h"
#include "index.h"
#include "sha256.h"
#include "study.h"

volatile sig_atomic_t cli_stop_requested = 0;
const command *cli_current = NULL;

int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "headscope: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'headscope help %s')\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

int run_error(const char *cmd)
{
    fprintf(stderr, "headscope: %s: %s\n", cmd, hs_last_error());
    return EXIT_FAILURE_RUN;
}

static int parse_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return errno || end == s || *end || !isfinite(*v) ? -1 : 0;
}

/* The index of the option named by the first len characters of name, or -1. */
static int opt_index(const opt *opts, int nopts, const char *name, size_t len)
{
    for (int k = 0; k < nopts; k++)
        if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len))
            return k;
    return -1;
}

/* Stores value v of option o: 0, or the usage error's exit status. */
static int set_value(const char *cmd, opt *o, const char *v)
{
    if (o->kind == OPT_STR) {
        *(const char **)o->dst = v;
        return 0;
    }
    double x;
    int integral = o->kind == OPT_INT || o->kind == OPT_LONG;
    if (parse_number(v, &x) || x < o->min || (integral && x != floor(x)) ||
        (o->kind == OPT_INT && x > 2147483647.0) || (o->kind == OPT_LONG && x > 9e18))
        return usage_error(cmd, "option %s: '%s' is not %s >= %g", o->name, v,
                           integral ? "an integer" : "a number", o->min);
    if (o->kind == OPT_INT)
        *(int *)o->dst = (int)x;
    else if (o->kind == OPT_LONG)
        *(long *)o->dst = (long)x;
    else
        *(double *)o->dst = x;
    return 0;
}

static int opt_seen(const opt *opts, int nopts, const char *name, size_t len)
{
    const int k = opt_index(opts, nopts, name, len);
    return k >= 0 && opts[k].seen;
}

/* r->option as the messages say it: "--val|--val-text" -> "--val or --val-text". */
static void rule_option_name(char *out, size_t n, const char *option)
{
    size_t k = 0;
    for (const char *p = option; *p && k + 5 < n; p++)
        k += (size_t)(*p == '|' ? snprintf(out + k, n - k, " or ") : (out[k] = *p, 1));
    out[k] = 0;
}

/* The first option of r->others that breaks rule r: the usage error's exit
 * status, or 0. r->option may name alternatives ("--val|--val-text"): the
 * rule's option is given when any of them is. */
static int check_rule(const char *cmd, const opt *opts, int nopts, const opt_rule *r)
{
    /* EXCLUDES binds when r->option is given, NEEDS when it is not */
    int given = 0;
    for (const char *p = r->option; *p;) {
        size_t len = strcspn(p, "|");
        given |= opt_seen(opts, nopts, p, len);
        p += len + (p[len] == '|');
    }
    if (given != (r->kind == OPTS_EXCLUDES))
        return 0;
    char name[128];
    rule_option_name(name, sizeof name, r->option);
    for (const char *p = r->others; *p;) {
        size_t len = strcspn(p, ",");
        if (opt_seen(opts, nopts, p, len))
            return r->kind == OPTS_EXCLUDES
                       ? usage_error(cmd, "%.*s does not apply with %s (%s)", (int)len, p,
                                     name, r->why)
                       : usage_error(cmd, "%.*s needs %s (%s)", (int)len, p, name, r->why);
        p += len + (p[len] == ',');
    }
    return 0;
}

int opts_parse(const char *cmd, opt *opts, int nopts, int argc, char **argv, const char **extra,
               int max_extra, int *nextra)
{
    if (nextra)
        *nextra = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            opts_help(stdout, cli_current, opts, nopts);
            return -1;
        }
        if (strncmp(a, "--", 2)) {
            if (strchr(a, '=') && nextra && *nextra < max_extra) {
                extra[(*nextra)++] = a;
                continue;
            }
            return usage_error(cmd, "unexpected argument '%s'", a);
        }
        const char *eq = strchr(a, '='); /* --name=value */
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const int k = opt_index(opts, nopts, a, len);
        if (k < 0)
            return usage_error(cmd, "unknown option '%.*s'", (int)len, a);
        opt *o = &opts[k];
        o->seen = 1;
        if (o->kind == OPT_FLAG && eq)
            return usage_error(cmd, "option %s takes no value", o->name);
        if (o->kind == OPT_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if ((eq && !eq[1]) || (!eq && i + 1 >= argc))
            return usage_error(cmd, "option %s needs a value (%s)", o->name,
                               o->meta ? o->meta : "VALUE");
        int rc = set_value(cmd, o, eq ? eq + 1 : argv[++i]);
        if (rc)
            return rc;
    }
    const command *c = cli_current && !strcmp(cli_current->name, cmd) ? cli_current : NULL;
    for (int k = 0; c && k < c->nrules; k++) {
        int rc = check_rule(cmd, opts, nopts, &c->rules[k]);
        if (rc)
            return rc;
    }
    return 0;
}

void opts_help(FILE *f, const command *c, const opt *opts, int nopts)
{
    if (!c)
        return;
    fprintf(f, "usage: %s\n\n%s\n\noptions:\n", c->usage, c->summary);
    for (int k = 0; k < nopts; k++) {
        const opt *o = &opts[k];
        char left[64], dflt[64] = "";
        /* The help text already says it, or the option has no default. */
        int own_default = strstr(o->help, "default") || strstr(o->help, "required");
        snprintf(left, sizeof left, "%s%s%s", o->name, o->kind == OPT_FLAG ? "" : " ",
                 o->kind == OPT_FLAG ? "" : (o->meta ? o->meta : "VALUE"));
        if (own_default)
            ;
        else if (o->kind == OPT_INT)
            snprintf(dflt, sizeof dflt, " (default %d)", *(int *)o->dst);
        else if (o->kind == OPT_LONG)
            snprintf(dflt, sizeof dflt, " (default %ld)", *(long *)o->dst);
        else if (o->kind == OPT_DOUBLE)
            snprintf(dflt, sizeof dflt, " (default %g)", *(double *)o->dst);
        else if (o->kind == OPT_STR && *(const char **)o->dst)
            snprintf(dflt, sizeof dflt, " (default %s)", *(const char **)o->dst);
        fprintf(f, "  %-22s %s%s\n", left, o->help, dflt);
    }
    for (int k = 0; k < c->nrules; k++) { /* "  --a, --b: not with --c (why)", wrapped */
        const opt_rule *r = &c->rules[k];
        char line[256] = "  ";
        size_t n = 2;
        for (const char *p = r->others; *p && n + 3 < sizeof line; p++) {
            if (*p == ',')
                line[n++] = ',', line[n++] = ' ';
            else
                line[n++] = *p;
        }
        char name[128];
        rule_option_name(name, sizeof name, r->option);
        snprintf(line + n, sizeof line - n, ": %s %s",
                 r->kind == OPTS_NEEDS ? "only with" : "not with", name);
        const int wrap = strlen(line) + strlen(r->why) + 3 > 88;
        fprintf(f, "%s%s%s(%s)\n", k ? "" : "\n", line, wrap ? "\n      " : " ", r->why);
    }
    if (c->details)
        fprintf(f, "\n%s", c->details);
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void progress_start(progress *p, const char *label, long total)
{
    p->label = label;
    p->total = total;
    p->start = now_seconds();
    p->last_draw = 0;
    p->enabled = isatty(STDERR_FILENO);
}

void progress_update(progress *p, long done, const char *extra)
{
    if (!p->enabled)
        return;
    double t = now_seconds();
    if (done < p->total && t - p->last_draw < 0.1)
        return;
    p->last_draw = t;
    const int width = 24;
    int fill = p->total > 0 ? (int)(width * (double)done / p->total) : 0;
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : ' ';
    bar[width] = 0;
    double el = t - p->start, eta = done > 0 ? el * (p->total - done) / done : 0;
    fprintf(stderr, "\r%s [%s] %ld/%ld %.1f/s ETA %.0fs %s\033[K", p->label, bar, done, p->total,
            el > 0 ? done / el : 0.0, eta, extra ? extra : "");
    fflush(stderr);
}

void progress_cb(void *bar, size_t done, size_t total)
{
    progress *p = bar;
    p->total = (long)total;
    progress_update(p, (long)done, NULL);
}

void progress_finish(progress *p)
{
    if (p->enabled)
        fprintf(stderr, "\n");
}

static void on_signal(int sig)
{
    (void)sig;
    cli_stop_requested = 1;
}

void cli_install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void json_number(FILE *f, double v, int digits)
{
    if (isfinite(v))
        fprintf(f, "%.*g", digits, v);
    else
        fputs("null", f);
}

void json_fixed(FILE *f, double v, int decimals)
{
    if (isfinite(v))
        fprintf(f, "%.*f", decimals, v);
    else
        fputs("null", f);
}

char *args_json(int argc, char **argv)
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
 * (--resume, --threads, --json, --stack, --naive), as JSON, each --opt=value
 * spelt --opt value: a resumed run must match its original on everything
 * else, however either spelt its options. */
static char *result_args(int argc, char **argv)
{
    static const char *const dropped[] = { "--resume", "--threads", "--stack", "--json",
                                           "--naive" };
    enum { WITH_VALUE = 3 }; /* the first three take a value */
    size_t bytes = 1;
    for (int i = 0; i < argc; i++)
        bytes += strlen(argv[i]) + 1;
    /* the arguments copied into copy, each --opt=value cut at its '=' */
    char **kept = calloc(2 * (size_t)argc + 1, sizeof *kept), *copy = malloc(bytes), *p = copy;
    int n = 0;
    for (int i = 0; kept && copy && i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int drop = -1;
        for (int k = 0; k < (int)(sizeof dropped / sizeof *dropped); k++)
            if (strlen(dropped[k]) == len && !strncmp(a, dropped[k], len))
                drop = k;
        if (drop >= 0) {
            i += drop < WITH_VALUE && !eq; /* its value is the next argument */
            continue;
        }
        kept[n++] = strcpy(p, a);
        if (eq) {
            p[len] = 0;
            kept[n++] = p + len + 1;
        }
        p += strlen(a) + 1;
    }
    char *s = kept && copy ? args_json(n, kept) : NULL;
    free(kept);
    free(copy);
    return s;
}

/* result_args of a command line recorded as a JSON array of strings. */
static char *stored_result_args(const char *json)
{
    cJSON *a = cJSON_Parse(json);
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
        out = ok ? result_args(n, argv) : NULL;
    }
    free(argv);
    cJSON_Delete(a);
    return out;
}

static int run_begin(cli_run *r, const char *db, long long resume, const char *kind,
                     const char *model_path, const char *model_file, const char *data, int argc,
                     char **argv);

int cli_run_begin(cli_run *r, const char *db, long long resume, const char *kind,
                  const char *model_path, const char *model_file, const char *data, int argc,
                  char **argv)
{
    memset(r, 0, sizeof *r);
    if (!db || hs_dist_rank() > 0) /* under mpirun rank 0 alone writes the index */
        return db ? hs_dist_agree(HS_OK) : HS_OK;
    const int rc = run_begin(r, db, resume, kind, model_path, model_file, data, argc, argv);
    return hs_dist_size() > 1 ? hs_dist_agree(rc) : rc;
}

static int run_begin(cli_run *r, const char *db, long long resume, const char *kind,
                     const char *model_path, const char *model_file, const char *data, int argc,
                     char **argv)
{
    struct stat sb;
    if (resume > 0 && stat(db, &sb))
        return hs_fail(HS_EIO, "%s: no index to resume a run from (%s)", db, strerror(errno));
    int rc = model_file ? hs_sha256_file(model_file, r->model_sha, NULL) : HS_OK;
    if (!rc && data)
        rc = hs_sha256_file(data, r->data_sha, NULL);
    if (!rc)
        rc = hs_index_open(&r->ix, db);
    if (!rc && resume > 0) {
        char k[80], msha[80], dsha[80], status[16], args[4096];
        char *now = result_args(argc, argv);
        rc = hs_index_run_get(r->ix, resume, k, msha, dsha, status, args, sizeof args);
        if (!rc && strcmp(k, kind))
            rc = hs_fail(HS_EINVAL, "run %lld is a '%s' run, not '%s'", resume, k, kind);
        else if (!rc && (strcmp(msha, r->model_sha) || strcmp(dsha, r->data_sha)))
            rc = hs_fail(HS_EINVAL, "run %lld was made with another model or data (sha256 "
                         "differs)", resume);
        char *then = NULL;
        if (!rc && !(then = stored_result_args(args)))
            rc = hs_fail(HS_EFORMAT, "run %lld: its recorded command line is unreadable", resume);
        else if (!rc && (!now || strcmp(then, now)))
            rc = hs_fail(HS_EINVAL, "run %lld was made with other options: %s (resume needs the "
                         "same ones, apart from --threads and --json)", resume, args);
        free(now);
        free(then);
        if (!rc)
            rc = hs_index_run_reopen(r->ix, resume);
        r->run_id = resume;
    } else if (!rc) {
        char *args = args_json(argc, argv);
        hs_run_info info = { kind, model_path, model_file ? r->model_sha : NULL, data,
                             data ? r->data_sha : NULL, args };
        int64_t id = 0;
        rc = hs_index_run_begin(r->ix, &info, &id);
        r->run_id = id;
        free(args);
    }
    if (rc) {
        hs_index_close(r->ix);
        r->ix = NULL;
    }
    return rc;
}

int cli_run_end(cli_run *r, int rc, const char *model_sha)
{
    if (!r->ix)
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
    r->ix = NULL;
    if (rc && end)
        hs_fail(rc, "%s", prior);
    return rc ? rc : end;
}

static void phase_cb(void *ctx, const char *label)
{
    phase_bars *p = ctx;
    if (p->active)
        progress_finish(&p->bar);
    p->active = label != NULL;
    if (label)
        progress_start(&p->bar, label, 0);
}

hs_study_io cli_study_io(phase_bars *bars, int stoppable)
{
    bars->active = 0;
    return (hs_study_io){ phase_cb, progress_cb, bars, stoppable ? &cli_stop_requested : NULL, 0 };
}

/* ---- text in (SPEC §9) ------------------------------------------------------- */

const char *cli_source_path(const cli_source *s) { return s->data ? s->data : s->text; }

int cli_tokenizer_open(hs_tokenizer **tk, const char *tokenizer, const char *model_dir,
                       const char **used)
{
    *tk = NULL;
    const char *path = tokenizer ? tokenizer
                       : model_dir && hs_tokenizer_present(model_dir) ? model_dir
                                                                        : NULL;
    if (used)
        *used = path;
    return path ? hs_tokenizer_open(tk, path) : HS_OK;
}

/* The whole of a regular file (malloc'd, NUL-terminated), *len its bytes;
 * NULL with the message set. Texts are held in memory, as their ids are. */
static char *read_text_file(const char *path, size_t *len)
{
    enum { MAX_TEXT = 1 << 30 };
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return NULL; /* the message names the file */
    struct stat sb;
    char *buf = NULL;
    if (fstat(fileno(f), &sb) || sb.st_size > MAX_TEXT)
        hs_fail(HS_EINVAL, "%s: a text file of at most 1 GiB is read", path);
    else if ((buf = hs_calloc((size_t)sb.st_size + 1, 1, path)) &&
             fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        hs_fail(HS_EIO, "%s: read failed", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)sb.st_size : 0;
    return buf;
}

int cli_tokens_load(hs_tokenizer **keep, hs_tokens *t, const cli_source *s, const char *model_dir,
                    int vocab)
{
    memset(t, 0, sizeof *t);
    if (keep)
        *keep = NULL;
    hs_tokenizer *tk = NULL;
    const char *used = NULL;
    if (s->data) {
        int rc = hs_tokens_read(t, s->data);
        if (!rc && keep && (rc = cli_tokenizer_open(keep, s->tokenizer, model_dir, NULL)))
            hs_tokens_free(t);
        return rc;
    }
    int rc = cli_tokenizer_open(&tk, s->tokenizer, model_dir, &used);
    if (!rc && !tk)
        return model_dir ? hs_fail(HS_EINVAL, "--text %s needs --tokenizer PATH (%s holds no "
                                   "tokenizer.json or vocab.json + merges.txt)", s->text, model_dir)
                         : hs_fail(HS_EINVAL, "--text %s needs --tokenizer PATH", s->text);
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    char *text = rc ? NULL : read_text_file(s->text, &len);
    if (!rc && !text)
        rc = HS_EIO;
    if (!rc && (rc = hs_tokenizer_encode(tk, text, len, 1, &ids, &n))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hs_last_error());
        hs_fail(rc, "%s: %s", s->text, msg);
    }
    for (size_t i = 0; !rc && vocab > 0 && i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            rc = hs_fail(HS_EINVAL, "%s: token %d at %zu (from the tokenizer %s) is outside the "
                         "vocabulary of %d of the model %s", s->text, ids[i], i, used, vocab,
                         model_dir ? model_dir : "being trained");
    if (!rc)
        rc = hs_tokens_adopt(t, ids, n);
    if (rc)
        free(ids);
    free(text);
    if (keep && !rc)
        *keep = tk;
    else if (tk)
        hs_tokenizer_free(tk);
    return rc;
}
