/* capture and maps: stream per-head maps to HDF5 (SPEC §6) and inspect a
 * map file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "describe.h"
#include "kv_plan.h"
#include "maps.h"
#include "pairs.h"
#include "study.h"
#include "tokens.h"
#include "study_capture.h"

/* Reads the data (and the tokenizer that applies), opens the run, captures
 * and records the file; frees m. The exit status. */
static int capture_run(hs_model *m, const hs_source *src, hs_capture_opts co, const char *db,
                       int json, const opt *o, int nopts, int argc, char **argv,
                       hs_tokens *task)
{
    cli_job j = { 0 };
    size_t nb = 0;
    if (task) /* a task's examples (capture_task): the job owns them from here */
        j.in.tok = *task, memset(task, 0, sizeof *task);
    int rc = co.pairs ? hs_pairs_load(&j.in.pairs, co.pairs, &m->cfg, &j.in.tk, src->tokenizer, co.model_dir, 0)
             : hs_tokenizer_resolve(&j.in.tk, src->tokenizer, co.model_dir) || /* token_text */
                   (!j.in.tok.n && hs_source_load(&j.in.tok, src, &j.in.tk, co.model_dir, m->cfg.vocab_size)) ||
                   hs_capture_batches(&nb, &co, &j.in.tok);
    j.in.m = *m; /* the job owns the model from here */
    j.in.data_path = co.data_path;
    if (rc)
        return cli_inputs_refused(&j.in, "capture", 0);
    if ((rc = cli_start(&j, db, 0, co.model_dir, o, nopts, argc, argv)))
        return rc;
    co.tokenizer = j.in.tk;
    /* a recorded run has hashed model and data already: hash them once */
    co.model_sha = hs_run_model_sha(j.run), co.data_sha = hs_run_data_sha(j.run);
    hs_capture_result r;
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    if (!co.pairs && nb > 1) /* a forward a batch */
        cli_prepack(&j.in.m, j.in.m.cfg.n_layer);
    rc = co.pairs ? hs_capture_pairs(&r, &j.in.m, &j.in.pairs, co, &io) : hs_capture(&r, &j.in.m, &j.in.tok, co, &io);
    /* the finished file, by its absolute path, as the run's artifact, with
     * the digest of the file the capture moved there (hashing the name now
     * could hash another writer's file) */
    char *abs_out = rc ? NULL : realpath(co.out, NULL);
    if (!rc)
        rc = hs_run_artifact(j.run, abs_out ? abs_out : co.out, r.sha256, (long long)r.bytes);
    free(abs_out);
    const long long id = hs_run_id(j.run);
    if ((rc = cli_finish(&j, rc)))
        return rc;
    hs_print_capture(stdout, &(hs_summary){ id, db, 0, json }, &co, &r);
    return 0;
}

/* Loads the model (and with --task the task, with --lines the text's lines,
 * with --seq-len auto the whole text or shard as the data), checks the
 * selection against it and captures: the exit status. */
static int capture_model(hs_capture_opts *co, const hs_source *src, const cli_task *task,
                         const char *db, int json, const opt *o, int n, int argc, char **argv)
{
    const int lines = src->lines;
    hs_model m;
    hs_capture_plan plan;
    hs_task_opts to;
    hs_capture_task ct = { 0 }; /* --task, --lines, --seq-len auto: the examples as the data */
    hs_inputs_spec in = { .seq_len = co->seq_len };
    const int whole = co->seq_len == HS_SEQ_LEN_AUTO, examples = task->path || lines || whole;
    int rc = 0;
    if (hs_checkpoint_load_stored(&m, co->model_dir, HS_WEIGHTS_MAPPED) ||
        (co->kv_plan && hs_kv_plan_load(&m.cfg, co->kv_plan) && (hs_model_free(&m), 1)))
        return cli_run_error("capture");
    co->seq_len = whole ? 0 : co->seq_len; /* lines: each its own length */
    if (task->path && !(rc = cli_task_opts(&to, task, &in)) &&
        hs_capture_task_load(&ct, co, &to, &m, src->tokenizer))
        rc = cli_run_error("capture");
    else if (!task->path && examples && hs_capture_lines_load(&ct, co, src, !lines, &m))
        rc = cli_run_error("capture");
    if (!rc && hs_capture_check(&plan, co, &m.cfg))
        rc = cli_usage_error("capture", "%s", hs_last_error());
    if (rc) {
        hs_model_free(&m);
        hs_capture_task_free(&ct);
        return rc;
    }
    rc = capture_run(&m, src, *co, db, json, o, n, argc, argv, examples ? &ct.tokens : NULL);
    hs_capture_task_free(&ct);
    return rc;
}

