/* info, tokens, train, eval: the model commands. Parsing and reporting
 * only; the work is in the library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "config_file.h"
#include "cli.h"
#include "describe.h"
#include "eval.h"
#include "memory.h"
#include "study.h"
#include "tokenizer.h"
#include "trainer.h"
#include "tokens.h"
#include "train.h"
#include "study_train.h"

static int cmd_info(int argc, char **argv)
{
    const char *model = NULL;
    int json = 0, B = 1, T = 0;
    opt o[] = {
        OPT_MODEL_AS(&model, "checkpoint directory (config.json + safetensors or pytorch_model.bin)"),
        OPT_BATCH_AS(&B, "the memory plan's batch (with or without --seq-len)"),
        { "--seq-len", OPT_INT, &T, 1, "T", "the memory plan's sequence length (default: min(n_ctx, 256))", 0 },
        OPT_JSON(&json),
    };
    const int n_o = CLI_N(o);
    int rc = cli_opts_parse("info", o, n_o, argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!model)
        return cli_usage_error("info", "--model DIR is required");
    const int plan = cli_opts_given(o, n_o, "--batch") || cli_opts_given(o, n_o, "--seq-len");
    return hs_describe_checkpoint(stdout, model, plan ? B : 0, T, json) ? cli_run_error("info") : 0;
}

/* ---- tokens ------------------------------------------------------------- */

/* tokens --in reads any stream (tokens --in /dev/stdin from a pipe), up to
 * this many bytes: its size is not known before, and an endless one
 * (/dev/zero) would fill the memory (4 bytes of ids a byte of text). */
#define TOKENS_STREAM_CAP ((size_t)256 << 20)

