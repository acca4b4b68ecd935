/* Capture: maps streamed to HDF5 through the recorder read back equal to the
 * maps computed in memory (float32 exactly, float16 within its rounding);
 * the forward hooks (observers and interventions) see and change what they
 * claim to; float16 conversion against IEEE 754 binary16 values. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "maps.h"
#include "recorder.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-12;
#else
static const double TOL = 1e-6;
#endif

enum { B = 2, T = 8 };

/* Under LeakSanitizer: libhdf5 1.10 keeps some of its own buffers when a
 * write fails (the full-disk test), on its free lists (H5FL); every id of
 * ours is closed, which the test checks itself. Named by the shared library
 * and, when HDF5 is linked statically (HEADSCOPE_STATIC_HDF5), by the
 * free-list allocator. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libhdf5_serial.so\nleak:libhdf5.so\nleak:H5FL__malloc\n";
}

static void load(hs_model *m, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/%s", HS_FIXTURE_DIR, name);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, dir), HS_OK);
}

static void tokens(int32_t *tok, int n, int V)
{
    for (int i = 0; i < n; i++)
        tok[i] = (i * 7 + 3) % V;
}

typedef struct {
    const int32_t *tok;
    int nbatches;
} batches;

static int next_batch(void *ctx, size_t i, int32_t *in)
{
    const batches *b = ctx;
    memcpy(in, b->tok + i * B * T, sizeof(int32_t) * B * T);
    return HS_OK;
}

/* Captures two batches of `name` in f32 or f16 and compares every stored
 * map with the maps of a training-mode forward (which keeps all layers). */
static void capture_roundtrip(const char *name, int half)
{
    hs_model m;
    load(&m, name);
    const int L = m.cfg.n_layer;
    int32_t tok[2 * B * T];
    tokens(tok, 2 * B * T, m.cfg.vocab_size);
    char path[] = "/tmp/hs_capture_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    hs_maps_meta meta = { "sha", "{}", "data", "dsha", T, half, half ? 4 : 0 };
    hs_maps_writer *w;
    CU_ASSERT_EQUAL_FATAL(hs_maps_create(&w, path, &meta, 1), HS_OK);
    for (int l = 0; l < L; l++) {
        int heads[64];
        for (int h = 0; h < m.cfg.n_head[l]; h++)
            heads[h] = h;
        CU_ASSERT_EQUAL_FATAL(hs_maps_add_layer(w, l, m.cfg.n_head[l], heads, 0, T), HS_OK);
    }
    hs_map_sink sink = hs_maps_sink(w);
    batches src = { tok, 2 };
    hs_record_opts ro = { .B = B, .T = T, .n_batches = 2 };
    CU_ASSERT_EQUAL_FATAL(hs_record(&m, next_batch, &src, &sink, &ro), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_maps_finish(w), HS_OK);

    hs_maps_reader *r;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, path), HS_OK);
    const hs_maps_info *in = hs_maps_get_info(r);
    CU_ASSERT_EQUAL(in->complete, 1);
    CU_ASSERT_EQUAL(in->n_seq, 2 * B);
    CU_ASSERT_EQUAL(in->n_layers, L);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_TRAIN), HS_OK);
    float map[T * T];
    int32_t stored[T];
    double worst = 0;
    for (int b = 0; b < 2; b++) {
        CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok + b * B * T, NULL, NULL), HS_OK);
        for (int i = 0; i < B; i++) {
            long long n = b * B + i;
            CU_ASSERT_EQUAL(hs_maps_read_tokens(r, n, stored), HS_OK);
            CU_ASSERT(!memcmp(stored, tok + n * T, sizeof stored));
            for (int l = 0; l < L; l++)
                for (int h = 0; h < m.cfg.n_head[l]; h++) {
                    CU_ASSERT_EQUAL_FATAL(hs_maps_read(r, l, n, h, map), HS_OK);
                    const hs_real *want =
                        a.layer[l].attn.att + (((size_t)i * m.cfg.n_head[l] + h) * T) * T;
                    for (int k = 0; k < T * T; k++)
                        worst = fmax(worst, fabs((double)map[k] - (double)want[k]));
                }
        }
    }
    /* float32 storage of float maps is exact; of double maps, float rounding;
     * float16 carries 11 significant bits: relative 2^-11 of values <= 1. */
    double tol = half ? 4.9e-4 : (sizeof(hs_real) == 4 ? 0 : 6e-8);
    printf("\n    %s %s: worst |file - memory| %.3g (tolerance %.3g)", name, half ? "f16" : "f32",
           worst, tol);
    CU_ASSERT(worst <= tol);
    hs_acts_free(&a);
    hs_maps_close(r);
    unlink(path);
    hs_model_free(&m);
}

