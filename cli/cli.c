#include "cli.h"
#include "gemm.h"

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
#include "safetensors.h"
#include "study.h"

volatile sig_atomic_t cli_stop_requested = 0;
const command *cli_current = NULL;
const char *cli_compute = NULL;

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "headscope: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'headscope help %s')\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

int cli_run_error(const char *cmd)
{
    fprintf(stderr, "headscope: %s: %s\n", cmd, hs_last_error());
    return EXIT_FAILURE_RUN;
}

int cli_inputs_refused(hs_inputs *in, const char *cmd, int usage)
{
    hs_inputs_free(in);
    return usage ? cli_usage_error(cmd, "%s", hs_last_error()) : cli_run_error(cmd);
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
    if (o->meta && !strcmp(o->meta, "T|auto") && !strcmp(v, "auto")) { /* SPEC §21 */
        *(int *)o->dst = HS_SEQ_LEN_AUTO;
        return 0;
    }
    double x;
    int integral = o->kind == OPT_INT || o->kind == OPT_LONG;
    if (parse_number(v, &x) || x < o->min || (integral && x != floor(x)) ||
        (o->kind == OPT_INT && x > 2147483647.0) || (o->kind == OPT_LONG && x > 9e18))
        return cli_usage_error(cmd, "option %s: '%s' is not %s >= %g", o->name, v,
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
    return k >= 0 && opts[k].flags & OPT_SEEN;
}

int cli_opts_given(const opt *opts, int nopts, const char *name)
{
    return opt_seen(opts, nopts, name, strlen(name));
}

/* Whether r->option or one of its alternatives ("--val|--val-text") is
 * given; into out the ones this command has, as the messages say them
 * ("--val or --val-text"). */
static int rule_option(char *out, size_t n, const char *option, const opt *opts, int nopts)
{
    size_t k = 0;
    int given = 0;
    out[0] = 0;
    for (const char *p = option; *p;) {
        const size_t len = strcspn(p, "|");
        given |= opt_seen(opts, nopts, p, len);
        if (opt_index(opts, nopts, p, len) >= 0 && k + len + 5 < n)
            k += (size_t)snprintf(out + k, n - k, "%s%.*s", k ? " or " : "", (int)len, p);
        p += len + (p[len] == '|');
    }
    return given;
}

/* The first option of r->others that breaks rule r: the usage error's exit
 * status, or 0. EXCLUDES binds when r->option is given, NEEDS when it is not. */
static int check_rule(const char *cmd, const opt *opts, int nopts, const opt_rule *r)
{
    char name[128];
    if (rule_option(name, sizeof name, r->option, opts, nopts) != (r->kind == OPTS_EXCLUDES))
        return 0;
    for (const char *p = r->others; *p;) {
        size_t len = strcspn(p, ",");
        if (opt_seen(opts, nopts, p, len))
            return r->kind == OPTS_EXCLUDES
                       ? cli_usage_error(cmd, "%.*s does not apply with %s (%s)", (int)len, p, name,
                                         r->why)
                       : cli_usage_error(cmd, "%.*s needs %s (%s)", (int)len, p, name, r->why);
        p += len + (p[len] == ',');
    }
    return 0;
}

int cli_opts_parse(const char *cmd, opt *opts, int nopts, int argc, char **argv, const char **extra,
                   int max_extra, int *nextra)
{
    if (nextra)
        *nextra = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_opts_help(stdout, cli_current, opts, nopts);
            return -1;
        }
        if (strncmp(a, "--", 2)) {
            if (strchr(a, '=') && nextra && *nextra < max_extra) {
                extra[(*nextra)++] = a;
                continue;
            }
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
        const char *eq = strchr(a, '='); /* --name=value */
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const int k = opt_index(opts, nopts, a, len);
        if (k < 0)
            return cli_usage_error(cmd, "unknown option '%.*s'", (int)len, a);
        opt *o = &opts[k];
        o->flags |= OPT_SEEN;
        if (o->kind == OPT_FLAG && eq)
            return cli_usage_error(cmd, "option %s takes no value", o->name);
        if (o->kind == OPT_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if ((eq && !eq[1]) || (!eq && i + 1 >= argc))
            return cli_usage_error(cmd, "option %s needs a value (%s)", o->name,
                                   o->meta ? o->meta : "VALUE");
        int rc = set_value(cmd, o, eq ? eq + 1 : argv[++i]);
        if (rc)
            return rc;
    }
    if (cli_compute && hs_gemm_set_compute_name(cli_compute))
        return cli_usage_error(cmd, "option --compute: %s", hs_last_error());
    const command *c = cli_current && !strcmp(cli_current->name, cmd) ? cli_current : NULL;
    for (int k = 0; c && k < c->nrules; k++) {
        int rc = check_rule(cmd, opts, nopts, &c->rules[k]);
        if (rc)
            return rc;
    }
    return 0;
}

void cli_opts_help(FILE *f, const command *c, const opt *opts, int nopts)
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
        rule_option(name, sizeof name, r->option, opts, nopts);
        snprintf(line + n, sizeof line - n, ": %s %s",
                 r->kind == OPTS_NEEDS ? "only with" : "not with", name);
        const int wrap = strlen(line) + strlen(r->why) + 3 > 88;
        fprintf(f, "%s%s%s(%s)\n", k ? "" : "\n", line, wrap ? "\n      " : " ", r->why);
    }
    if (c->details)
        fprintf(f, "\n%s", c->details);
}