static int cmd_tokens(int argc, char **argv)
{
    int json = 0, no_special = 0;
    long seed = 1;
    hs_tokens_recipe r = { .stream_cap = TOKENS_STREAM_CAP };
    opt o[] = {
        { "--in", OPT_STR, &r.in, 0, "TEXT", "input file, read as bytes", 0 },
        { "--out", OPT_STR, &r.out, 0, "FILE.bin", "token shard to write (uint16, version 1)", 0 },
        { "--tokenizer", OPT_STR, &r.tokenizer, 0, "PATH", "encode the text with this tokenizer (tokenizer.json or a directory; uint32 version-7 shard from 65536 ids)", 0 },
        { "--no-special", OPT_FLAG, &no_special, 0, NULL, "with --tokenizer: no post-processor special tokens", 0 },
        { "--repeat-share", OPT_DOUBLE, &r.share, 0, "P", "plant a repeated segment in this share of the sequences", 0 },
        { "--seq-len", OPT_INT, &r.seq_len, 2, "T", "with --repeat-share: the sequence length batches will read", 0 },
        { "--repeat-len", OPT_STR, &r.repeat_len, 0, "MIN:MAX", "length of a planted segment (default 8:T/2)", 0 },
        { "--random-share", OPT_DOUBLE, &r.random_share, 0, "Q", "share of the planted segments made of uniform random bytes", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the planted segments", 0 },
        { "--force", OPT_FLAG, &r.force, 0, NULL, "overwrite an existing output", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = cli_opts_parse("tokens", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    r.special = !no_special, r.seed = (unsigned long long)seed;
    hs_tokens_made m;
    int lo, hi;
    if (hs_tokens_recipe_check(&r, &lo, &hi))
        return cli_usage_error("tokens", "%s", hs_last_error());
    if (hs_tokens_make(&m, &r))
        return cli_run_error("tokens");
    if (json) {
        printf("{\"out\":"), hs_json_string(stdout, r.out);
        printf(",\"tokens\":%zu,\"vocab_size\":%d,\"planted\":%zu}\n", m.n, m.vocab, m.planted);
    } else {
        printf("wrote %zu tokens to %s (%s %d)\n", m.n, r.out,
               r.tokenizer ? "vocabulary of" : "byte-level vocabulary of", m.vocab);
        if (r.share > 0)
            printf("planted a repeated segment in %zu of %zu sequences of %d\n", m.planted,
                   m.n / (size_t)r.seq_len, r.seq_len);
    }
    return 0;
}

/* ---- eval ----------------------------------------------------------------- */

/* eval --task: the classifier's numbers on a task file (SPEC §16). */
static int eval_task(const cli_task *task, hs_inputs_spec *in, int json)
{
    hs_task_opts o;
    cli_job j;
    int rc = cli_task_opts(&o, task, in);
    if (rc || (rc = cli_open(&j, in)))
        return rc;
    hs_task_eval_result r;
    if (j.in.task.n > in->batch) /* a forward a batch */
        cli_prepack(&j.in.m, j.in.m.cfg.n_layer);
    rc = hs_task_eval(&r, &j.in.m, &j.in.task, in->batch, NULL) || hs_model_unchanged(&j.in.m);
    hs_inputs_free(&j.in);
    if (rc)
        return cli_run_error("eval");
    hs_print_task_eval(stdout, &(hs_summary){ .json = json }, &r);
    return 0;
}

static int cmd_eval(int argc, char **argv)
{
    const char *model = NULL;
    hs_mlm_opts mlm = HS_MLM_OPTS_UNSET;
    hs_inputs_spec in = { .batch = 4, .need_batch = 1, .mlm = &mlm, .allow_pairs = 1 };
    int threads = 0, json = 0, allow_nonfinite = 0, bleu = 0;
    long max_batches = 0;
    cli_task task = { 0 };
    opt o[] = {
        { "--model", OPT_STR, &model, 0, "DIR", "checkpoint directory", 0 },
        { "--data", OPT_STR, &in.source.data, 0, "FILE.bin", "token shard (SPEC §4)", 0 },
        OPT_TEXT(&in.source.text),
        OPT_LINES(&in.source.lines),
        OPT_TOKENIZER(&in.source.tokenizer),
        { "--batch", OPT_INT, &in.batch, 1, "B", "sequences per batch", 0 },
        OPT_SEQ_LEN(&in.seq_len),
        { "--max-batches", OPT_LONG, &max_batches, 0, "N", "stop after N batches (0: all)", 0 },
        OPT_MLM(&mlm),
        OPT_TASK(&task),
        OPT_PAIRS(&in.pairs),
        { "--bleu", OPT_FLAG, &bleu, 0, NULL, "with --pairs: also the corpus BLEU of the greedy outputs (sacreBLEU's defaults)", 0 },
        OPT_KV_PLAN(&in.kv_plan),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow_nonfinite),
    };
    int rc = cli_opts_parse("eval", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    const char *data = in.pairs ? in.pairs : hs_source_path(&in.source);
    if (!model || (!data && !task.path))
        return cli_usage_error("eval", "--model DIR and --data, --text, --task or --pairs are required");
    cli_threads(threads), in.model = model, in.keep_tokenizer = bleu; /* BLEU detokenizes */
    if (task.path)
        return eval_task(&task, &in, json);
    cli_job j;
    if ((rc = cli_open(&j, &in)))
        return rc;
    const int B = j.in.batch, T = j.in.seq_len, n_pairs = j.in.pairs.n;
    const long total = n_pairs ? (n_pairs + B - 1) / B : (long)hs_batch_count(&j.in.tok, B, T);
    const long batches = max_batches && max_batches < total ? max_batches : total;
    if (batches > 1) /* a forward a batch */
        cli_prepack(&j.in.m, j.in.m.cfg.n_layer);
    cli_progress bar;
    cli_progress_start(&bar, "eval", batches);
    hs_eval_result r;
    rc = n_pairs ? hs_pairs_eval(&r, &j.in.m, &j.in.pairs, B, (size_t)max_batches, cli_progress_cb, &bar)
                 : hs_evaluate(&r, &j.in.m, &j.in.tok, B, T, (size_t)max_batches, NULL, cli_progress_cb, &bar);
    rc = rc || (bleu && hs_pairs_bleu(&r, &j.in.m, &j.in.pairs, j.in.tk)) || hs_model_unchanged(&j.in.m);
    cli_progress_finish(&bar);
    hs_inputs_free(&j.in);
    if (rc)
        return fprintf(stderr, "headscope: eval: %s: %s\n", data, hs_last_error()), EXIT_FAILURE_RUN;
    if (!allow_nonfinite && hs_eval_check_finite(&r))
        return cli_run_error("eval");
    hs_print_eval(stdout, &(hs_summary){ .json = json }, &r);
    return 0;
}

/* ---- train ---------------------------------------------------------------- */

typedef struct {
    cli_progress bar;
    int json;
} train_ctx;

static void train_step(void *ctx, long step, double loss, double tokens_per_s)
{
    train_ctx *t = ctx;
    char extra[96];
    snprintf(extra, sizeof extra, "loss %.4f, %.0f tok/s", loss, tokens_per_s);
    cli_progress_update(&t->bar, step, extra);
}

static void train_val(void *ctx, long step, double loss, double se)
{
    train_ctx *t = ctx;
    if (!t->bar.enabled && !t->json)
        fprintf(stderr, "step %ld: val loss %.4f ± %.4f\n", step, loss, se);
}

/* The model to train: a preset with its overrides, randomly initialised
 * from seed, or a checkpoint (with a note of what it leaves out); *T
 * resolved against it. 0 or the exit status (the error printed). */
static int train_model(hs_model *m, int *T, const char *preset, const char *config,
                       const char **overrides, int noverrides, long seed, int seed_given,
                       const char *init)
{
    hs_model_config c;
    if (preset && hs_config_build(&c, preset, overrides, noverrides))
        return cli_usage_error("train", "%s", hs_last_error());
    if (hs_train_model_open(m, &c, config, init, (unsigned long long)seed))
        return cli_run_error("train");
    if (init && seed_given && !m->cfg.encoder) /* sweep scripts pass it to all */
        fprintf(stderr, "headscope: train: note: --seed seeds nothing with --init (the weights "
                "come from %s)\n", init);
    if (m->cfg.hidden_dropout > 0 || m->cfg.attn_dropout > 0)
        fprintf(stderr, "headscope: train: note: no dropout is applied (config.json asks for "
                "%g and %g)\n", m->cfg.hidden_dropout, m->cfg.attn_dropout);
    *T = hs_seq_len_or_default(&m->cfg, *T);
    if (!hs_seq_len_check(&m->cfg, *T, "--seq-len"))
        return 0;
    hs_model_free(m);
    return cli_usage_error("train", "%s", hs_last_error());
}

/* Runs the study into the run and reports its end: the exit status. */
static int train_run(hs_model *m, const hs_tokens *tok, hs_train_study_opts *so, hs_run *run,
                     const char *db, int json)
{
    train_ctx ctx = { .json = json };
    so->ix = hs_run_index(run), so->run_id = hs_run_id(run);
    so->on_step = train_step, so->on_val = train_val, so->ctx = &ctx;
    so->train.stop = &cli_stop_requested;
    cli_install_signal_handlers();
    hs_train_result r;
    cli_progress_start(&ctx.bar, "train", so->train.steps);
    int rc = hs_train_study(&r, m, tok, so);
    cli_progress_finish(&ctx.bar);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    if (hs_run_close(run, rc, r.saved ? r.model_sha : NULL) && !rc)
        rc = HS_EIO, snprintf(msg, sizeof msg, "%s", hs_last_error());
    if (rc == HS_EINTR && r.saved) {
        fprintf(stderr, "headscope: train: %s; the last completed step is saved in %s\n", msg,
                so->out);
        return EXIT_FAILURE_RUN;
    }
    if (rc) {
        fprintf(stderr, "headscope: train: %s\n", msg);
        return EXIT_FAILURE_RUN;
    }
    if (r.curve_failed)
        fprintf(stderr, "headscope: train: warning: some curve points were not recorded in %s\n",
                db);
    hs_print_train(stdout, &(hs_summary){ so->run_id, db, 0, json }, &r, &so->train, so->out);
    return 0;
}

/* The options that must hold before anything loads: 0 or the exit status. */
static int train_checks(const hs_train_study_opts *so, const char *data, const char *preset,
                        const char *config, const char *init, int noverrides, int force)
{
    if (!so->out || !data)
        return cli_usage_error("train", "--out DIR and --data FILE (or --text FILE, --task "
                                        "FILE.jsonl or --pairs FILE.jsonl) are required");
    if (!!preset + !!config + !!init != 1)
        return cli_usage_error("train", "give exactly one of --preset P, --config FILE and "
                                        "--init DIR");
    if (!preset && noverrides)
        return cli_usage_error("train", "KEY=VALUE overrides apply to --preset only");
    if (!(so->train.lr > 0))
        return cli_usage_error("train", "--lr must be positive");
    char target[1100];
    snprintf(target, sizeof target, "%s/model.safetensors", so->out);
    return hs_output_free(target, force) ? cli_run_error("train") : 0;
}

/* train on token data (src, and vsrc when `val`) into a run of db: the exit
 * status. The model a training run produces is recorded when it finishes. */
static int train_tokens(hs_model *m, hs_train_study_opts *so, const hs_source *src,
                        hs_source *vsrc, int val, const char *init, long seed, const char *db,
                        const opt *o, int n, int argc, char **argv, int json)
{
    hs_train_opts *to = &so->train;
    hs_tokens tok = { 0 }, vtok = { 0 };
    to->val = val ? &vtok : NULL;
    hs_run *run = NULL;
    vsrc->tokenizer = src->tokenizer;
    const int rc = hs_train_data_load(&tok, &vtok, m, src, vsrc, init, to->B, to->T, so->out,
                                      seed) ||
                           cli_run_open(&run, db, 0, NULL, hs_source_path(src), o, n, argc, argv)
                       ? cli_run_error("train")
                       : train_run(m, &tok, so, run, db, json);
    hs_tokens_free(&tok);
    hs_tokens_free(&vtok);
    return rc;
}

/* train --pairs (SPEC §17): the encoder-decoder m on its pairs (validated
 * on val when given), into a run of db. The exit status. */
static int train_pairs(hs_model *m, hs_train_study_opts *so, const char *path, const char *val,
                       const char *tokenizer, const char *init, const char *db, const opt *o,
                       int n, int argc, char **argv, int json)
{
    hs_pairs p = { 0 }, vp = { 0 };
    hs_run *run = NULL;
    so->pairs = &p, so->val_pairs = val ? &vp : NULL;
    const int rc = hs_train_pairs_load(&p, &vp, m, path, val, tokenizer, init, so->out) ||
                           cli_run_open(&run, db, 0, NULL, path, o, n, argc, argv)
                       ? cli_run_error("train")
                       : train_run(m, NULL, so, run, db, json);
    hs_pairs_free(&p);
    hs_pairs_free(&vp);
    return rc;
}

/* train --task (SPEC §16): m (with a new head of num_labels outputs when
 * given) fine-tuned on the task, into a run of db. The exit status. */
static int train_task(hs_model *m, const cli_task *task, int num_labels, long seed,
                      hs_train_study_opts *so, const char *tokenizer, const char *init,
                      const char *db, const opt *o, int n, int argc, char **argv, int json)
{
    hs_model with_head = { 0 };
    if (num_labels && hs_task_add_head(&with_head, m, num_labels, (unsigned long long)seed))
        return cli_run_error("train");
    if (num_labels)
        hs_model_free(m), *m = with_head;
    hs_inputs_spec in = { .seq_len = so->train.T };
    hs_task_opts to;
    hs_tokenizer *tk = NULL;
    hs_task t = { 0 };
    hs_run *run = NULL;
    int rc = cli_task_opts(&to, task, &in);
    if (!rc)
        rc = hs_tokenizer_resolve(&tk, tokenizer, init) || hs_task_load(&t, &to, &m->cfg, tk) ||
                     cli_run_open(&run, db, 0, NULL, task->path, o, n, argc, argv)
                 ? cli_run_error("train")
                 : (so->task = &t, train_run(m, NULL, so, run, db, json));
    hs_task_free(&t);
    if (tk)
        hs_tokenizer_free(tk);
    return rc;
}

static int cmd_train(int argc, char **argv)
{
    const char *preset = NULL, *init = NULL, *db = NULL, *config = NULL, *pairs = NULL;
    const char *val_pairs = NULL;
    hs_source src = { 0 }, vsrc = { 0 };
    int threads = 0, json = 0, force = 0, num_labels = 0;
    long seed = 1, val_batches = 8;
    cli_task task = { 0 };
    hs_train_study_opts so = { .train = { .B = 4, .steps = 100, .lr = 1e-3, .val_batches = 8 } };
    hs_train_opts *to = &so.train;
    opt o[] = {
        { "--out", OPT_STR, &so.out, 0, "DIR", "where the trained checkpoint is written", 0 },
        { "--preset", OPT_STR, &preset, 0, "P", "gpt2, llama, gpt_neox, mistral, qwen2, mla, attn-only, tinylm, bert, roberta, ...; KEY=VALUE arguments override its config.json fields", 0 },
        { "--init", OPT_STR, &init, 0, "DIR", "start from this checkpoint instead of a preset", 0 },
        { "--config", OPT_STR, &config, 0, "FILE", "a config.json (any family's keys) of the model, initialised by --seed", 0 },
        OPT_DATA_AS(&src.data, "training token shard"),
        OPT_TEXT_AS(&src.text, "--text", "training text, tokenized on the fly (instead of --data)"),
        OPT_LINES(&src.lines),
        OPT_TOKENIZER(&src.tokenizer),
        { "--steps", OPT_LONG, &to->steps, 1, "N", "optimizer steps", 0 },
        OPT_BATCH_AS(&to->B, "sequences per step"),
        { "--seq-len", OPT_INT, &to->T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--lr", OPT_DOUBLE, &to->lr, 0, "LR", "learning rate (constant unless --warmup)", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the preset's random initialisation", 0 },
        { "--weight-decay", OPT_DOUBLE, &to->weight_decay, 0, "W", "> 0 selects AdamW with this decay", 0 },
        { "--clip", OPT_DOUBLE, &to->clip, 0, "C", "clip the global gradient norm (0: off)", 0 },
        { "--warmup", OPT_LONG, &to->warmup, 0, "N", "linear learning-rate warmup steps (0: off)", 0 },
        { "--val", OPT_STR, &vsrc.data, 0, "FILE.bin", "validation shard", 0 },
        OPT_TEXT_AS(&vsrc.text, "--val-text", "validation text, tokenized as --text is"),
        { "--val-every", OPT_LONG, &to->val_every, 0, "N", "validate every N steps (default: steps/10)", 0 },
        { "--val-batches", OPT_LONG, &val_batches, 0, "N", "validation batches (0: all)", 0 },
        OPT_DB_AS(&db, "SQLite index for the run and its loss curves"),
        OPT_TASK(&task),
        { "--num-labels", OPT_INT, &num_labels, 0, "K", "--task: a new classification head of K labels", 0 },
        OPT_PAIRS(&pairs),
        { "--val-pairs", OPT_STR, &val_pairs, 0, "FILE.jsonl", "--pairs: validation pairs", 0 },
        OPT_THREADS(&threads),
        { "--force", OPT_FLAG, &force, 0, NULL, "overwrite an existing checkpoint in --out", 0 },
        OPT_JSON(&json),
    };
    const char *overrides[64];
    int noverrides = 0;
    const int n = CLI_N(o);
    int rc = cli_opts_parse("train", o, n, argc, argv, overrides, 64, &noverrides);
    CLI_EXIT_IF(rc);
    const char *data = task.path ? task.path : pairs ? pairs : hs_source_path(&src);
    if ((rc = train_checks(&so, data, preset, config, init, noverrides, force)))
        return rc;
    cli_threads(threads);
    hs_model m;
    if ((rc = train_model(&m, &to->T, preset, config, overrides, noverrides, seed,
                          cli_opts_given(o, n, "--seed"), init)))
        return rc;
    to->val_batches = (size_t)val_batches;
    rc = pairs ? train_pairs(&m, &so, pairs, val_pairs, src.tokenizer, init, db, o, n, argc, argv, json)
         : task.path ? train_task(&m, &task, num_labels, seed, &so, src.tokenizer, init, db, o, n, argc, argv, json)
                     : train_tokens(&m, &so, &src, &vsrc, hs_source_path(&vsrc) != NULL, init, seed, db, o, n, argc, argv, json);
    hs_model_free(&m);
    return rc;
}

static const opt_rule tokens_rules[] = {
    { "--repeat-share", OPTS_NEEDS, "--seq-len,--repeat-len,--random-share,--seed",
      "they shape the planted segments" },
    { "--tokenizer", OPTS_NEEDS, "--no-special", "it leaves out the tokenizer's special tokens" },
};

static const opt_rule train_rules[] = {
    OPT_TEXT_RULE_DATA,
    { "--text|--val-text|--task|--pairs", OPTS_NEEDS, "--tokenizer", "it tokenizes the text" },
    { "--val-text", OPTS_EXCLUDES, "--val", "one validation set" },
    { "--task", OPTS_EXCLUDES, "--data,--text,--val,--val-text,--val-every,--val-batches",
      "a task's examples are its own" },
    { "--task", OPTS_NEEDS, "--num-labels,--metric,--truncate,--label-map", "they concern a task" },
    { "--val|--val-text|--val-pairs", OPTS_NEEDS, "--val-every,--val-batches",
      "they set the validation on --val" },
    { "--pairs", OPTS_EXCLUDES, "--data,--text,--task,--val,--val-text", "an encoder-decoder's pairs are its data" },
    { "--pairs", OPTS_NEEDS, "--val-pairs", "they validate training on --pairs" },
};

static const opt_rule eval_rules[] = {
    OPT_TASK_RULES,
    OPT_MLM_RULE,
    { "--pairs", OPTS_NEEDS, "--bleu", "it decodes the pairs' sources" },
};

HS_COMMAND(cmd_info_record) = {
    .name = "info",
    .order = 30,
    .summary = "Describe a checkpoint from its headers: configuration, heads, KV-cache bytes, memory plan.",
    .usage = "headscope info --model DIR [--batch B] [--seq-len T] [--json]",
    .details = "Reads config.json and the safetensors headers, and of the weights only W_o's\n"
               "first elements (a head whose columns are all zero is dead), so it is quick on\n"
               "any size. With --batch or --seq-len: the memory plan, what a forward, one\n"
               "with maps, a backward and training allocate for B x T (beyond the machine's\n"
               "memory and swap, a command refuses before it starts).\n"
               "example: headscope info --model runs/tiny\n"
               "example: headscope info --model runs/tiny --batch 8 --seq-len 128 --json\n",
    .run = cmd_info,
};

HS_COMMAND(cmd_tokens_record) = {
    .name = "tokens",
    .order = 40,
    .summary = "Write a token shard: bytes (vocabulary 256), or text through --tokenizer.",
    .usage = "headscope tokens --in TEXT --out FILE.bin [options]",
    .details = "With --tokenizer PATH the file's text (UTF-8) is encoded as one document, as\n"
        "`headscope tokenize` does; the shard holds uint16 tokens when the vocabulary has\n"
        "fewer than 65536 ids, else uint32 (llm.c's version 7).\n"
        "With --repeat-share P --seq-len T the bytes are read as sequences of T (the\n"
        "ones a batch of T reads) and a share P of them gets a segment (--repeat-len,\n"
        "default 8:T/2 tokens) copied right after itself, at a random place; with\n"
        "--random-share Q a share Q of those segments is uniform random bytes first,\n"
        "so only copying can predict the repeat: data on which induction heads form.\n\n"
        "example: headscope tokens --in corpus.txt --out corpus.bin\n"
        "example: headscope tokens --in corpus.txt --out mixed.bin --repeat-share 0.5 --seq-len 64\n"
        "example: headscope tokens --tokenizer models/llama3 --in corpus.txt --out corpus.bin\n",
    .run = cmd_tokens,
    OPT_RULES(tokens_rules),
};

HS_COMMAND(cmd_train_record) = {
    .name = "train",
    .order = 50,
    .summary = "Train a model from a preset, a config.json or a checkpoint with Adam (AdamW with --weight-decay); an encoder-decoder on pairs.",
    .usage = "headscope train --out DIR (--preset P [KEY=VALUE ...] | --init DIR)\n       (--data FILE | --text FILE | --task FILE.jsonl [--num-labels K]) [options]",
    .details = "Batches follow llm.c: step i reads B*T+1 tokens from i*B*T, wrapping to the start.\n"
        "The loss is the mean over the batch's B*T targets (an encoder's, bert or roberta:\nthe masked-LM loss over its chosen positions, drawn anew each step from --seed).\nDefaults add nothing unasked:\n"
        "constant learning rate, no clipping, no decay. Ctrl-C stops after the current step\n"
        "and saves it (exit 1).\n"
        "KEY=VALUE overrides may come in any order: n_kv_head and head_dim (gpt2: d_ff)\n"
        "follow n_head and d_model unless given, so 'n_kv_head=1 n_head=8' is MQA.\n"
        "--task (SPEC §16) fine-tunes a classifier on labelled examples (each step the next\n"
        "--batch of the file, wrapping; the mean task loss); --num-labels K first gives the\n"
        "model a new …ForSequenceClassification head of K labels.\n\n"
        "example: headscope train --preset attn-only n_layer=2 n_head=4 --data corpus.bin \\\n"
        "           --out runs/tiny --steps 500 --batch 8 --seq-len 64 --val val.bin --db runs.db\n",
    .run = cmd_train,
    OPT_RULES(train_rules),
};

HS_COMMAND(cmd_eval_record) = {
    .name = "eval",
    .order = 60,
    .summary = "Mean loss of a model on a token shard (an encoder's: masked-LM), a classifier's task numbers, or an encoder-decoder's pairs (and BLEU).",
    .usage = "headscope eval --model DIR (--data FILE | --text FILE | --task FILE.jsonl | --pairs FILE.jsonl) [options]",
    .details = "stderr is the sample standard deviation of per-sequence mean losses over sqrt(n).\nAn encoder's (bert, roberta) loss is the masked-LM loss over the chosen positions (SPEC §14).\n"
        "With --task (a …ForSequenceClassification checkpoint, SPEC §16): task_loss with its\n"
        "standard error over examples, and accuracy, f1, mcc (single-label), accuracy, f1\n"
        "(multi-label) or pearson, spearman (regression), each with its jackknife standard\n"
        "error. Lines: {\"text\": S, \"label\": L}, {\"text\": S, \"text_pair\": S2, \"label\": L}\n"
        "(the tokenizer's pair template and token types) or {\"ids\": [...], \"token_type_ids\":\n"
        "[...], \"label\": L}, L a class, an id2label name, a number or a list of 0/1;\n"
        "examples are right-padded.\n\n"
        "example: headscope eval --model runs/tiny --data val.bin --batch 8 --seq-len 64 --json\n"
        "example: headscope eval --model bert-mnli --task mnli-dev.jsonl --label-map 2,1,0 --json\n",
    .run = cmd_eval,
    OPT_RULES(eval_rules),
};