static void test_f32_capture_reads_back_equal_to_memory_gpt2(void) { capture_roundtrip("gpt2_tiny", 0); }
static void test_f32_capture_reads_back_equal_to_memory_llama_gqa(void) { capture_roundtrip("llama_gqa", 0); }
static void test_f16_capture_reads_back_within_half_rounding(void) { capture_roundtrip("llama_gqa", 1); }

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* 1 when a temporary of path (PATH.tmp.*, hs_tmp_create's names) is left
 * in its directory. */
static int tmp_left(const char *path)
{
    char dir[512], prefix[600];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    *slash = 0;
    snprintf(prefix, sizeof prefix, "%s.tmp.", slash + 1);
    DIR *d = opendir(dir);
    int left = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        left |= !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return left;
}

static void test_existing_file_is_refused_without_force(void)
{
    char path[] = "/tmp/hs_capture_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "keep", 4), 4);
    close(fd);
    hs_maps_meta meta = { "", "", "", "", T, 0, 0 };
    hs_maps_writer *w = NULL;
    CU_ASSERT_NOT_EQUAL(hs_maps_create(&w, path, &meta, 0), HS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--force"));
    CU_ASSERT_PTR_NULL(w);
    FILE *f = fopen(path, "r");
    char buf[8] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fread(buf, 1, 8, f), 4);
    fclose(f);
    CU_ASSERT(!memcmp(buf, "keep", 4));
    /* An aborted writer leaves neither the final file nor its temporary. */
    CU_ASSERT_EQUAL_FATAL(hs_maps_create(&w, path, &meta, 1), HS_OK);
    hs_maps_abort(w);
    f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL(f);
    if (f)
        fclose(f);
    CU_ASSERT(!tmp_left(path));
    unlink(path);
}

/* ---- hooks ---- */

typedef struct {
    int layer, head;
    int resid_calls, maps_calls;
    double resid_first;
} hook_state;

static int zero_head(void *ctx, const hs_site_view *v)
{
    const hook_state *s = ctx;
    if (v->layer != s->layer)
        return HS_OK;
    const int H = v->heads, dh = v->width;
    for (int bt = 0; bt < v->B * v->T; bt++)
        memset(v->x + ((size_t)bt * H + s->head) * dh, 0, sizeof(hs_real) * dh);
    return HS_OK;
}

static int count_resid(void *ctx, const hs_site_view *v)
{
    hook_state *s = ctx;
    if (v->layer == 0)
        s->resid_first = v->x[0];
    s->resid_calls++;
    return HS_OK;
}

static int count_maps(void *ctx, int layer, const hs_real *att, int Bz, int H, int Tz)
{
    hook_state *s = ctx;
    (void)layer, (void)Bz, (void)H;
    /* Every map row is a distribution over keys. */
    for (int t = 0; t < Tz; t++) {
        hs_real sum = 0;
        for (int k = 0; k < Tz; k++)
            sum += att[t * Tz + k];
        if (fabs((double)sum - 1) > 1e-5)
            return hs_fail(HS_EINVAL, "row %d sums to %g", t, (double)sum);
    }
    s->maps_calls++;
    return HS_OK;
}

static int stop_at_layer_one(void *ctx, const hs_site_view *v)
{
    (void)ctx;
    return v->layer == 1 ? hs_fail(HS_EINTR, "stopped by an observer") : HS_OK;
}

static void test_zeroing_z_equals_a_zero_gate_and_changes_the_output(void)
{
    hs_model m;
    load(&m, "llama_gqa");
    int32_t tok[B * T];
    tokens(tok, B * T, m.cfg.vocab_size);
    const size_t nl = (size_t)B * T * m.cfg.vocab_size;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
    hs_real *base = malloc(sizeof(hs_real) * nl), *zeroed = malloc(sizeof(hs_real) * nl);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, NULL), HS_OK);
    memcpy(base, a.logits, sizeof(hs_real) * nl);
    hook_state s = { .layer = 1, .head = 2 };
    hs_hooks zh = { 0 };
    zh.site[HS_SITE_Z] = (hs_site_hook){ zero_head, &s };
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &zh), HS_OK);
    memcpy(zeroed, a.logits, sizeof(hs_real) * nl);
    hs_real gate1[8] = { 1, 1, 0, 1, 1, 1, 1, 1 };
    const hs_real *gates[2] = { NULL, gate1 };
    hs_hooks gh = { .gates = gates };
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &gh), HS_OK);
    double same = 0, changed = 0;
    for (size_t i = 0; i < nl; i++) {
        same = fmax(same, fabs((double)zeroed[i] - a.logits[i]));
        changed = fmax(changed, fabs((double)zeroed[i] - base[i]));
    }
    CU_ASSERT(same <= TOL);
    CU_ASSERT(changed > 1e-3);
    free(base), free(zeroed);
    hs_acts_free(&a);
    hs_model_free(&m);
}