void cli_progress_start(cli_progress *p, const char *label, long total)
{
    p->label = label;
    p->total = total;
    p->start = hs_now();
    p->last_draw = 0;
    p->enabled = isatty(STDERR_FILENO);
}

void cli_progress_update(cli_progress *p, long done, const char *extra)
{
    if (!p->enabled)
        return;
    double t = hs_now();
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

void cli_progress_cb(void *bar, size_t done, size_t total)
{
    cli_progress *p = bar;
    p->total = (long)total;
    cli_progress_update(p, (long)done, NULL);
}

void cli_progress_finish(cli_progress *p)
{
    if (p->enabled)
        fprintf(stderr, "\n");
}

static void on_signal(int sig)
{
    (void)sig;
    cli_stop_requested = 1;
}

/* A checkpoint truncated under its mapping: the reading thread gets a page
 * of zeros (hs_st_fault) and the command runs on to cli_finish, which finds
 * the file changed and fails the run naming it. Any other SIGBUS keeps its
 * default action: returning re-runs the access with SIG_DFL in place. */
static void on_bus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (!hs_st_fault(si->si_addr))
        signal(sig, SIG_DFL);
}

void cli_install_fault_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
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

/* The run's options that cannot change its result (--resume's comparison
 * leaves them out) or name a file or directory (recorded absolute): run.h.
 * At most 32. */
static int run_options(const opt *o, int n, hs_run_option *out)
{
    int k = 0;
    for (int i = 0; i < n && k < 32; i++) {
        const char *m = o[i].kind == OPT_STR && o[i].meta ? o[i].meta : "";
        const int path = strstr(m, "FILE") || strstr(m, "DIR") || strstr(m, "PATH");
        if (o[i].flags & OPT_NEUTRAL || path)
            out[k++] = (hs_run_option){ o[i].name, o[i].kind != OPT_FLAG,
                                        (o[i].flags & OPT_NEUTRAL) != 0, path };
    }
    return k;
}

int cli_open(cli_job *j, const hs_inputs_spec *s)
{
    memset(j, 0, sizeof *j);
    const int rc = hs_inputs_load(&j->in, s);
    if (rc && j->in.usage)
        return cli_usage_error(cli_current->name, "%s", hs_last_error());
    return rc ? cli_run_error(cli_current->name) : 0;
}

