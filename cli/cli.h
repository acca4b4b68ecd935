/* Shared pieces of the headscope command: the option parser that also
 * writes each command's help, the cli_progress bar, error reporting, and the
 * job (a command's inputs and its run).
 *
 * A command is plumbing: it parses its options (the shared ones through the
 * OPT_ macros below; which options apply together is its record's rules,
 * checked while parsing, so that no option is accepted and then ignored),
 * loads its inputs (cli_open), lets the library study check its options
 * (analyze/study.h), opens its run in the index only after every check has
 * passed (cli_start: bad input records nothing), calls the one study,
 * records its rows (hs_run_rows) and prints. Adding an analysis touches
 * analyze/ (its study and the descriptors of its metrics, analyze/metrics.c)
 * and one new cli/cmd_NAME.c (the command and its HS_COMMAND record, with
 * CMD_SHARDS when it shards under mpirun); no list in CMakeLists.txt,
 * main.c or this header changes. */
#ifndef HS_CLI_H
#define HS_CLI_H

#include <signal.h>
#include <stdio.h>

#include "checkpoint.h"
#include "inputs.h"
#include "jsonout.h"
#include "mlm.h"
#include "run.h"
#include "study.h"
#include "summary.h"

enum { EXIT_FAILURE_RUN = 1, EXIT_USAGE = 2 };

typedef enum { OPT_FLAG, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_STR } opt_kind;

typedef struct {
    const char *name; /* "--steps" */
    opt_kind kind;
    void *dst;        /* int* for FLAG/INT, long*, double*, const char** */
    double min;       /* smallest accepted value for numbers */
    const char *meta; /* "N", "FILE", ... */
    const char *help;
    unsigned flags; /* OPT_NEUTRAL; OPT_SEEN once cli_opts_parse met the option */
} opt;

/* An option that cannot change a result (left out of --resume's comparison). */
#define OPT_NEUTRAL 1u
#define OPT_SEEN 2u

/* The options many commands share, declared once. A command lists them in
 * its own option table (the table's order is its help's order); where an
 * option means something more specific in a command, the _AS form takes that
 * help text. */
#define OPT_MODEL(dst) OPT_MODEL_AS(dst, "checkpoint directory")
#define OPT_MODEL_AS(dst, help) { "--model", OPT_STR, (dst), 0, "DIR", (help), 0 }
#define OPT_DATA(dst) OPT_DATA_AS(dst, "evaluation token shard")
/* An encoder-decoder's source-target pairs (SPEC §17), for the commands
 * that take them instead of --data (hs_inputs_spec.allow_pairs). */
#define OPT_PAIRS(dst)                                                                     \
    { "--pairs", OPT_STR, (dst), 0, "FILE.jsonl",                                          \
      "an encoder-decoder's source-target pairs (SPEC §17) instead of --data", 0 }
#define OPT_DATA_AS(dst, help) { "--data", OPT_STR, (dst), 0, "FILE.bin", (help), 0 }
/* Text in (SPEC §9): every command that reads --data also reads --text
 * FILE, tokenized on the fly by --tokenizer PATH or, without it, by the
 * tokenizer file of the model directory (cli_tokens_load). */
#define OPT_TEXT(dst) OPT_TEXT_AS(dst, "--text", "text file, tokenized on the fly as one document (instead of --data)")
#define OPT_TEXT_AS(dst, name, help) { (name), OPT_STR, (dst), 0, "FILE", (help), 0 }
#define OPT_TOKENIZER(dst)                                                                 \
    { "--tokenizer", OPT_STR, (dst), 0, "PATH",                                            \
      "tokenizer.json, a SentencePiece .model, or a directory holding one (or vocab.json + " \
      "merges.txt; default: the model directory's)", 0 }
/* The rules of --text in a command's rules array; with a validation text
 * (--val-text, tokenized as --text is) the second form. */
#define OPT_TEXT_RULE_DATA                                                                 \
    { "--text", OPTS_EXCLUDES, "--data", "the tokens come from the text" },                \
        { "--text", OPTS_NEEDS, "--lines", "its lines are the sequences" }
#define OPT_TEXT_RULES                                                                     \
    OPT_TEXT_RULE_DATA, { "--text", OPTS_NEEDS, "--tokenizer", "it tokenizes --text" }