static void test_observers_see_every_layer_and_can_stop_the_forward(void)
{
    hs_model m;
    load(&m, "gpt2_tiny");
    int32_t tok[B * T];
    tokens(tok, B * T, m.cfg.vocab_size);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_MAPS), HS_OK);
    hook_state s = { 0 };
    hs_hooks h = { .ctx = &s, .on_maps = count_maps };
    h.site[HS_SITE_RESID_PRE] = (hs_site_hook){ count_resid, &s };
    int rc = hs_forward(&a, &m, tok, NULL, &h);
    if (rc)
        printf("\n    %s", hs_last_error());
    CU_ASSERT_EQUAL(rc, HS_OK);
    CU_ASSERT_EQUAL(s.resid_calls, m.cfg.n_layer + 1);
    CU_ASSERT_EQUAL(s.maps_calls, m.cfg.n_layer);
    CU_ASSERT_EQUAL(s.resid_first, a.emb[0]); /* layer 0 sees the embeddings */
    hs_hooks stop = { 0 };
    stop.site[HS_SITE_RESID_PRE] = (hs_site_hook){ stop_at_layer_one, NULL };
    CU_ASSERT_EQUAL(hs_forward(&a, &m, tok, NULL, &stop), HS_EINTR);
    hs_acts_free(&a);
    /* Maps observers need activations that keep maps. */
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL(hs_forward(&a, &m, tok, NULL, &h), HS_EINVAL);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* IEEE 754 binary16: 1 = 0x3C00, -2 = 0xC000, 65504 (largest) = 0x7BFF,
 * 2^-14 (smallest normal) = 0x0400, 2^-24 (smallest subnormal) = 0x0001,
 * 1 + 2^-11 ties to even 0x3C00, 1 + 3*2^-11 ties up to 0x3C02, 65520 and
 * above overflow to inf 0x7C00, 2^-26 rounds to 0. */
static void test_float16_conversion_matches_ieee_binary16(void)
{
    const struct { float f; uint16_t h; } cases[] = {
        { 1.0f, 0x3C00 },           { -2.0f, 0xC000 },     { 65504.0f, 0x7BFF },
        { 6.103515625e-05f, 0x0400 }, { 5.9604645e-08f, 0x0001 }, { 1.00048828125f, 0x3C00 },
        { 1.00146484375f, 0x3C02 }, { 65520.0f, 0x7C00 },  { 1.4901161e-08f, 0x0000 },
        { 0.0f, 0x0000 },           { 0.5f, 0x3800 },      { 0.333333343f, 0x3555 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = hs_float_to_half(cases[i].f);
        if (h != cases[i].h)
            printf("\n    %.10g -> 0x%04x, want 0x%04x", cases[i].f, h, cases[i].h);
        CU_ASSERT_EQUAL(h, cases[i].h);
    }
    /* The fast conversion equals the bit-level one across the float range. */
    int differ = 0;
    for (uint32_t u = 0; u < 0xFFFFFFFFu - 0x10001u; u += 0x10001u) {
        union { uint32_t u; float f; } v = { u };
        if (!isnan(v.f) && hs_float_to_half(v.f) != hs_float_to_half_soft(v.f))
            differ++;
    }
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(hs_float_to_half(INFINITY), 0x7C00);
    CU_ASSERT_EQUAL(hs_float_to_half(NAN) & 0x7C00, 0x7C00);
    CU_ASSERT_NOT_EQUAL(hs_float_to_half(NAN) & 0x03FF, 0);
    /* Half to float, every half: the value of its fields, (-1)^s m 2^e in
     * double arithmetic, as a float (exact: every half is a float). */
    int wrong = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        const int e = (int)(h >> 10) & 0x1f, m = (int)(h & 0x3ff);
        const double mag = e == 0    ? ldexp(m, -24)
                           : e == 31 ? (m ? NAN : INFINITY)
                                     : ldexp(m | 0x400, e - 25);
        const float want = (float)(h >> 15 ? -mag : mag), got = hs_half_to_float((uint16_t)h);
        wrong += isnan(want) ? !isnan(got) : memcmp(&want, &got, sizeof got) != 0;
    }
    CU_ASSERT_EQUAL(wrong, 0);
}