void cli_prepack(const hs_model *m, int layers)
{
    const char *env = getenv("HEADSCOPE_PREPACK");
    size_t bytes;
    int n;
    if ((env && !strcmp(env, "0")) || !m->stored)
        return;
    if (hs_model_prepack(m, layers, 1, &bytes, &n) == HS_ENOMEM)
        fprintf(stderr, "headscope %s: note: the weights are read as stored, not pre-packed: %s\n",
                cli_current->name, hs_last_error());
}

int cli_run_open(hs_run **run, const char *db, long long resume, const char *model_dir,
                 const char *data, const opt *o, int nopts, int argc, char **argv)
{
    char file[1100];
    hs_run_option ro[32];
    hs_checkpoint_file(model_dir ? model_dir : "", file, sizeof file);
    const hs_run_spec s = { .db = db, .kind = cli_current->name, .resume = resume,
                            .model_path = model_dir, .model_file = model_dir ? file : NULL,
                            .data_path = data, .argc = argc, .argv = argv,
                            .options = ro, .n_options = run_options(o, nopts, ro) };
    return hs_run_open(run, &s);
}

int cli_start(cli_job *j, const char *db, long long resume, const char *model_dir,
              const opt *o, int nopts, int argc, char **argv)
{
    int rc = cli_run_open(&j->run, db, resume, model_dir, j->in.data_path, o, nopts, argc, argv);
    if (!rc)
        rc = hs_inputs_record(j->run, &j->in);
    if (rc) {
        hs_run_close(j->run, rc, NULL);
        j->run = NULL;
        hs_inputs_free(&j->in);
        return cli_run_error(cli_current->name);
    }
    cli_install_signal_handlers();
    return 0;
}

int cli_run_end(hs_run *run, int rc, long long *id)
{
    if (rc)
        cli_run_error(cli_current->name);
    *id = hs_run_id(run);
    if (hs_run_close(run, rc, NULL) && !rc)
        rc = cli_run_error(cli_current->name);
    return rc ? EXIT_FAILURE_RUN : 0;
}

int cli_finish(cli_job *j, int rc)
{
    if (!rc) /* a checkpoint changed under the run: its numbers mix two versions */
        rc = hs_model_unchanged(&j->in.m);
    const long long id = hs_run_id(j->run);
    rc = hs_run_close(j->run, rc, NULL);
    j->run = NULL;
    hs_inputs_free(&j->in);
    if (rc == HS_EINTR && id) {
        fprintf(stderr, "headscope: %s: %s; run %lld is marked failed, finish it with --resume "
                "%lld\n", cli_current->name, hs_last_error(), id, id);
        return EXIT_FAILURE_RUN;
    }
    return rc ? cli_run_error(cli_current->name) : 0;
}

static void phase_cb(void *ctx, const char *label)
{
    phase_bars *p = ctx;
    if (p->active)
        cli_progress_finish(&p->bar);
    p->active = label != NULL;
    if (label)
        cli_progress_start(&p->bar, label, 0);
}

hs_study_io cli_study_io(phase_bars *bars, int stoppable)
{
    bars->active = 0;
    return (hs_study_io){ phase_cb, cli_progress_cb, bars, stoppable ? &cli_stop_requested : NULL,
                          0, 0 };
}

/* ---- the study driver --------------------------------------------------- */

int cli_prompt_ids(const char *cmd, const char *ids_s, const char *text, const hs_tokenizer *tok,
                   int V, int32_t **ids)
{
    int usage = 0;
    const int n = hs_prompt_ids(ids_s, text, tok, V, ids, &usage);
    if (n < 0)
        usage ? cli_usage_error(cmd, "%s", hs_last_error()) : cli_run_error(cmd);
    return n;
}

int cli_task_opts(hs_task_opts *o, const cli_task *t, hs_inputs_spec *in)
{
    *o = (hs_task_opts){ t->path, in->seq_len, t->truncate, { 0 }, 0, t->metric };
    if (t->label_map && hs_task_label_map_parse(o, t->label_map))
        return cli_usage_error(cli_current->name, "%s", hs_last_error());
    in->task = o, in->mlm = NULL, in->need_batch = 0;
    return 0;
}

