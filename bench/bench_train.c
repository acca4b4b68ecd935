/* Training and inference throughput of the C runtime, and the memory of
 * loading a checkpoint; bench/train.sh runs it beside bench/train_torch.py.
 *
 *   bench_train --threads N --config L,d,H,G,T [--batch B] [--vocab V] [--steps S] [--warmup W]
 *       one JSON line per config: median ms of a training step (forward,
 *       backward, Adam) and of an inference forward with the loss; also the
 *       step's median process CPU time (at 1 thread the step's time without
 *       the time other processes held the core: a shared machine's figure). The model
 *       is train_torch.py's: learned positions, pre-LayerNorm, biases, GELU
 *       MLP of 4d, tied unembedding.
 *   bench_train --write-checkpoint DIR --config L,d,H,G,T [--vocab V]
 *       writes a random checkpoint of that shape (gpt2 family).
 *   bench_train --load DIR
 *       loads it and reports peak RSS (VmHWM) against the file size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint.h"
#include "trainer.h"
#include "bench_util.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_train: %s: %s\n", what, hs_last_error());
    exit(1);
}

static void bench_config(int threads, int L, int d, int H, int G, int T, int B, int V, int steps,
                         int warmup)
{
    hs_model_config c = bench_gelu_config(L, d, H, G, T, V, HS_FAMILY_HEADSCOPE);
    hs_model m;
    if (hs_model_init(&m, &c))
        die("model");
    hs_model_init_random(&m, 1234);
    hs_trainer tr;
    if (hs_trainer_init(&tr, &m, B, T, 1e-4, 0, 0))
        die("trainer");
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    srand(42);
    for (int i = 0; i < B * T; i++)
        in[i] = rand() % V, tg[i] = rand() % V;
    double *ts = malloc(sizeof(double) * steps), *es = malloc(sizeof(double) * steps), loss = 0;
    double *cs = malloc(sizeof(double) * steps);
    for (int s = -warmup; s < steps; s++) {
        double t0 = now_s(), c0 = process_cpu_s();
        if (hs_trainer_step(&tr, in, tg, 1e-4, &loss))
            die("train step");
        if (s >= 0)
            ts[s] = now_s() - t0, cs[s] = process_cpu_s() - c0;
    }
    hs_acts a;
    if (hs_acts_alloc(&a, &c, B, T, 0))
        die("inference activations");
    for (int s = -warmup; s < steps; s++) {
        double t0 = now_s();
        if (hs_forward(&a, &m, in, tg, NULL))
            die("forward");
        if (s >= 0)
            es[s] = now_s() - t0;
    }
    double tm = median(ts, steps), em = median(es, steps), cm = median(cs, steps);
    printf("{\"impl\":\"headscope\",\"threads\":%d,\"L\":%d,\"d\":%d,\"H\":%d,\"G\":%d,\"T\":%d,"
           "\"B\":%d,\"V\":%d,\"params\":%zu,\"train_step_ms\":%.4f,\"train_tok_s\":%.2f,"
           "\"eval_ms\":%.4f,\"eval_tok_s\":%.2f,\"train_step_cpu_ms\":%.4f}\n",
           threads, L, d, H, G, T, B, V, m.n_params, tm * 1e3, B * T / tm, em * 1e3, B * T / em,
           cm * 1e3);
    fflush(stdout);
    hs_acts_free(&a);
    hs_trainer_free(&tr);
    hs_model_free(&m);
    free(in), free(tg), free(ts), free(es), free(cs);
}

static void load_rss(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb))
        die("stat checkpoint");
    long before = vm_kib("VmRSS:");
    double t0 = now_s();
    hs_model m;
    if (hs_checkpoint_load(&m, dir))
        die("load");
    double secs = now_s() - t0;
    long peak = vm_kib("VmHWM:");
    double file_kib = (double)sb.st_size / 1024;
    printf("{\"impl\":\"headscope_load\",\"params\":%zu,\"file_bytes\":%lld,\"rss_before_kib\":%ld,"
           "\"peak_rss_kib\":%ld,\"peak_over_file\":%.4f,\"growth_over_file\":%.4f,"
           "\"load_s\":%.3f}\n",
           m.n_params, (long long)sb.st_size, before, peak, peak / file_kib,
           (peak - before) / file_kib, secs);
    hs_model_free(&m);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* headscope's default: passive OpenMP waits */
    int threads = 1, B = 4, V = 256, steps = 10, warmup = 2, L, d, H, G, T;
    int configs[16][5], nconf = 0;
    const char *write_dir = NULL, *load_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            goto usage;
        i++;
        if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--batch"))
            B = atoi(v);
        else if (!strcmp(a, "--vocab"))
            V = atoi(v);
        else if (!strcmp(a, "--steps"))
            steps = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--write-checkpoint"))
            write_dir = v;
        else if (!strcmp(a, "--load"))
            load_dir = v;
        else if (!strcmp(a, "--config") && nconf < 16 &&
                 sscanf(v, "%d,%d,%d,%d,%d", &L, &d, &H, &G, &T) == 5) {
            int *c = configs[nconf++];
            c[0] = L, c[1] = d, c[2] = H, c[3] = G, c[4] = T;
        } else
            goto usage;
    }
    if (threads < 1 || B < 1 || V < 2 || steps < 1)
        goto usage;
    hs_set_threads(threads);
    if (load_dir) {
        load_rss(load_dir);
        return 0;
    }
    if (write_dir) {
        if (!nconf)
            goto usage;
        int *c = configs[0];
        hs_model_config cfg = bench_gelu_config(c[0], c[1], c[2], c[3], c[4], V, HS_FAMILY_GPT2);
        hs_model m;
        if (hs_model_init(&m, &cfg))
            die("model");
        hs_model_init_random(&m, 7);
        if (hs_checkpoint_save(&m, write_dir))
            die("save");
        printf("{\"wrote\":\"%s\",\"params\":%zu}\n", write_dir, m.n_params);
        hs_model_free(&m);
        return 0;
    }
    for (int i = 0; i < nconf; i++)
        bench_config(threads, configs[i][0], configs[i][1], configs[i][2], configs[i][3],
                     configs[i][4], B, V, steps, warmup);
    return 0;
usage:
    fprintf(stderr, "usage: bench_train [--threads N] [--batch B] [--vocab V] [--steps S] "
                    "[--warmup W] --config L,d,H,G,T ...\n"
                    "       bench_train --write-checkpoint DIR --config L,d,H,G,T [--vocab V]\n"
                    "       bench_train --load DIR\n");
    return 2;
}
