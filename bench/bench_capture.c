/* Capture throughput: the same batches run as a plain forward (no maps) and
 * as a capture to HDF5, for bench/capture.sh.
 *
 *   bench_capture --threads N --config L,d,H,T --batch B --batches K --out FILE.h5
 *                 [--dtype f32|f16] [--compress N] [--vocab V]
 * prints one JSON line: forward seconds, capture seconds, maps written per
 * second ((sequence, layer, head) maps of T x T), MB/s of map data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "maps.h"
#include "recorder.h"
#include "transformer.h"
#include "bench_util.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_capture: %s: %s\n", what, hs_last_error());
    exit(1);
}

typedef struct {
    int32_t *tok;
    int B, T;
} source;

static int next_batch(void *ctx, size_t i, int32_t *in)
{
    const source *s = ctx;
    memcpy(in, s->tok + i * s->B * s->T, sizeof(int32_t) * s->B * s->T);
    return HS_OK;
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    int threads = 1, L = 4, d = 256, H = 8, T = 128, B = 4, K = 4, V = 256, compress = 0, half = 0;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--config") && sscanf(v, "%d,%d,%d,%d", &L, &d, &H, &T) == 4)
            ;
        else if (!strcmp(a, "--batch"))
            B = atoi(v);
        else if (!strcmp(a, "--batches"))
            K = atoi(v);
        else if (!strcmp(a, "--vocab"))
            V = atoi(v);
        else if (!strcmp(a, "--compress"))
            compress = atoi(v);
        else if (!strcmp(a, "--dtype"))
            half = !strcmp(v, "f16");
        else if (!strcmp(a, "--out"))
            out = v;
        else {
            fprintf(stderr, "usage: bench_capture --threads N --config L,d,H,T --batch B "
                            "--batches K --out FILE.h5 [--dtype f32|f16] [--compress N]\n");
            return 2;
        }
    }
    if (!out || (argc - 1) % 2)
        die("--out is required");
    hs_set_threads(threads);
    hs_model_config c = bench_gelu_config(L, d, H, H, T, V, HS_FAMILY_HEADSCOPE);
    hs_model m;
    if (hs_model_init(&m, &c))
        die("model");
    hs_model_init_random(&m, 3);
    source src = { malloc(sizeof(int32_t) * (size_t)K * B * T), B, T };
    for (size_t i = 0; i < (size_t)K * B * T; i++)
        src.tok[i] = (int32_t)((i * 2654435761u) % (unsigned)V);

    /* plain forward over the same batches, no maps kept */
    hs_acts a;
    if (hs_acts_alloc(&a, &c, B, T, HS_ACTS_INFER))
        die("activations");
    int32_t *in = malloc(sizeof(int32_t) * B * T);
    next_batch(&src, 0, in);
    if (hs_forward(&a, &m, in, NULL, NULL)) /* warm-up */
        die("forward");
    double t0 = now_s();
    for (int k = 0; k < K; k++) {
        next_batch(&src, (size_t)k, in);
        if (hs_forward(&a, &m, in, NULL, NULL))
            die("forward");
    }
    double fwd = now_s() - t0;
    hs_acts_free(&a);

    hs_maps_meta meta = { "bench", "{}", "bench", "bench", T, half, compress };
    hs_maps_writer *w;
    t0 = now_s();
    if (hs_maps_create(&w, out, &meta, 1))
        die("create");
    int heads[1024];
    for (int h = 0; h < H; h++)
        heads[h] = h;
    for (int l = 0; l < L; l++)
        if (hs_maps_add_layer(w, l, H, heads, 0, T))
            die("layer");
    hs_map_sink sink = hs_maps_sink(w);
    hs_record_opts ro = { .B = B, .T = T, .n_batches = (size_t)K };
    if (hs_record(&m, next_batch, &src, &sink, &ro))
        die("record");
    if (hs_maps_finish(w))
        die("finish");
    double cap = now_s() - t0;
    struct stat sb;
    stat(out, &sb);
    double maps = (double)K * B * L * H, mb = maps * T * T * (half ? 2 : 4) / 1e6;
    printf("{\"impl\":\"headscope\",\"threads\":%d,\"L\":%d,\"d\":%d,\"H\":%d,\"T\":%d,\"B\":%d,"
           "\"batches\":%d,\"dtype\":\"%s\",\"compress\":%d,\"forward_s\":%.4f,\"capture_s\":%.4f,"
           "\"maps_per_s\":%.1f,\"mb_per_s\":%.1f,\"file_mb\":%.1f}\n",
           threads, L, d, H, T, B, K, half ? "f16" : "f32", compress, fwd, cap, maps / cap,
           mb / cap, sb.st_size / 1e6);
    free(in);
    free(src.tok);
    hs_model_free(&m);
    return 0;
}