#define OPT_VAL_TEXT_RULES                                                                 \
    OPT_TEXT_RULE_DATA,                                                                    \
        { "--text|--val-text", OPTS_NEEDS, "--tokenizer", "it tokenizes the text" },       \
        { "--val-text", OPTS_EXCLUDES, "--val", "one validation set" }
/* --text FILE --lines (SPEC §21): each line one sequence of its own length */
#define OPT_LINES(dst)                                                                     \
    { "--lines", OPT_FLAG, (dst), 0, NULL,                                                 \
      "each line of --text one sequence of its own length (padded, /attention_mask)", 0 }
/* --threads N: N threads (0: OpenMP's default, left as it is) */
static inline void cli_threads(int n)
{
    if (n)
        hs_set_threads(n);
}
/* the prompt pairs of the causal commands (patch, path-patch, atp, circuit)
 * of cli_study s, and the premise they rest on (SPEC §21) */
#define OPT_PROMPTS(s)                                                                             \
    { "--prompts", OPT_STR, &(s).in.prompts, 0, "FILE", "JSONL clean/corrupt prompt pairs (SPEC §11)", 0 }, \
    { "--allow-weak-premise", OPT_FLAG, &(s).allow_weak, 0, NULL, "record the numbers when the logit-difference gap is within 2 stderr of 0, marked not established", 0 }
#define OPT_PROMPT_TOKENIZER(dst)                                                                  \
    { "--tokenizer", OPT_STR, (dst), 0, "PATH",                                                    \
      "tokenizer of text prompts (default: the model directory's)", 0 }
#define OPT_DB(dst) OPT_DB_AS(dst, "SQLite index for the results")
#define OPT_DB_AS(dst, help) { "--db", OPT_STR, (dst), 0, "FILE", (help), 0 }
#define OPT_BATCH(dst) OPT_BATCH_AS(dst, "sequences per batch")
#define OPT_BATCH_AS(dst, help) { "--batch", OPT_INT, (dst), 1, "B", (help), 0 }
#define OPT_SEQ_LEN(dst) { "--seq-len", OPT_INT, (dst), 1, "T|auto", "sequence length (default: min(n_ctx, 256); auto: the whole text, one sequence)", 0 }
#define OPT_MAX_BATCHES(dst) OPT_MAX_BATCHES_AS(dst, "evaluate N batches (0: all)")
#define OPT_MAX_BATCHES_AS(dst, help) { "--max-batches", OPT_LONG, (dst), 0, "N", (help), 0 }
/* --threads, and --compute (cli_compute, applied by cli_opts_parse) */
#define OPT_THREADS(dst)                                                                   \
    { "--threads", OPT_INT, (dst), 0, "N", "threads (0: OpenMP's default)", OPT_NEUTRAL },  \
    { "--compute", OPT_STR, &cli_compute, 0, "f32|bf16",                                   \
      "products of bfloat16 weights: exact in float (f32, default) or in bfloat16 (bf16: "  \
      "activations rounded to bfloat16, AVX512-BF16; docs/guide.md#compute)", 0 }
extern const char *cli_compute;
/* --kv-plan FILE (SPEC §18): eval, generate, capture and retrieval */
#define OPT_KV_PLAN(dst)                                                                   \
    { "--kv-plan", OPT_STR, (dst), 0, "FILE.json",                                         \
      "run under a KV plan: the kv heads it does not list see its sinks and window only", 0 }
#define OPT_JSON(dst) { "--json", OPT_FLAG, (dst), 0, NULL, "print one JSON object", OPT_NEUTRAL }
/* Commands that compute losses, scores or statistics fail (exit 1, the run
 * `failed`) on the first non-finite one, naming it, unless this is given:
 * then NaN and infinities are kept (null in JSON and in the index). */
#define OPT_ALLOW_NONFINITE(dst)                                                           \
    { "--allow-nonfinite", OPT_FLAG, (dst), 0, NULL,                                       \
      "keep NaN or infinite results (weights or inputs not finite) instead of failing", 0 }

/* The masked-LM options of the commands that compute an encoder's loss
 * (eval, ablate, importance, prune: SPEC §14), into an hs_mlm_opts (mlm.h)
 * that starts HS_MLM_OPTS_UNSET and goes to the inputs (hs_inputs_spec.mlm),
 * where a causal LM refuses them; and their rule. */