/* A synthetic batch of maps (B, H, T, T) for the writer. */
static void fill_maps(hs_real *att, int n)
{
    for (int i = 0; i < n; i++)
        att[i] = (hs_real)((i % 17) + 1) / 17;
}

/* Writes `batches` batches of B sequences, 4 heads, into path; returns the
 * first failure of an append or of finish (the writer is gone either way). */
static int write_maps(const char *path, int batches)
{
    enum { H = 4, TT = 64 };
    hs_maps_meta meta = { "sha", "{}", "data", "dsha", TT, 0, 0 };
    hs_maps_writer *w;
    int rc = hs_maps_create(&w, path, &meta, 1);
    if (rc)
        return rc;
    const int heads[H] = { 0, 1, 2, 3 };
    rc = hs_maps_add_layer(w, 0, H, heads, 0, TT);
    hs_real *att = calloc((size_t)B * H * TT * TT, sizeof *att);
    int32_t tok[B * TT] = { 0 };
    if (!att)
        rc = HS_ENOMEM;
    else
        fill_maps(att, B * H * TT * TT);
    for (int i = 0; !rc && i < batches; i++) {
        rc = hs_maps_append_tokens(w, tok, B);
        if (!rc)
            rc = hs_maps_append(w, 0, att, B, H);
    }
    free(att);
    if (rc) {
        hs_maps_abort(w);
        return rc;
    }
    return hs_maps_finish(w);
}

/* A write that runs into a file size limit (a full disk to the writer):
 * HS_EIO with a one-line message naming the file, no HDF5 id left open
 * (HDF5 1.10 crashed at exit on one), no temporary file, no output. */
static void test_a_full_disk_fails_cleanly_with_every_id_closed(void)
{
    char dir[] = "/tmp/hs_fulldisk_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/o.h5", dir);
    struct rlimit old;
    CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* writes return EFBIG */
    /* from inside the header to the last batch's maps (~2.6 MB in all) */
    for (rlim_t limit = 1024; limit < 2500000; limit = limit * 3 / 2) {
        struct rlimit lim = { limit, old.rlim_max };
        CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_FSIZE, &lim), 0);
        const int rc = write_maps(path, 20); /* ~2.6 MB of maps */
        setrlimit(RLIMIT_FSIZE, &old);
        CU_ASSERT_EQUAL(rc, HS_EIO);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), path));
        CU_ASSERT_PTR_NULL(strchr(hs_last_error(), '\n'));
        CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
        CU_ASSERT(!exists(path));
        CU_ASSERT(!tmp_left(path));
    }
    signal(SIGXFSZ, prev);
    /* and without the limit the same write succeeds and reads back */
    CU_ASSERT_EQUAL(write_maps(path, 2), HS_OK);
    hs_maps_reader *r;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, path), HS_OK);
    CU_ASSERT_EQUAL(hs_maps_get_info(r)->n_seq, 2 * B);
    hs_maps_close(r);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    unlink(path);
    rmdir(dir);
}