int cli_study_parse(cli_study *s, opt *o, int n, int argc, char **argv)
{
    const char *cmd = cli_current->name;
    int rc = cli_opts_parse(cmd, o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc;
    if (s->task.path && (rc = cli_task_opts(&s->task_opts, &s->task, &s->in)))
        return rc;
    const int data = (s->flags & CLI_NEEDS_DATA) && !s->task.path;
    const int prompts = (s->flags & CLI_NEEDS_PROMPTS) != 0;
    if (!(s->flags & CLI_OWN_NEEDS) &&
        (!s->in.model || !s->db || (data && !hs_source_path(&s->in.source) && !s->in.pairs) ||
         (prompts && !s->in.prompts)))
        return cli_usage_error(cmd, "--model DIR, %sand --db FILE are required",
                               data      ? "--data FILE (or --text FILE) "
                               : prompts ? "--prompts FILE "
                                         : "");
    if (s->threads)
        hs_set_threads(s->threads);
    return 0;
}

/* The environment of the study over j's inputs and run. */
static hs_study_env study_env(const cli_study *s, const cli_job *j)
{
    const hs_inputs *in = &j->in;
    return (hs_study_env){ .m = in->m.cfg.n_layer ? &in->m : NULL,
                           .data = in->tok.n ? &in->tok : NULL,
                           .data_name = hs_source_path(&s->in.source),
                           .val = in->val.n ? &in->val : NULL,
                           .ps = in->ps.n ? &in->ps : NULL, .tk = in->tk,
                           .task = in->task.n ? &in->task : NULL, .pairs = in->pairs.n ? &in->pairs : NULL,
                           .batch = in->batch, .seq_len = in->seq_len,
                           .max_batches = (size_t)s->max_batches, .ix = hs_run_index(j->run),
                           .run_id = hs_run_id(j->run), .resume = s->resume > 0 };
}

int cli_study_go(cli_study *s, const opt *o, int n, int argc, char **argv)
{
    const char *cmd = cli_current->name;
    cli_job j;
    int rc = cli_open(&j, &s->in);
    if (rc)
        return rc;
    hs_study_env env = study_env(s, &j);
    if ((rc = s->kind->check(s->opts, &env)))
        return cli_inputs_refused(&j.in, cmd, rc == HS_EINVAL);
    if ((rc = cli_start(&j, s->db, s->resume, s->in.model, o, n, argc, argv)))
        return rc;
    phase_bars bars;
    env = study_env(s, &j);
    env.io = cli_study_io(&bars, (s->flags & CLI_STOPPABLE) != 0);
    env.io.allow_nonfinite = s->allow_nonfinite, env.io.allow_weak_premise = s->allow_weak;
    void *r = hs_calloc(1, s->kind->result_size, "study result");
    if (!r)
        return cli_finish(&j, HS_ENOMEM); /* the run failed, the inputs freed */
    const double t0 = hs_now();
    if (s->flags & CLI_MANY_FORWARDS)
        cli_prepack(&j.in.m, s->layers ? s->layers(s->opts) : j.in.m.cfg.n_layer);
    rc = s->kind->study(r, s->opts, &env);
    if (!rc) /* every result begins with its rows */
        rc = hs_run_study_rows(j.run, (const hs_study_rows *)r);
    const hs_summary sum = { hs_run_id(j.run), s->db, s->flags & CLI_TIMED ? hs_now() - t0 : 0,
                             s->json };
    const int status = cli_finish(&j, rc);
    if (!status)
        s->print(stdout, &sum, r, s->opts);
    s->kind->free(r);
    free(r);
    return status;
}

int cli_study_run(cli_study *s, opt *o, int n, int argc, char **argv)
{
    const int rc = cli_study_parse(s, o, n, argc, argv);
    return rc ? (rc < 0 ? 0 : rc) : cli_study_go(s, o, n, argc, argv);
}
