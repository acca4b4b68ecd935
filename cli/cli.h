/* Shared pieces of the headscope command: the option parser that also
 * writes each command's help, the progress bar, and error reporting.
 *
 * A command is plumbing: it parses its options (the shared ones through the
 * OPT_ macros below; which options apply together is its record's rules,
 * checked while parsing, so that no option is accepted and then ignored),
 * lets the library study check them (analyze/study.h), opens its run in the
 * index only after every check has passed (bad input records nothing:
 * analysis_start or cli_run_begin), calls the one study, records its rows
 * with hs_study_record and prints. Adding an analysis touches analyze/ (its
 * study: a declaration in study.h, study_NAME.c, a test in
 * tests/test_study.c) and one new cli/cmd_NAME.c (the command and its
 * HS_COMMAND record); no list in CMakeLists.txt, main.c or this header
 * changes. The report shows it once cmd_report.c is taught a section.
 */
#ifndef HS_CLI_H
#define HS_CLI_H

#include <signal.h>
#include <stdio.h>

#include "tokenizer.h"
#include "tokens.h"

enum { EXIT_FAILURE_RUN = 1, EXIT_USAGE = 2 };

typedef enum { OPT_FLAG, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_STR } opt_kind;

typedef struct {
    const char *name; /* "--steps" */
    opt_kind kind;
    void *dst;        /* int* for FLAG/INT, long*, double*, const char** */
    double min;       /* smallest accepted value for numbers */
    const char *meta; /* "N", "FILE", ... */
    const char *help;
    int seen;
} opt;

/* The options many commands share, declared once. A command lists them in
 * its own option table (the table's order is its help's order); where an
 * option means something more specific in a command, the _AS form takes that
 * help text. */
#define OPT_MODEL(dst) OPT_MODEL_AS(dst, "checkpoint directory")
#define OPT_MODEL_AS(dst, help) { "--model", OPT_STR, (dst), 0, "DIR", (help), 0 }
#define OPT_DATA(dst) OPT_DATA_AS(dst, "evaluation token shard")
#define OPT_DATA_AS(dst, help) { "--data", OPT_STR, (dst), 0, "FILE.bin", (help), 0 }
/* Text in (SPEC §9): every command that reads --data also reads --text
 * FILE, tokenized on the fly by --tokenizer PATH or, without it, by the
 * tokenizer file of the model directory (cli_tokens_load). */
#define OPT_TEXT(dst) OPT_TEXT_AS(dst, "--text", "text file, tokenized on the fly as one document (instead of --data)")
#define OPT_TEXT_AS(dst, name, help) { (name), OPT_STR, (dst), 0, "FILE", (help), 0 }
#define OPT_TOKENIZER(dst)                                                                 \
    { "--tokenizer", OPT_STR, (dst), 0, "PATH",                                            \
      "tokenizer.json, or a directory holding it or vocab.json + merges.txt (default: the "  \
      "model directory's)", 0 }
/* The rules of --text in a command's rules array; with a validation text
 * (--val-text, tokenized as --text is) the second form. */
#define OPT_TEXT_RULE_DATA { "--text", OPTS_EXCLUDES, "--data", "the tokens come from the text" }
#define OPT_TEXT_RULES                                                                     \
    OPT_TEXT_RULE_DATA, { "--text", OPTS_NEEDS, "--tokenizer", "it tokenizes --text" }
#define OPT_VAL_TEXT_RULES                                                                 \
    OPT_TEXT_RULE_DATA,                                                                    \
        { "--text|--val-text", OPTS_NEEDS, "--tokenizer", "it tokenizes the text" },       \
        { "--val-text", OPTS_EXCLUDES, "--val", "one validation set" }