/* Every failure of the writer and the reader leaves no HDF5 id open. */
static void test_failures_leave_no_hdf5_id_open(void)
{
    hs_maps_meta meta = { "", "", "", "", T, 0, 0 };
    hs_maps_writer *w = NULL;
    CU_ASSERT_NOT_EQUAL(hs_maps_create(&w, "/nonexistent-dir/o.h5", &meta, 1), HS_OK);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    char path[] = "/tmp/hs_ids_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(hs_maps_create(&w, path, &meta, 1), HS_OK);
    const int heads[2] = { 0, 1 };
    CU_ASSERT_NOT_EQUAL(hs_maps_add_layer(w, 0, 2, heads, -1, 2), HS_OK); /* query_start < 0 */
    CU_ASSERT_NOT_EQUAL(hs_maps_add_layer(w, 0, 2, heads, T - 1, 2), HS_OK); /* past T */
    hs_maps_abort(w);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    /* the reader: a text file, a truncated map file, a missing one, a folder */
    hs_maps_reader *r = NULL;
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("not a map file\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(hs_maps_open(&r, path), HS_EFORMAT);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    CU_ASSERT_EQUAL(write_maps(path, 2), HS_OK);
    struct stat sb;
    CU_ASSERT_EQUAL_FATAL(stat(path, &sb), 0);
    for (off_t keep = sb.st_size / 2; keep > 0; keep /= 4) {
        CU_ASSERT_EQUAL(truncate(path, keep), 0);
        CU_ASSERT_NOT_EQUAL(hs_maps_open(&r, path), HS_OK);
        CU_ASSERT_PTR_NULL(r);
        CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    }
    unlink(path);
    CU_ASSERT_NOT_EQUAL(hs_maps_open(&r, path), HS_OK);
    CU_ASSERT_NOT_EQUAL(hs_maps_open(&r, "/tmp"), HS_OK);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
}

/* A pid that no longer exists: a child's, reaped. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

/* The temporary files of a killed capture (OUT.tmp.PID.XXXXXX of a dead
 * pid, or OUT.tmp.PID as earlier versions named them) are removed by the
 * next capture into OUT; a live pid's, another output's and names that only
 * look alike are kept. */
static void test_stale_temporary_files_are_swept(void)
{
    enum { SWEPT = 2, NAMES = 10 };
    char dir[] = "/tmp/hs_sweep_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128], names[NAMES][200];
    snprintf(path, sizeof path, "%s/o.h5", dir);
    const pid_t dead = dead_pid();
    snprintf(names[0], 200, "%s.tmp.%d.Ab3xYz", path, (int)dead);        /* swept */
    snprintf(names[1], 200, "%s.tmp.%d", path, (int)dead);               /* swept (old name) */
    snprintf(names[2], 200, "%s.tmp.%d.Ab3xYz", path, (int)getppid());   /* alive */
    snprintf(names[3], 200, "%s.tmp.%d", path, (int)getppid());          /* alive */
    snprintf(names[4], 200, "%s/other.h5.tmp.%d.Ab3xYz", dir, (int)dead); /* another output */
    snprintf(names[5], 200, "%s.tmp.%dx", path, (int)dead);              /* not a pid */
    snprintf(names[6], 200, "%s.tmp.", path);                            /* no pid */
    snprintf(names[7], 200, "%s.tmp.0%d", path, (int)dead);              /* not our spelling */
    snprintf(names[8], 200, "%s.tmp.%d.Ab3", path, (int)dead);           /* not our spelling */
    snprintf(names[9], 200, "%s.tmp.%d.Fo1der", path, (int)dead);        /* a folder: kept */
    for (int i = 0; i < NAMES; i++) {
        if (i == 9) {
            CU_ASSERT_EQUAL_FATAL(mkdir(names[9], 0755), 0);
            continue;
        }
        FILE *f = fopen(names[i], "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fclose(f);
    }
    CU_ASSERT_EQUAL(write_maps(path, 1), HS_OK);
    for (int i = 0; i < NAMES; i++)
        if (exists(names[i]) != (i >= SWEPT))
            printf("\n    %s: %s", names[i], i < SWEPT ? "not swept" : "swept");
    for (int i = 0; i < NAMES; i++)
        CU_ASSERT_EQUAL(exists(names[i]), i >= SWEPT);
    for (int i = 0; i < NAMES; i++)
        i == 9 ? rmdir(names[i]) : unlink(names[i]);
    unlink(path);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_f32_capture_reads_back_equal_to_memory_gpt2",
          test_f32_capture_reads_back_equal_to_memory_gpt2 },
        { "test_f32_capture_reads_back_equal_to_memory_llama_gqa",
          test_f32_capture_reads_back_equal_to_memory_llama_gqa },
        { "test_f16_capture_reads_back_within_half_rounding",
          test_f16_capture_reads_back_within_half_rounding },
        { "test_existing_file_is_refused_without_force", test_existing_file_is_refused_without_force },
        { "test_zeroing_z_equals_a_zero_gate_and_changes_the_output",
          test_zeroing_z_equals_a_zero_gate_and_changes_the_output },
        { "test_observers_see_every_layer_and_can_stop_the_forward",
          test_observers_see_every_layer_and_can_stop_the_forward },
        { "test_float16_conversion_matches_ieee_binary16",
          test_float16_conversion_matches_ieee_binary16 },
        { "test_a_full_disk_fails_cleanly_with_every_id_closed",
          test_a_full_disk_fails_cleanly_with_every_id_closed },
        { "test_failures_leave_no_hdf5_id_open", test_failures_leave_no_hdf5_id_open },
        { "test_stale_temporary_files_are_swept", test_stale_temporary_files_are_swept },
    };
    return hs_run_tests("capture_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