static int cmd_capture(int argc, char **argv)
{
    const char *model = NULL, *dtype = "f32", *db = NULL;
    hs_source src = { 0 };
    int threads = 0, json = 0;
    long max_batches = 0;
    hs_capture_opts co = { .batch = 4 };
    cli_task task = { 0 };
    opt o[] = {
        OPT_MODEL(&model),
        OPT_DATA_AS(&src.data, "token shard (SPEC §4)"),
        OPT_TEXT(&src.text),
        OPT_LINES(&src.lines),
        { "--tokenizer", OPT_STR, &src.tokenizer, 0, "PATH", "tokenizer of --text, or of --data's tokens for /token_text (default: the model directory's, if any)", 0 },
        OPT_PAIRS(&co.pairs),
        { "--out", OPT_STR, &co.out, 0, "FILE.h5", "map file to write", 0 },
        { "--layers", OPT_STR, &co.layers, 0, "L,L,...", "layers to capture (default: all)", 0 },
        { "--heads", OPT_STR, &co.heads, 0, "H,H,...", "heads to capture in each layer (default: all)", 0 },
        { "--queries", OPT_STR, &co.queries, 0, "A:B", "query rows [A, B) (default: all)", 0 },
        { "--dtype", OPT_STR, &dtype, 0, "f32|f16", "storage type", 0 },
        { "--compress", OPT_INT, &co.compress, 0, "N", "shuffle + deflate level 1-9 (0: off)", 0 },
        OPT_BATCH_AS(&co.batch, "sequences per forward"),
        OPT_SEQ_LEN(&co.seq_len),
        OPT_MAX_BATCHES_AS(&max_batches, "stop after N batches (0: all)"),
        OPT_THREADS(&threads),
        { "--force", OPT_FLAG, &co.force, 0, NULL, "overwrite an existing output", 0 },
        OPT_DB_AS(&db, "record the run and the map file (artifact) in this index"),
        OPT_KV_PLAN(&co.kv_plan),
        OPT_TASK(&task),
        OPT_JSON(&json),
    };
    const int n = CLI_N(o);
    int rc = cli_opts_parse("capture", o, n, argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    const char *data = task.path ? task.path : co.pairs ? co.pairs : hs_source_path(&src);
    if (!model || !data || !co.out)
        return cli_usage_error("capture", "--model DIR, --data FILE (or --text FILE, --pairs FILE) and --out FILE.h5 are required");
    co.half = !strcmp(dtype, "f16");
    if (!co.half && strcmp(dtype, "f32"))
        return cli_usage_error("capture", "--dtype must be f32 or f16, not '%s'", dtype);
    if (co.compress > 9)
        return cli_usage_error("capture", "--compress must be 0..9");
    cli_threads(threads);
    co.max_batches = (size_t)max_batches, co.model_dir = model, co.data_path = data;
    return capture_model(&co, &src, &task, db, json, o, n, argc, argv);
}

static int cmd_maps(int argc, char **argv)
{
    int json = 0;
    opt o[] = { { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 } };
    const char *file = NULL;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            file = argv[i];
            for (int k = i; k + 1 < argc; k++)
                argv[k] = argv[k + 1];
            argc--;
            break;
        }
    int rc = cli_opts_parse("maps", o, 1, argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!file)
        return cli_usage_error("maps", "a map file is required");
    hs_maps_reader *r;
    if (hs_maps_open(&r, file))
        return cli_run_error("maps");
    const hs_maps_info *in = hs_maps_get_info(r);
    hs_describe_maps(stdout, r, file, json);
    int complete = in->complete;
    hs_maps_close(r);
    if (!complete) {
        fprintf(stderr, "headscope: maps: %s is not marked complete\n", file);
        return EXIT_FAILURE_RUN;
    }
    return 0;
}

static const opt_rule capture_rules[] = {
    { "--task", OPTS_EXCLUDES, "--data,--text", "a task's examples are its own" },
    { "--task", OPTS_NEEDS, "--metric,--truncate,--label-map", "they concern a task" },
    OPT_TEXT_RULE_DATA,
};

HS_COMMAND(cmd_capture_record) = {
    .name = "capture",
    .flags = CMD_SHARDS,
    .order = 70,
    .summary = "Run forwards and stream every per-head attention map to HDF5 (SPEC §6).",
    .usage = "headscope capture --model DIR (--data FILE | --text FILE) --out FILE.h5 [options]",
    .details = "The file is written under a temporary name and renamed when complete; Ctrl-C\n"
        "stops cleanly and leaves nothing. Memory holds one batch's maps of one layer.\n"
        "When a tokenizer is known (--tokenizer, or a tokenizer.json in the model\n"
        "directory) the file also holds /token_text, the display string of every token,\n"
        "which plot map puts on its axes. --text FILE is tokenized as one document with\n"
        "the special tokens (HF tokenizer(text)); data_sha256 is then the text file's.\n\n"
        "example: headscope capture --model runs/tiny --data val.bin --out maps.h5 \\\n"
        "           --batch 4 --seq-len 64 --max-batches 8 --dtype f16\n"
        "example: headscope capture --model runs/pythia --text probe.txt --out probe.h5 \\\n"
        "           --batch 1 --seq-len 48\n",
    .run = cmd_capture,
    OPT_RULES(capture_rules),
};

HS_COMMAND(cmd_maps_record) = {
    .name = "maps",
    .order = 80,
    .summary = "List what a map file holds (layers, shapes, dtype, provenance) and check it.",
    .usage = "headscope maps FILE.h5 [--json]",
    .details = "Exits 1 when the file is not marked complete.\n\n"
        "example: headscope maps maps.h5\n",
    .run = cmd_maps,
};