#define OPT_DB(dst) OPT_DB_AS(dst, "SQLite index for the results")
#define OPT_DB_AS(dst, help) { "--db", OPT_STR, (dst), 0, "FILE", (help), 0 }
#define OPT_BATCH(dst) OPT_BATCH_AS(dst, "sequences per batch")
#define OPT_BATCH_AS(dst, help) { "--batch", OPT_INT, (dst), 1, "B", (help), 0 }
#define OPT_SEQ_LEN(dst) { "--seq-len", OPT_INT, (dst), 1, "T", "sequence length (default: min(n_ctx, 256))", 0 }
#define OPT_MAX_BATCHES(dst) OPT_MAX_BATCHES_AS(dst, "evaluate N batches (0: all)")
#define OPT_MAX_BATCHES_AS(dst, help) { "--max-batches", OPT_LONG, (dst), 0, "N", (help), 0 }
#define OPT_THREADS(dst) { "--threads", OPT_INT, (dst), 0, "N", "threads (0: OpenMP's default)", 0 }
#define OPT_JSON(dst) { "--json", OPT_FLAG, (dst), 0, NULL, "print one JSON object", 0 }
/* Commands that compute losses, scores or statistics fail (exit 1, the run
 * `failed`) on the first non-finite one, naming it, unless this is given:
 * then NaN and infinities are kept (null in JSON and in the index). */
#define OPT_ALLOW_NONFINITE(dst)                                                           \
    { "--allow-nonfinite", OPT_FLAG, (dst), 0, NULL,                                       \
      "keep NaN or infinite results (weights or inputs not finite) instead of failing", 0 }

/* A command's record. Each cli/cmd_*.c defines the records of its commands
 * beside them with HS_COMMAND, which also registers the record: main.c
 * finds every registered record (a linker section, so adding a command
 * touches no list) and `headscope help` lists them by `order`. Adding a
 * command: cli/cmd_NAME.c with its function and
 *     HS_COMMAND(cmd_NAME_record) = { .name = "NAME", .order = N, ... };
 * CMake builds every .c file of cli/ into the command. */
/* Which options apply together, so that none is accepted and then ignored:
 * with `option` given, each of `others` (comma-separated names) does not
 * apply (OPTS_EXCLUDES), or applies only with it (OPTS_NEEDS). `why` ends
 * the usage error and the help line: "--model does not apply with --maps
 * (WHY)", "--early needs --data (WHY)". */
typedef enum { OPTS_EXCLUDES, OPTS_NEEDS } opt_rule_kind;

typedef struct {
    const char *option; /* one option, or alternatives "--val|--val-text" (any given) */
    opt_rule_kind kind;
    const char *others;
    const char *why;
} opt_rule;

typedef struct {
    const char *name;
    int order;           /* position in `headscope help`'s list (ascending) */
    const char *summary;
    const char *usage;   /* first line(s): "headscope train --out DIR ..." */
    const char *details; /* paragraphs after the options, with an example */
    int (*run)(int argc, char **argv);
    const opt_rule *rules; /* checked by opts_parse, listed by the help */
    int nrules;
} command;

/* Defines and registers a command record: HS_COMMAND(rec) = { ... }; */
#define HS_COMMAND(rec)                                                                    \
    static const command rec;                                                              \
    static const command *const rec##_entry                                                \
        __attribute__((used, section("hs_commands"), aligned(sizeof(void *)))) = &rec;     \
    static const command rec

/* A record's rules from an array: `OPT_RULES(patterns_rules),`. */
#define OPT_RULES(r) .rules = (r), .nrules = (int)(sizeof(r) / sizeof((r)[0]))

/* Parses argv[1..argc) against opts; --help prints the help of cli_current
 * and returns -1 (the caller exits 0). An option's value follows it as the
 * next argument or after '=' (--model DIR, --model=DIR); a flag takes none.
 * Arguments of the form KEY=VALUE go to extra[] (at most max_extra; pass 0
 * to refuse them). Marks each given option seen, then checks cli_current's
 * rules (when it is the command `cmd`). Returns 0, or prints a usage error
 * naming the command and returns EXIT_USAGE. */
int opts_parse(const char *cmd, opt *opts, int nopts, int argc, char **argv, const char **extra,
               int max_extra, int *nextra);

/* The full help of a command: usage, every option with its default, the
 * rules of which options apply together, details. */
void opts_help(FILE *f, const command *c, const opt *opts, int nopts);

/* A usage error: "headscope: CMD: MESSAGE (see 'headscope help CMD')", exit 2. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A run failure with the library's message: "headscope: CMD: MESSAGE", exit 1. */
int run_error(const char *cmd);

/* Progress on stderr when it is a terminal: "label [####    ] 42/100 rate ETA". */
typedef struct {
    const char *label;
    long total;
    double start;
    double last_draw;
    int enabled;
} progress;