#define OPT_MLM(o)                                                                         \
    { "--mlm-prob", OPT_DOUBLE, &(o)->prob, 0, "P",                                        \
      "encoders: the masked-LM share of positions chosen (default 0.15)", 0 },             \
    { "--mlm-mask", OPT_STR, &(o)->mask, 0, "every:K[:O]",                                 \
      "encoders: choose the positions t = O mod K instead, each replaced by [MASK]", 0 },  \
    { "--seed", OPT_LONG, &(o)->seed, 0, "S",                                              \
      "encoders: the seed of the masked-LM choice (default 0)", 0 }
#define OPT_MLM_RULE                                                                       \
    { "--mlm-mask", OPTS_EXCLUDES, "--mlm-prob,--seed", "it fixes the masked positions" }

/* The labelled-task options (SPEC §16) into a cli_task; and their rule
 * (--task reads no token data). */
typedef struct {
    const char *path, *metric, *label_map;
    int truncate;
} cli_task;
#define OPT_TASK(t)                                                                        \
    { "--task", OPT_STR, &(t)->path, 0, "FILE.jsonl",                                      \
      "a classifier's labelled examples (SPEC §16) instead of --data", 0 },                \
    { "--metric", OPT_STR, &(t)->metric, 0, "NAME",                                        \
      "--task's headline: accuracy, f1, mcc, pearson or spearman (default: accuracy; "     \
      "regression: pearson)", 0 },                                                         \
    { "--truncate", OPT_FLAG, &(t)->truncate, 0, NULL,                                     \
      "--task: a text longer than --seq-len loses its last tokens, not its special ones", 0 }, \
    { "--label-map", OPT_STR, &(t)->label_map, 0, "I0,I1,...",                             \
      "--task: the model's output j scores the task's label Ij", 0 }
#define OPT_TASK_RULES                                                                     \
    OPT_TEXT_RULE_DATA,                                                                    \
        { "--text|--task|--pairs", OPTS_NEEDS, "--tokenizer", "it tokenizes the text" },  \
        { "--task", OPTS_EXCLUDES, "--data,--text,--mlm-prob,--mlm-mask,--seed",           \
          "a task's examples are its own" },                                               \
        { "--task", OPTS_NEEDS, "--metric,--truncate,--label-map", "they concern a task" }

/* A prompt's ids for cmd (malloc'd into *ids): --prompt-ids "1,2,3", or
 * --prompt's text through the tokenizer, or as bytes for a byte-level model
 * (vocabulary 256, `headscope tokens` data). The count, or -1 with the
 * error printed. */
int cli_prompt_ids(const char *cmd, const char *ids_s, const char *text, const hs_tokenizer *tok,
                   int V, int32_t **ids);

/* Makes t the inputs' task (o: its storage): no token batches and no
 * masked-LM recipe then. 0, or the exit status of a bad --label-map. */
int cli_task_opts(hs_task_opts *o, const cli_task *t, hs_inputs_spec *in);

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
    const opt_rule *rules; /* checked by cli_opts_parse, listed by the help */
    int nrules;
    unsigned flags;        /* CMD_SHARDS */
} command;

/* The command shards its work across the ranks of mpirun (SPEC §12); any
 * other runs without mpirun only, since every rank would run it whole and
 * write the same outputs. */
#define CMD_SHARDS 1u

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
int cli_opts_parse(const char *cmd, opt *opts, int nopts, int argc, char **argv, const char **extra,
                   int max_extra, int *nextra);

/* 1 when the option called name was given (after cli_opts_parse). */
int cli_opts_given(const opt *opts, int nopts, const char *name);

/* The full help of a command: usage, every option with its default, the
 * rules of which options apply together, details. */
void cli_opts_help(FILE *f, const command *c, const opt *opts, int nopts);

/* A usage error: "headscope: CMD: MESSAGE (see 'headscope help CMD')", exit 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A run failure with the library's message: "headscope: CMD: MESSAGE", exit 1. */
int cli_run_error(const char *cmd);

/* hs_inputs_free(in), then the last error as a usage error (usage) or a run
 * error: a command's check of its inputs failing after they were opened. */
int cli_inputs_refused(hs_inputs *in, const char *cmd, int usage);

/* Progress on stderr when it is a terminal: "label [####    ] 42/100 rate ETA". */
typedef struct {
    const char *label;
    long total;
    double start;
    double last_draw;
    int enabled;
} cli_progress;

