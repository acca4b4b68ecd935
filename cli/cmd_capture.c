/* capture and maps: stream per-head maps to HDF5 (SPEC §6) and inspect a
 * map file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "index.h"
#include "maps.h"
#include "recorder.h"
#include "sha256.h"
#include "tokens.h"

/* "0,2,5" -> list of distinct entries in [0, limit), nothing else in the
 * text. Returns the count or -1. */
static int parse_list(const char *s, int *out, int max, int limit)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= limit || n == max)
            return -1;
        for (int i = 0; i < n; i++)
            if (out[i] == v)
                return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',' && s[1])
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

typedef struct {
    const hs_tokens *tok;
    int B, T;
    int32_t *targets; /* unused by capture, needed by hs_batch_at */
} batch_src;

static int next_batch(void *ctx, size_t i, int32_t *inputs)
{
    batch_src *b = ctx;
    hs_batch_at(b->tok, i * (size_t)b->B * b->T, b->B, b->T, inputs, b->targets);
    return HS_OK;
}


int cmd_capture(int argc, char **argv)
{
    const char *model = NULL, *data = NULL, *out = NULL, *layers_s = NULL, *heads_s = NULL,
               *queries_s = NULL, *dtype = "f32", *db = NULL;
    int B = 4, T = 0, threads = 0, compress = 0, force = 0, json = 0;
    long max_batches = 0;
    opt o[] = {
        { "--model", OPT_STR, &model, 0, "DIR", "checkpoint directory", 0 },
        { "--data", OPT_STR, &data, 0, "FILE.bin", "token shard (SPEC §4)", 0 },
        { "--out", OPT_STR, &out, 0, "FILE.h5", "map file to write", 0 },
        { "--layers", OPT_STR, &layers_s, 0, "L,L,...", "layers to capture (default: all)", 0 },
        { "--heads", OPT_STR, &heads_s, 0, "H,H,...", "heads to capture in each layer (default: all)", 0 },
        { "--queries", OPT_STR, &queries_s, 0, "A:B", "query rows [A, B) (default: all)", 0 },
        { "--dtype", OPT_STR, &dtype, 0, "f32|f16", "storage type", 0 },
        { "--compress", OPT_INT, &compress, 0, "N", "shuffle + deflate level 1-9 (0: off)", 0 },
        { "--batch", OPT_INT, &B, 1, "B", "sequences per forward", 0 },
        { "--seq-len", OPT_INT, &T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--max-batches", OPT_LONG, &max_batches, 0, "N", "stop after N batches (0: all)", 0 },
        { "--threads", OPT_INT, &threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--force", OPT_FLAG, &force, 0, NULL, "overwrite an existing output", 0 },
        { "--db", OPT_STR, &db, 0, "FILE", "record the run and the map file (artifact) in this index", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("capture", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !data || !out)
        return usage_error("capture", "--model DIR, --data FILE and --out FILE.h5 are required");
    int half = !strcmp(dtype, "f16");
    if (!half && strcmp(dtype, "f32"))
        return usage_error("capture", "--dtype must be f32 or f16, not '%s'", dtype);
    if (compress > 9)
        return usage_error("capture", "--compress must be 0..9");
    if (threads)
        hs_set_threads(threads);

    hs_model m;
    if (hs_checkpoint_load(&m, model))
        return run_error("capture");
    const hs_model_config *c = &m.cfg;
    if (!T)
        T = c->n_ctx < 256 ? c->n_ctx : 256;
    unsigned char layer_on[HS_MAX_LAYERS] = { 0 };
    int list[HS_MAX_LAYERS], heads[1024], nheads = 0, q0 = 0, q1 = T;
    char bad[200] = "";
    if (layers_s) {
        int n = parse_list(layers_s, list, HS_MAX_LAYERS, c->n_layer);
        for (int i = 0; i < n; i++)
            layer_on[list[i]] = 1;
        if (n <= 0)
            snprintf(bad, sizeof bad, "--layers '%s': distinct indices 0..%d expected (the model "
                     "has %d layers)", layers_s, c->n_layer - 1, c->n_layer);
    } else {
        memset(layer_on, 1, (size_t)c->n_layer);
    }
    int min_heads = 1 << 30;
    for (int l = 0; l < c->n_layer; l++)
        if (layer_on[l] && c->n_head[l] < min_heads)
            min_heads = c->n_head[l];
    int used = 0;
    if (!*bad && heads_s && (nheads = parse_list(heads_s, heads, 1024, min_heads)) <= 0)
        snprintf(bad, sizeof bad, "--heads '%s': distinct indices 0..%d expected (the smallest "
                 "captured layer has %d heads)", heads_s, min_heads - 1, min_heads);
    if (!*bad && queries_s &&
        (sscanf(queries_s, "%d:%d%n", &q0, &q1, &used) != 2 || queries_s[used] || q0 < 0 ||
         q1 > T || q0 >= q1))
        snprintf(bad, sizeof bad, "--queries '%s': A:B with 0 <= A < B <= %d expected",
                 queries_s, T);
    if (!*bad && c->pos == HS_POS_LEARNED && T > c->n_ctx)
        snprintf(bad, sizeof bad, "--seq-len %d exceeds the model's n_ctx=%d", T, c->n_ctx);
    if (*bad) {
        hs_model_free(&m);
        return usage_error("capture", "%s", bad);
    }

    hs_tokens tok;
    if (hs_tokens_read(&tok, data)) {
        hs_model_free(&m);
        return run_error("capture");
    }
    size_t nb = 0;
    if (hs_batches_to_run(&tok, B, T, (size_t)max_batches, &nb))
        rc = hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens", data, B, T);
    char model_sha[65] = "", data_sha[65] = "", path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", model);
    char cfg_path[1100];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", model);
    char *config_text = NULL;
    /* a recorded run has hashed model and data already: hash them once */
    cli_run run = { 0 };
    if (!rc && cli_run_begin(&run, db, 0, "capture", model, path, data, argc, argv))
        rc = HS_EIO;
    if (!rc && run.ix) {
        memcpy(model_sha, run.model_sha, sizeof model_sha);
        memcpy(data_sha, run.data_sha, sizeof data_sha);
    } else if (!rc) {
        rc = hs_sha256_file(path, model_sha, NULL);
        if (!rc)
            rc = hs_sha256_file(data, data_sha, NULL);
    }
    if (!rc && !(config_text = hs_read_text(cfg_path, 1 << 20)))
        rc = HS_EIO;
    /* Handlers before the temporary file exists: a Ctrl-C from here on stops
     * cleanly and removes it. */
    cli_install_signal_handlers();
    hs_maps_writer *w = NULL;
    hs_maps_meta meta = { model_sha, config_text, data, data_sha, T, half, compress };
    if (!rc)
        rc = hs_maps_create(&w, out, &meta, force);
    for (int l = 0; !rc && l < c->n_layer; l++) {
        if (!layer_on[l])
            continue;
        int all[1024];
        for (int h = 0; h < c->n_head[l]; h++)
            all[h] = h;
        rc = hs_maps_add_layer(w, l, nheads ? nheads : c->n_head[l], nheads ? heads : all, q0,
                               q1 - q0);
    }
    free(config_text);
    if (!rc && cli_stop_requested)
        rc = hs_fail(HS_EINTR, "interrupted before the first batch");
    if (rc) {
        hs_maps_abort(w);
        hs_tokens_free(&tok);
        hs_model_free(&m);
        run_error("capture");
        cli_run_end(&run, 0, NULL);
        return EXIT_FAILURE_RUN;
    }

    int32_t *targets = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    batch_src src = { &tok, B, T, targets };
    hs_map_sink sink = hs_maps_sink(w);
    progress bar;
    progress_start(&bar, "capture", (long)nb);
    hs_record_opts ro = { B, T, nb, layer_on, &cli_stop_requested, progress_cb, &bar };
    double t0 = now_seconds();
    rc = targets ? hs_record(&m, next_batch, &src, &sink, &ro) : HS_ENOMEM;
    double secs = now_seconds() - t0;
    progress_finish(&bar);
    free(targets);
    hs_tokens_free(&tok);
    hs_model_free(&m);
    if (rc) {
        hs_maps_abort(w); /* nothing half-written is left behind */
        if (rc == HS_EINTR)
            fprintf(stderr, "headscope: capture: %s; %s was not written\n", hs_last_error(), out);
        else
            run_error("capture");
        cli_run_end(&run, 0, NULL);
        return EXIT_FAILURE_RUN;
    }
    rc = hs_maps_finish(w);
    /* the finished file, by its absolute path, as the run's artifact */
    char maps_sha[65] = "", *abs_out = rc ? NULL : realpath(out, NULL);
    uint64_t bytes = 0;
    if (!rc && run.ix)
        rc = hs_sha256_file(out, maps_sha, &bytes);
    if (!rc && run.ix)
        rc = hs_index_artifact_add(run.ix, run.run_id, abs_out ? abs_out : out, maps_sha,
                                   (int64_t)bytes, 1);
    free(abs_out);
    long long run_id = run.run_id;
    if (rc)
        run_error("capture");
    cli_run_end(&run, rc == HS_OK, NULL);
    if (rc)
        return EXIT_FAILURE_RUN;
    struct stat sb;
    bytes = stat(out, &sb) ? 0 : (uint64_t)sb.st_size;
    if (json) {
        printf("{\"out\":");
        json_string(stdout, out);
        if (db)
            printf(",\"run_id\":%lld", run_id);
        printf(",\"sequences\":%zu,\"seconds\":%.3f,\"bytes\":%llu}\n", nb * B, secs,
               (unsigned long long)bytes);
    } else {
        printf("captured %zu sequences into %s (%.1f MB, %.2f s)\n", nb * B, out, bytes / 1e6,
               secs);
        if (db)
            printf("run %lld recorded in %s\n", run_id, db);
    }
    return 0;
}

int cmd_maps(int argc, char **argv)
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
    int rc = opts_parse("maps", o, 1, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!file)
        return usage_error("maps", "a map file is required");
    hs_maps_reader *r;
    if (hs_maps_open(&r, file))
        return run_error("maps");
    const hs_maps_info *in = hs_maps_get_info(r);
    if (json) {
        printf("{\"file\":");
        json_string(stdout, file);
        printf(",\"complete\":%d,\"version\":%d,\"sequences\":%lld,\"seq_len\":%d,"
               "\"model_sha256\":\"%s\",\"data_sha256\":\"%s\",\"data_path\":",
               in->complete, in->version, in->n_seq, in->seq_len, in->model_sha256,
               in->data_sha256);
        json_string(stdout, in->data_path);
        printf(",\"tool_version\":\"%s\",\"layers\":[", in->tool_version);
        for (int i = 0; i < in->n_layers; i++) {
            const hs_maps_layer_info *l = &in->layers[i];
            printf("%s{\"layer\":%d,\"heads\":[", i ? "," : "", l->layer);
            for (int h = 0; h < l->nh; h++)
                printf("%s%d", h ? "," : "", l->heads[h]);
            printf("],\"query_start\":%d,\"queries\":%d,\"keys\":%d,\"dtype\":\"%s\"}", l->q0,
                   l->nq, l->S, l->half ? "float16" : "float32");
        }
        printf("]}\n");
    } else {
        printf("file         %s (%s)\n", file, in->complete ? "complete" : "INCOMPLETE");
        printf("sequences    %lld of length %d\n", in->n_seq, in->seq_len);
        printf("model        sha256 %s\n", in->model_sha256);
        printf("data         %s (sha256 %s)\n", in->data_path, in->data_sha256);
        printf("written by   headscope %s\n", in->tool_version);
        for (int i = 0; i < in->n_layers; i++) {
            const hs_maps_layer_info *l = &in->layers[i];
            printf("layer %2d     [%lld, %d, %d, %d] %s, queries %d..%d, heads", l->layer,
                   in->n_seq, l->nh, l->nq, l->S, l->half ? "float16" : "float32", l->q0,
                   l->q0 + l->nq - 1);
            for (int h = 0; h < l->nh; h++)
                printf(" %d", l->heads[h]);
            printf("\n");
        }
    }
    int complete = in->complete;
    hs_maps_close(r);
    if (!complete) {
        fprintf(stderr, "headscope: maps: %s is not marked complete\n", file);
        return EXIT_FAILURE_RUN;
    }
    return 0;
}

const command cmd_capture_record = {
    .name = "capture",
    .summary = "Run forwards and stream every per-head attention map to HDF5 (SPEC §6).",
    .usage = "headscope capture --model DIR --data FILE --out FILE.h5 [options]",
    .details = "The file is written under a temporary name and renamed when complete; Ctrl-C\n"
        "stops cleanly and leaves nothing. Memory holds one batch's maps of one layer.\n\n"
        "example: headscope capture --model runs/tiny --data val.bin --out maps.h5 \\\n"
        "           --batch 4 --seq-len 64 --max-batches 8 --dtype f16\n",
    .run = cmd_capture,
};

const command cmd_maps_record = {
    .name = "maps",
    .summary = "List what a map file holds (layers, shapes, dtype, provenance) and check it.",
    .usage = "headscope maps FILE.h5 [--json]",
    .details = "Exits 1 when the file is not marked complete.\n\n"
        "example: headscope maps maps.h5\n",
    .run = cmd_maps,
};