void progress_start(progress *p, const char *label, long total);
/* extra: text after the counts (e.g. "loss 3.21, 12,000 tok/s"). */
void progress_update(progress *p, long done, const char *extra);
void progress_finish(progress *p);
/* An hs_progress_fn over a progress bar (ctx): sets its total, draws done. */
void progress_cb(void *bar, size_t done, size_t total);
double now_seconds(void);

/* A progress bar per phase of a library study (hs_study_io in study.h):
 * each phase label finishes the previous bar and starts the next. */
typedef struct {
    progress bar; /* first: progress_cb reads the ctx as a progress bar */
    int active;
} phase_bars;

/* The study io over bars: phases and progress drawn on stderr, stopped by
 * cli_stop_requested when stoppable. */
struct hs_study_io cli_study_io(phase_bars *bars, int stoppable);

/* SIGINT/SIGTERM set this; long commands poll it and stop cleanly. */
extern volatile sig_atomic_t cli_stop_requested;
void cli_install_signal_handlers(void);

/* A run recorded in the index (SPEC §7), with the provenance of its model
 * and data; NULL db makes every call a no-op. */
typedef struct {
    struct hs_index *ix;
    long long run_id;
    char model_sha[80], data_sha[80];
} cli_run;

/* Opens db and inserts a run of `kind` (or, resume > 0, reopens that run
 * after checking its kind, model and data match). Prints nothing. */
int cli_run_begin(cli_run *r, const char *db, long long resume, const char *kind,
                  const char *model_path, const char *model_file, const char *data, int argc,
                  char **argv);
/* Marks the run complete (rc HS_OK) or failed (model_sha: the model it
 * produced) and closes the index. Returns rc, or when rc is HS_OK the status
 * of a failed final write (hs_last_error says so): a command whose run could
 * not be marked complete fails. */
int cli_run_end(cli_run *r, int rc, const char *model_sha);

/* Where a command's tokens come from: a token shard (SPEC §4), or a text
 * file encoded as one document as HF tokenizer(text) does (special tokens
 * added) by the tokenizer at `tokenizer`, or when that is NULL by the one
 * found in the model directory (hs_tokenizer_present). */
typedef struct {
    const char *data;      /* --data FILE.bin */
    const char *text;      /* --text FILE */
    const char *tokenizer; /* --tokenizer PATH (NULL: the model directory's) */
} cli_source;

/* The file recorded as the data (runs' data_path, the data_sha256 of runs
 * and map files is its sha256): the shard or the text file; NULL for none. */
const char *cli_source_path(const cli_source *s);

/* The tokenizer that applies: `tokenizer` when given, else the model
 * directory's when it holds one (*tk NULL and HS_OK when neither: no
 * tokenizer is known). *used: the path opened (model_dir or tokenizer). */
int cli_tokenizer_open(hs_tokenizer **tk, const char *tokenizer, const char *model_dir,
                       const char **used);

/* Reads the tokens of s into t: the shard, or the text encoded by the
 * tokenizer (cli_tokenizer_open; a text without one is HS_EINVAL saying
 * --tokenizer is needed). For a text, vocab > 0 checks every id against the
 * model's vocabulary of `vocab` ids, the error naming the text, the
 * tokenizer and model_dir. keep non-NULL: *keep is the tokenizer that
 * applies (for a shard too; NULL when none is known), open for the caller
 * to free. The message is set on failure, t left empty, *keep NULL. */
int cli_tokens_load(hs_tokenizer **keep, hs_tokens *t, const cli_source *s, const char *model_dir,
                    int vocab);


/* Writes s as a JSON string literal (quoted, escaped). */
void json_string(FILE *f, const char *s);

/* Writes v as a JSON number with `digits` significant digits (%.*g), or
 * null when it is NaN or infinite (JSON has no such numbers). Every --json
 * printer writes its floating-point values through this. */
void json_number(FILE *f, double v, int digits);
/* The same with `decimals` digits after the point (%.*f). */
void json_fixed(FILE *f, double v, int decimals);

/* The command line as a JSON array string (malloc'd), for run provenance. */
char *args_json(int argc, char **argv);


/* Each command's help is printed by re-running its option table with
 * --help; the commands call this when they see it. */
extern const command *cli_current;

#endif