void cli_progress_start(cli_progress *p, const char *label, long total);
/* extra: text after the counts (e.g. "loss 3.21, 12,000 tok/s"). */
void cli_progress_update(cli_progress *p, long done, const char *extra);
void cli_progress_finish(cli_progress *p);
/* An hs_progress_fn over a cli_progress bar (ctx): sets its total, draws done. */
void cli_progress_cb(void *bar, size_t done, size_t total);

/* A cli_progress bar per phase of a library study (hs_study_io in study.h):
 * each phase label finishes the previous bar and starts the next. */
typedef struct {
    cli_progress bar; /* first: cli_progress_cb reads the ctx as a cli_progress bar */
    int active;
} phase_bars;

/* The study io over bars: phases and progress drawn on stderr, stopped by
 * cli_stop_requested when stoppable. */
struct hs_study_io cli_study_io(phase_bars *bars, int stoppable);

/* SIGBUS from a checkpoint truncated under its mapping becomes a failed run
 * naming the file (hs_st_fault, hs_model_unchanged); main installs it. */
void cli_install_fault_handler(void);

/* SIGINT/SIGTERM set this; long commands poll it and stop cleanly. */
extern volatile sig_atomic_t cli_stop_requested;
void cli_install_signal_handlers(void);

/* A command's inputs and its run (analyze/inputs.h, analyze/run.h). A
 * command parses its options, loads its inputs (cli_open), lets its study
 * check its options, opens its run only after every check has passed
 * (cli_start: bad input records nothing), runs the study, records its rows
 * (hs_run_record) and ends with cli_finish. */
typedef struct {
    hs_inputs in;
    hs_run *run;
} cli_job;

/* Loads s into j->in: 0, or the exit status with the error printed (2 when
 * the error is an option's value, such as --seq-len beyond the context). */
int cli_open(cli_job *j, const hs_inputs_spec *s);

/* The weights of a command that runs many forwards packed once into the
 * GEMM's panels (hs_model_prepack), unless HEADSCOPE_PREPACK=0; where they
 * do not fit, a note on stderr says so and they are read as stored.
 * layers: those the forwards run through (hs_model_prepack's); a study's
 * first backward packs the input gradients' panels too, where they fit
 * (hs_model_prepack_backward). */
void cli_prepack(const hs_model *m, int layers);

/* Opens the run of cli_current's kind in db (NULL: none, *run NULL), hashing
 * model_dir's model.safetensors (NULL: none) and data (NULL: none); o's
 * neutral options are left out of a resumed run's comparison. The status;
 * prints nothing. */
int cli_run_open(hs_run **run, const char *db, long long resume, const char *model_dir,
                 const char *data, const opt *o, int nopts, int argc, char **argv);

/* Opens the run of cli_current's kind in db (NULL: none) for the inputs,
 * hashing model_dir's model.safetensors and the data read; o's neutral
 * options are left out of a resumed run's comparison. 0, or the exit status
 * with the error printed and the inputs freed. */
int cli_start(cli_job *j, const char *db, long long resume, const char *model_dir,
              const opt *o, int nopts, int argc, char **argv);

/* Closes a run the command opened itself (cli_run_open) with rc, its id into
 * *id first; the failure printed (rc's, or the close's): the exit status. */
int cli_run_end(hs_run *run, int rc, long long *id);

/* Closes the run with rc (complete or failed), frees the inputs, prints the
 * failure (with how to resume an interrupted run): the exit status. */
int cli_finish(cli_job *j, int rc);




/* The one driver of the study commands: a command is its option table,
 * which parses into a cli_study (the study's options, its inputs, the
 * shared flags), and a short body that calls cli_study_run. The driver
 * parses (the record's rules; a missing input the flags name is a usage
 * error), loads the inputs (read once), runs the study's check (HS_EINVAL:
 * an option's value, exit 2; any other failure exit 1) before the run is
 * opened, runs the study, records its rows (hs_run_study_rows), closes
 * the run and prints the summary. */
enum {
    CLI_NEEDS_DATA = 1,    /* --data or --text is required */
    CLI_NEEDS_PROMPTS = 2, /* --prompts is required */
    CLI_STOPPABLE = 4,     /* SIGINT stops the study (HS_EINTR), the run left failed */
    CLI_TIMED = 8,         /* the summary reports the study's wall time */
    CLI_OWN_NEEDS = 16,    /* the command checks which inputs are there itself */
    CLI_MANY_FORWARDS = 32, /* many forwards over the weights: pre-packed first (cli_prepack) */
};

typedef struct cli_study {
    const hs_study_kind *kind;
    void *opts;            /* the study's options, which the option table fills */
    hs_inputs_spec in;     /* what the command reads; in.model is --model */
    const char *db;
    long resume, max_batches;
    int threads, json, allow_nonfinite, allow_weak; /* allow_weak: --allow-weak-premise */
    unsigned flags;
    cli_task task;         /* CLI_STUDY_TASK_OPTS: --task instead of the data */
    hs_task_opts task_opts; /* what the parse made of it */
    /* the layers the study's forwards run through, after its check (NULL:
     * all, and the unembedding): what CLI_MANY_FORWARDS packs */
    int (*layers)(const void *opts);
    /* the summary of a complete run (the result is kind's) */
    void (*print)(FILE *f, const hs_summary *s, const void *result, const void *opts);
} cli_study;

/* The options every study command ends with, and those of one reading a
 * model and tokens into the index, for a cli_study s. */
#define CLI_STUDY_TAIL_OPTS(s)                                                             \
    OPT_THREADS(&(s).threads), OPT_JSON(&(s).json), OPT_ALLOW_NONFINITE(&(s).allow_nonfinite)
#define CLI_STUDY_DATA_OPTS(s)                                                             \
    OPT_MODEL(&(s).in.model), OPT_DATA(&(s).in.source.data), OPT_TEXT(&(s).in.source.text), \
        OPT_LINES(&(s).in.source.lines), OPT_TOKENIZER(&(s).in.source.tokenizer), OPT_DB(&(s).db)

/* --task and its options, for a study that measures heads on a task too. */
#define CLI_STUDY_TASK_OPTS(s) OPT_TASK(&(s).task)

/* An experiment's training tokens and their validation part (hs_split). */
#define CLI_TRAIN_DATA_OPTS(src, vsrc)                                                      \
    OPT_DATA_AS(&(src).data, "training shard (its last 10% is the validation split unless --val)"), \
        OPT_TEXT_AS(&(src).text, "--text", "training text, tokenized on the fly (instead of --data)"), \
        OPT_LINES(&(src).lines), OPT_TOKENIZER(&(src).tokenizer),                          \
        { "--val", OPT_STR, &(vsrc).data, 0, "FILE.bin", "validation shard", 0 },          \
        OPT_TEXT_AS(&(vsrc).text, "--val-text", "validation text, tokenized as --text is")

/* The count of an option table. */
#define CLI_N(o) ((int)(sizeof(o) / sizeof((o)[0])))

/* The summary printer of study NAME for cli_study.print, over hs_print_NAME
 * (render/summary.h), whose shape is (f, s, result, opts). */
#define CLI_PRINT(NAME)                                                                    \
    static void print_##NAME(FILE *f, const hs_summary *s, const void *r, const void *o)   \
    {                                                                                      \
        hs_print_##NAME(f, s, r, o);                                                       \
    }

/* The same for a study whose result wraps a lower layer's (study.h's
 * HS_STUDY_KIND_WRAPPED): hs_print_NAME of the result's MEMBER. */
#define CLI_PRINT_WRAPPED(NAME, MEMBER)                                                    \
    static void print_##NAME(FILE *f, const hs_summary *s, const void *r, const void *o)   \
    {                                                                                      \
        (void)o;                                                                           \
        hs_print_##NAME(f, s, &((const hs_##NAME##_study_result *)r)->MEMBER);             \
    }

/* After a parse: returns the exit status once rc is set (-1: --help was
 * printed, exit 0). */
#define CLI_EXIT_IF(rc)                                                                    \
    do {                                                                                   \
        if (rc)                                                                            \
            return (rc) < 0 ? 0 : (rc);                                                    \
    } while (0)

/* Parses o and checks that every input the flags name is there: 0 to go
 * on, else the exit status (-1 once --help was printed: exit 0). */
int cli_study_parse(cli_study *s, opt *o, int n, int argc, char **argv);

/* Everything after the parse (see above): the exit status. */
int cli_study_go(cli_study *s, const opt *o, int n, int argc, char **argv);

/* cli_study_parse, then cli_study_go. */
int cli_study_run(cli_study *s, opt *o, int n, int argc, char **argv);

/* Each command's help is printed by re-running its option table with
 * --help; the commands call this when they see it. */
extern const command *cli_current;

#endif
