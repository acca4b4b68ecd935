/* Map files and store outputs under attack (SPEC §6, §4):
 *  - every kind of map file the reader refuses is refused with nothing left
 *    open: no HDF5 id of any type, no object reached through a soft or
 *    external link (another file of the file's naming), and (this suite
 *    runs under LeakSanitizer in the sanitizer build, with no suppression
 *    of libhdf5's memory) no leak at exit;
 *  - a symlink planted at the name a writer's temporary file once had (the
 *    maps writer's OUT.tmp.PID, the token shard writer's, the viewer's
 *    DIR/.NAME.tmp) is never followed: its target is left as it was;
 *  - without force, the maps writer creates its output only where nothing
 *    is, at the moment it moves the file into place, and reports the sha256
 *    of the file it moved there;
 *  - a token shard's ids beyond int32 are refused, not wrapped negative;
 *  - strings are well-formed UTF-8 when the reader hands them on. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <hdf5.h>

#include "maps.h"
#include "runner.h"
#include "sha256.h"
#include "tokens.h"
#include "utf8.h"
#include "viewer_export.h"

enum { N = 2, H = 4, T = 8, L = 2 };

static char DIR_[64];

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", DIR_, name);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, got = 0, r;
    do {
        if (got == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 4096)))
            break;
        r = fread(buf + got, 1, cap - got, f);
        got += r;
    } while (r > 0);
    fclose(f);
    *n = got;
    return buf;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(data, 1, n, f), n);
    fclose(f);
}

static const char *const TEXT[4] = { "a", " b", "\n", "\xc3\xa9" };

/* A good map file: L layers of H heads, N sequences of T, float32 (half:
 * float16), with /token_text; force as hs_maps_create's. Returns the
 * status of the finish, or, when keep is set, hands the writer back with
 * everything written but the finish. */
static int write_maps(const char *path, int half, int force, hs_maps_writer **keep)
{
    hs_maps_meta meta = { "msha", "{}", "data.bin", "dsha", T, half, 0 };
    hs_maps_writer *w;
    int rc = hs_maps_create(&w, path, &meta, force);
    if (rc)
        return rc;
    const int heads[H] = { 0, 1, 2, 3 };
    for (int l = 0; !rc && l < L; l++)
        rc = hs_maps_add_layer(w, l, H, heads, 0, T);
    if (!rc)
        rc = hs_maps_set_token_text(w, TEXT, 4);
    hs_real att[N * H * T * T];
    int32_t tok[N * T];
    for (int i = 0; i < N * H * T * T; i++)
        att[i] = (hs_real)(i % 7) / 7;
    for (int i = 0; i < N * T; i++)
        tok[i] = i % 4;
    if (!rc)
        rc = hs_maps_append_tokens(w, tok, N);
    for (int l = 0; !rc && l < L; l++)
        rc = hs_maps_append(w, l, att, N, H);
    if (rc) {
        hs_maps_abort(w);
        return rc;
    }
    if (keep) {
        *keep = w;
        return HS_OK;
    }
    return hs_maps_finish(w);
}

/* ---- hostile map files, made with libhdf5 from a good one ------------------------- */

static void del(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) > 0)
        H5Adelete(obj, name);
}

static void put_ints(hid_t obj, const char *name, hid_t type, const long long *v, int n)
{
    del(obj, name);
    hsize_t dim = (hsize_t)n;
    hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, v);
    H5Aclose(a);
    H5Sclose(sp);
}

static void put_int(hid_t obj, const char *name, long long v)
{
    put_ints(obj, name, H5T_STD_I32LE, &v, 1);
}

static void put_str(hid_t obj, const char *name, const char *s)
{
    del(obj, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &s);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void put_double(hid_t obj, const char *name, double v)
{
    del(obj, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

/* Replaces dataset `name` by one of type t and the given dims (zeros;
 * chunk non-NULL: chunked with fletcher32, a filter the reader refuses). */
static void redo(hid_t f, const char *name, hid_t t, int rank, const hsize_t *dims,
                 const hsize_t *chunk)
{
    if (H5Lexists(f, name, H5P_DEFAULT) > 0)
        H5Ldelete(f, name, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(rank, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk) {
        H5Pset_chunk(pl, rank, chunk);
        H5Pset_fletcher32(pl);
    }
    hid_t d = H5Dcreate2(f, name, t, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Dclose(d);
    H5Pclose(pl);
    H5Sclose(sp);
}

static void attn_attrs(hid_t f, const char *name, void (*fn)(hid_t d))
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    fn(d);
    H5Dclose(d);
}

static void heads_dup(hid_t d) { put_ints(d, "heads", H5T_STD_I32LE, (long long[]){ 0, 0, 1, 2 }, 4); }
static void heads_range(hid_t d) { put_ints(d, "heads", H5T_STD_I32LE, (long long[]){ 0, 1, 2, 70000 }, 4); }
static void heads_short(hid_t d) { put_ints(d, "heads", H5T_STD_I32LE, (long long[]){ 0, 1, 2 }, 3); }
static void heads_neg(hid_t d) { put_ints(d, "heads", H5T_STD_I64LE, (long long[]){ 0, 1, 2, -1 }, 4); }
static void qs_neg(hid_t d) { put_int(d, "query_start", -1); }
static void qs_past(hid_t d) { put_int(d, "query_start", 5); }
static void qs_huge(hid_t d) { put_ints(d, "query_start", H5T_STD_I64LE, (long long[]){ 1LL << 40 }, 1); }
static void layer_other(hid_t d) { put_int(d, "layer", 1); }
static void layer_gone(hid_t d) { del(d, "layer"); }

/* One hostile variant of the good file at src, written to dst. */
static void mutate(const char *src, const char *dst, const char *kind)
{
    size_t n = 0;
    char *bytes = slurp(src, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    if (!strcmp(kind, "text")) {
        spit(dst, "not a map file\n", 15);
    } else if (!strcmp(kind, "truncated")) {
        spit(dst, bytes, n / 2);
    } else if (!strcmp(kind, "global_heap")) {
        char *at = memmem(bytes, n, "GCOL\1\0\0\0", 8);
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        const unsigned long long big = 1ULL << 31; /* the first object's size */
        memcpy(at + 24, &big, 8);
        spit(dst, bytes, n);
    } else {
        spit(dst, bytes, n);
        hid_t f = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
        CU_ASSERT_FATAL(f >= 0);
        const hsize_t tok_w[2] = { N, T - 1 }, tok_1[1] = { N * T }, tok_f[2] = { N, T };
        const hsize_t a3[3] = { N, H, T }, a4[4] = { N, H, T, T }, a4n[4] = { N + 1, H, T, T },
                      a4s[4] = { N, H, T, T + 1 }, c4[4] = { 1, 1, T, T };
        hid_t vstr = H5Tcopy(H5T_C_S1);
        H5Tset_size(vstr, H5T_VARIABLE);
        if (!strcmp(kind, "format_missing")) del(f, "format");
        else if (!strcmp(kind, "format_int")) put_int(f, "format", 7);
        else if (!strcmp(kind, "format_other")) put_str(f, "format", "other-maps");
        else if (!strcmp(kind, "version_2")) put_int(f, "version", 2);
        else if (!strcmp(kind, "version_str")) put_str(f, "version", "1");
        else if (!strcmp(kind, "complete_2")) put_int(f, "complete", 2);
        else if (!strcmp(kind, "seq_len_0")) put_int(f, "seq_len", 0);
        else if (!strcmp(kind, "seq_len_huge")) put_int(f, "seq_len", 1 << 30);
        else if (!strcmp(kind, "seq_len_float")) put_double(f, "seq_len", 8.0);
        else if (!strcmp(kind, "seq_len_other")) put_int(f, "seq_len", T - 1);
        else if (!strcmp(kind, "tokens_width")) redo(f, "tokens", H5T_STD_I32LE, 2, tok_w, NULL);
        else if (!strcmp(kind, "tokens_rank1")) redo(f, "tokens", H5T_STD_I32LE, 1, tok_1, NULL);
        else if (!strcmp(kind, "tokens_float")) redo(f, "tokens", H5T_IEEE_F32LE, 2, tok_f, NULL);
        else if (!strcmp(kind, "tokens_missing")) H5Ldelete(f, "tokens", H5P_DEFAULT);
        else if (!strcmp(kind, "token_text_width")) redo(f, "token_text", vstr, 2, tok_w, NULL);
        else if (!strcmp(kind, "token_text_int")) redo(f, "token_text", H5T_STD_I32LE, 2, tok_f, NULL);
        else if (!strcmp(kind, "attn_int")) redo(f, "layer_01/attn", H5T_STD_I32LE, 4, a4, NULL);
        else if (!strcmp(kind, "attn_f64")) redo(f, "layer_01/attn", H5T_IEEE_F64LE, 4, a4, NULL);
        else if (!strcmp(kind, "attn_rank3")) redo(f, "layer_01/attn", H5T_IEEE_F32LE, 3, a3, NULL);
        else if (!strcmp(kind, "attn_more_seqs")) redo(f, "layer_01/attn", H5T_IEEE_F32LE, 4, a4n, NULL);
        else if (!strcmp(kind, "attn_more_keys")) redo(f, "layer_01/attn", H5T_IEEE_F32LE, 4, a4s, NULL);
        else if (!strcmp(kind, "attn_fletcher")) redo(f, "layer_01/attn", H5T_IEEE_F32LE, 4, a4, c4);
        else if (!strcmp(kind, "attn_group")) {
            H5Ldelete(f, "layer_01/attn", H5P_DEFAULT);
            H5Gclose(H5Gcreate2(f, "layer_01/attn", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        }
        else if (!strcmp(kind, "tokens_external")) {
            /* the shape it should have, in a file of the attacker's naming */
            H5Ldelete(f, "tokens", H5P_DEFAULT);
            H5Lcreate_external("other.h5", "/tokens", f, "tokens", H5P_DEFAULT, H5P_DEFAULT);
        }
        else if (!strcmp(kind, "tokens_soft")) {
            H5Lmove(f, "tokens", f, "tokens_real", H5P_DEFAULT, H5P_DEFAULT);
            H5Lcreate_soft("/tokens_real", f, "tokens", H5P_DEFAULT, H5P_DEFAULT);
        }
        else if (!strcmp(kind, "layer_soft")) {
            H5Lmove(f, "layer_01", f, "elsewhere", H5P_DEFAULT, H5P_DEFAULT);
            H5Lcreate_soft("/elsewhere", f, "layer_01", H5P_DEFAULT, H5P_DEFAULT);
        }
        else if (!strcmp(kind, "token_text_external")) {
            H5Ldelete(f, "token_text", H5P_DEFAULT);
            H5Lcreate_external("other.h5", "/token_text", f, "token_text", H5P_DEFAULT,
                               H5P_DEFAULT);
        }
        else if (!strcmp(kind, "attn_external_storage")) {
            /* contiguous, its bytes kept in a file of the attacker's naming: a
             * reader would show that file's bytes as attention weights */
            H5Ldelete(f, "layer_01/attn", H5P_DEFAULT);
            hid_t sp = H5Screate_simple(4, a4, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
            H5Pset_external(pl, "/etc/passwd", 0, (hsize_t)N * H * T * T * 4);
            hid_t d = H5Dcreate2(f, "layer_01/attn", H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl,
                                 H5P_DEFAULT);
            put_ints(d, "heads", H5T_STD_I32LE, (long long[]){ 0, 1, 2, 3 }, 4);
            put_int(d, "query_start", 0);
            put_int(d, "layer", 1);
            H5Dclose(d), H5Pclose(pl), H5Sclose(sp);
        }
        else if (!strcmp(kind, "heads_dup")) attn_attrs(f, "layer_00/attn", heads_dup);
        else if (!strcmp(kind, "heads_range")) attn_attrs(f, "layer_00/attn", heads_range);
        else if (!strcmp(kind, "heads_short")) attn_attrs(f, "layer_00/attn", heads_short);
        else if (!strcmp(kind, "heads_neg")) attn_attrs(f, "layer_00/attn", heads_neg);
        else if (!strcmp(kind, "query_start_neg")) attn_attrs(f, "layer_01/attn", qs_neg);
        else if (!strcmp(kind, "query_start_past")) attn_attrs(f, "layer_01/attn", qs_past);
        else if (!strcmp(kind, "query_start_huge")) attn_attrs(f, "layer_01/attn", qs_huge);
        else if (!strcmp(kind, "layer_other")) attn_attrs(f, "layer_00/attn", layer_other);
        else if (!strcmp(kind, "layer_missing")) attn_attrs(f, "layer_01/attn", layer_gone);
        else CU_FAIL_FATAL("unknown mutation");
        H5Tclose(vstr);
        CU_ASSERT_EQUAL(H5Fclose(f), 0);
    }
    free(bytes);
}

/* Datatypes, dataspaces and property lists are ids of no file, so
 * hs_maps_open_ids cannot see one an error path forgot; HDF5 numbers each
 * kind's ids in order, so the ids made since a mark that are still valid
 * are the ones left open. */
typedef struct {
    hid_t id[3];
} id_mark;

static hid_t newest_id(int kind)
{
    const hid_t id = kind == 0 ? H5Screate(H5S_SCALAR) : kind == 1 ? H5Tcopy(H5T_NATIVE_INT)
                                                                   : H5Pcreate(H5P_DATASET_XFER);
    kind == 0 ? H5Sclose(id) : kind == 1 ? H5Tclose(id) : H5Pclose(id);
    return id;
}

static void id_mark_set(id_mark *m)
{
    for (int k = 0; k < 3; k++)
        m->id[k] = newest_id(k);
}

static long long ids_left_since(const id_mark *m)
{
    long long live = 0;
    for (int k = 0; k < 3; k++)
        for (hid_t id = m->id[k] + 1, end = newest_id(k); id < end; id++)
            live += H5Iis_valid(id) > 0;
    return live;
}

static void test_every_refused_map_file_leaves_nothing_open(void)
{
    static const char *const kinds[] = {
        "text", "truncated", "global_heap", "format_missing", "format_int", "format_other",
        "version_2", "version_str", "complete_2", "seq_len_0", "seq_len_huge", "seq_len_float",
        "seq_len_other", "tokens_width", "tokens_rank1", "tokens_float", "tokens_missing",
        "token_text_width", "token_text_int", "attn_int", "attn_f64", "attn_rank3",
        "attn_more_seqs", "attn_more_keys", "attn_fletcher", "attn_group", "heads_dup",
        "heads_range", "heads_short", "heads_neg", "query_start_neg", "query_start_past",
        "query_start_huge", "layer_other", "layer_missing", "tokens_external", "tokens_soft",
        "layer_soft", "token_text_external", "attn_external_storage",
    };
    char good[128], bad[128];
    path_in(good, sizeof good, "good.h5");
    path_in(bad, sizeof bad, "bad.h5");
    CU_ASSERT_EQUAL_FATAL(write_maps(good, 0, 1, NULL), HS_OK);
    char other[128]; /* the target of the external links: a good map file */
    path_in(other, sizeof other, "other.h5");
    CU_ASSERT_EQUAL_FATAL(write_maps(other, 0, 1, NULL), HS_OK);
    hs_maps_reader *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, good), HS_OK);
    hs_maps_close(r);
    CU_ASSERT_EQUAL_FATAL(hs_maps_open_ids(), 0);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        mutate(good, bad, kinds[i]);
        CU_ASSERT_EQUAL_FATAL(hs_maps_open_ids(), 0); /* the test's own ids are closed */
        for (int here = 0; here < 2; here++) {
            r = (hs_maps_reader *)1;
            id_mark m;
            id_mark_set(&m);
            const int rc = here ? hs_maps_open_here(&r, bad) : hs_maps_open(&r, bad);
            const long long open = hs_maps_open_ids() + ids_left_since(&m);
            if (rc != HS_EFORMAT || r || open || !strstr(hs_last_error(), bad))
                printf("\n    %s (%s): status %d, %lld ids open, \"%s\"", kinds[i],
                       here ? "in process" : "probed", rc, open, hs_last_error());
            CU_ASSERT_EQUAL(rc, HS_EFORMAT);
            CU_ASSERT_PTR_NULL(r);
            CU_ASSERT_EQUAL(open, 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), bad));
        }
    }
    unlink(good);
    unlink(bad);
    unlink(other);
}

/* ---- writers never follow a planted symlink ---------------------------------------- */

/* A victim file and a symlink to it at `link`. */
static void plant(const char *link, const char *victim)
{
    spit(victim, "keep", 4);
    unlink(link);
    CU_ASSERT_EQUAL_FATAL(symlink(victim, link), 0);
}

static int holds_keep(const char *victim)
{
    size_t n = 0;
    char *b = slurp(victim, &n);
    const int same = b && n == 4 && !memcmp(b, "keep", 4);
    free(b);
    return same;
}

static int is_regular(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void test_writers_never_follow_a_symlink_at_a_temporary_name(void)
{
    char out[128], link[160], victim[128];
    path_in(victim, sizeof victim, "victim");
    /* the maps writer's OUT.tmp.PID */
    path_in(out, sizeof out, "o.h5");
    snprintf(link, sizeof link, "%s.tmp.%d", out, (int)getpid());
    plant(link, victim);
    CU_ASSERT_EQUAL(write_maps(out, 0, 1, NULL), HS_OK);
    CU_ASSERT(holds_keep(victim));
    CU_ASSERT(is_regular(out));
    hs_maps_reader *r = NULL;
    CU_ASSERT_EQUAL(hs_maps_open(&r, out), HS_OK);
    hs_maps_close(r);
    unlink(link), unlink(out);
    /* the token shard writer's OUT.tmp.PID */
    path_in(out, sizeof out, "t.bin");
    snprintf(link, sizeof link, "%s.tmp.%d", out, (int)getpid());
    plant(link, victim);
    const int32_t tok[5] = { 1, 2, 3, 4, 5 };
    CU_ASSERT_EQUAL(hs_tokens_write(out, tok, 5), HS_OK);
    CU_ASSERT(holds_keep(victim));
    CU_ASSERT(is_regular(out));
    hs_tokens t;
    CU_ASSERT_EQUAL(hs_tokens_read(&t, out), HS_OK);
    CU_ASSERT(t.n == 5 && t.tok[4] == 5);
    hs_tokens_free(&t);
    unlink(link), unlink(out);
    /* the viewer's DIR/.NAME.tmp, each of its three outputs */
    char maps[128], vdir[128];
    path_in(maps, sizeof maps, "v.h5");
    path_in(vdir, sizeof vdir, "view");
    CU_ASSERT_EQUAL_FATAL(write_maps(maps, 0, 1, NULL), HS_OK);
    CU_ASSERT_EQUAL_FATAL(mkdir(vdir, 0755), 0);
    static const char *const names[3] = { "maps.bin", "maps.js", "data.js" };
    char links[3][200], victims[3][200];
    for (int i = 0; i < 3; i++) {
        snprintf(links[i], sizeof links[i], "%s/.%s.tmp", vdir, names[i]);
        snprintf(victims[i], sizeof victims[i], "%s/victim_%d", DIR_, i);
        plant(links[i], victims[i]);
    }
    hs_viewer_request rq = { .maps = maps, .dir = vdir };
    hs_viewer_summary sum;
    CU_ASSERT_EQUAL(hs_viewer_export(&rq, &sum), HS_OK);
    for (int i = 0; i < 3; i++) {
        char final[200];
        snprintf(final, sizeof final, "%s/%s", vdir, names[i]);
        CU_ASSERT(holds_keep(victims[i]));
        CU_ASSERT(is_regular(final));
        unlink(links[i]), unlink(victims[i]), unlink(final);
    }
    CU_ASSERT_EQUAL(rmdir(vdir), 0);
    unlink(maps), unlink(victim);
}

/* ---- create-or-fail, and the sha256 of what was created --------------------------- */

/* The names in DIR_ that start with prefix. */
static int leftovers(const char *prefix)
{
    DIR *d = opendir(DIR_);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

static void test_without_force_the_output_is_created_only_where_nothing_is(void)
{
    char out[128];
    path_in(out, sizeof out, "c.h5");
    unlink(out);
    /* another writer finishes first, while this one writes */
    hs_maps_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(write_maps(out, 0, 0, &w), HS_OK);
    spit(out, "other", 5);
    char sha[65] = "x";
    uint64_t bytes = 7;
    const int rc = hs_maps_finish_sha(w, sha, &bytes);
    CU_ASSERT_EQUAL(rc, HS_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "exists"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), out));
    CU_ASSERT_EQUAL(sha[0], 0);
    size_t n = 0;
    char *b = slurp(out, &n);
    CU_ASSERT(b && n == 5 && !memcmp(b, "other", 5)); /* the other writer's file is kept */
    free(b);
    CU_ASSERT_EQUAL(leftovers("c.h5.tmp"), 0);
    CU_ASSERT_EQUAL(hs_maps_open_ids(), 0);
    /* with force it replaces that file, and reports the sha256 of what it moved there */
    CU_ASSERT_EQUAL_FATAL(write_maps(out, 0, 1, &w), HS_OK);
    CU_ASSERT_EQUAL(hs_maps_finish_sha(w, sha, &bytes), HS_OK);
    char want[65];
    uint64_t want_bytes = 0;
    CU_ASSERT_EQUAL(hs_sha256_file(out, want, &want_bytes), HS_OK);
    CU_ASSERT_STRING_EQUAL(sha, want);
    CU_ASSERT_EQUAL(bytes, want_bytes);
    hs_maps_reader *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, out), HS_OK);
    CU_ASSERT_EQUAL(hs_maps_get_info(r)->complete, 1);
    hs_maps_close(r);
    /* and without force, where nothing is, it is created */
    unlink(out);
    CU_ASSERT_EQUAL(write_maps(out, 1, 0, NULL), HS_OK);
    CU_ASSERT(is_regular(out));
    CU_ASSERT_EQUAL(leftovers("c.h5.tmp"), 0);
    unlink(out);
}

/* ---- token shards: ids as the file gives them -------------------------------------- */

static void test_token_ids_beyond_int32_are_refused(void)
{
    char path[128];
    path_in(path, sizeof path, "wide.bin");
    unsigned char buf[1024 + 4 * 3] = { 0 };
    const uint32_t head[3] = { 20240801, 7, 3 }, tok[3] = { 5, 0xfffffff0u, 7 };
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) {
            buf[4 * k + b] = (unsigned char)(head[k] >> (8 * b));
            buf[1024 + 4 * k + b] = (unsigned char)(tok[k] >> (8 * b));
        }
    spit(path, buf, sizeof buf);
    hs_tokens t;
    const int rc = hs_tokens_read(&t, path);
    if (rc == HS_OK)
        printf("\n    read token %d", t.tok[1]);
    CU_ASSERT_EQUAL(rc, HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "4294967280"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), path));
    CU_ASSERT_PTR_NULL(t.tok);
    if (rc == HS_OK)
        hs_tokens_free(&t);
    unlink(path);
}

/* ---- strings: what a map file's text may hold when it is printed ----------------- */

/* One UTF-8 checker (base/utf8.h) for every string the reader hands on:
 * well-formed per Unicode Table 3-7, so overlong forms, surrogates, code
 * points past U+10FFFF and cut sequences are not text; attribute strings
 * lose their control characters too, token strings keep them. */
static void test_strings_are_well_formed_utf8_when_handed_on(void)
{
    static const struct { const char *s; int len; uint32_t cp; } seqs[] = {
        { "A", 1, 0x41 },           { "\xc3\xa9", 2, 0xe9 },       { "\xe2\x82\xac", 3, 0x20ac },
        { "\xf0\x9f\x99\x82", 4, 0x1f642 }, { "\xf4\x8f\xbf\xbf", 4, 0x10ffff },
        { "\xc0\x80", 0, 0 },       { "\xc1\xbf", 0, 0 },          { "\xe0\x80\x80", 0, 0 },
        { "\xe0\x9f\xbf", 0, 0 },   { "\xed\xa0\x80", 0, 0 },      { "\xf0\x80\x80\x80", 0, 0 },
        { "\xf4\x90\x80\x80", 0, 0 }, { "\xf5\x80\x80\x80", 0, 0 },  { "\x80", 0, 0 },
        { "\xe2\x82", 0, 0 },        { "\xc3(", 0, 0 },
    };
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        uint32_t cp = 0;
        const size_t n = strlen(seqs[i].s);
        const int len = hs_utf8_decode((const unsigned char *)seqs[i].s, n, &cp);
        if (len != seqs[i].len || (len && cp != seqs[i].cp))
            printf("\n    case %zu: length %d, U+%04X", i, len, (unsigned)cp);
        CU_ASSERT_EQUAL(len, seqs[i].len);
        CU_ASSERT(!len || cp == seqs[i].cp);
        CU_ASSERT_EQUAL(hs_utf8_valid(seqs[i].s, n), seqs[i].len == (int)n);
    }
    CU_ASSERT_EQUAL(hs_utf8_decode((const unsigned char *)"\xc3\xa9", 1, NULL), 0); /* cut */
    char a[] = "\x1b[31m\xed\xa0\x80\xc3\xa9\n", b[sizeof a];
    memcpy(b, a, sizeof a);
    hs_utf8_sanitize(a, 1);
    hs_utf8_sanitize(b, 0);
    CU_ASSERT_STRING_EQUAL(a, "?[31m???\xc3\xa9?");
    CU_ASSERT_STRING_EQUAL(b, "\x1b[31m???\xc3\xa9\n");
    /* and through the reader: an attribute with a surrogate and an escape */
    char good[128], bad[128];
    path_in(good, sizeof good, "s.h5");
    path_in(bad, sizeof bad, "s_bad.h5");
    CU_ASSERT_EQUAL_FATAL(write_maps(good, 0, 1, NULL), HS_OK);
    size_t n = 0;
    char *bytes = slurp(good, &n);
    spit(bad, bytes, n);
    free(bytes);
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    put_str(f, "tool_version", "x\xed\xa0\x80\x1b]2;y");
    H5Fclose(f);
    hs_maps_reader *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, bad), HS_OK);
    CU_ASSERT_STRING_EQUAL(hs_maps_get_info(r)->tool_version, "x????]2;y");
    char *text[T];
    CU_ASSERT_EQUAL(hs_maps_read_token_text(r, 0, text), HS_OK);
    CU_ASSERT_STRING_EQUAL(text[2], "\n"); /* a token's newline is kept */
    CU_ASSERT_STRING_EQUAL(text[3], "\xc3\xa9");
    hs_maps_free_token_text(text, T);
    hs_maps_close(r);
    unlink(good), unlink(bad);
}

int main(void)
{
    snprintf(DIR_, sizeof DIR_, "/tmp/hs_mapsh_XXXXXX");
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 2;
    }
    static const hs_test tests[] = {
        { "test_every_refused_map_file_leaves_nothing_open",
          test_every_refused_map_file_leaves_nothing_open },
        { "test_writers_never_follow_a_symlink_at_a_temporary_name",
          test_writers_never_follow_a_symlink_at_a_temporary_name },
        { "test_without_force_the_output_is_created_only_where_nothing_is",
          test_without_force_the_output_is_created_only_where_nothing_is },
        { "test_token_ids_beyond_int32_are_refused", test_token_ids_beyond_int32_are_refused },
        { "test_strings_are_well_formed_utf8_when_handed_on",
          test_strings_are_well_formed_utf8_when_handed_on },
    };
    const int rc = hs_run_tests("maps_hostile", tests, HS_NTESTS(tests));
    rmdir(DIR_);
    return rc;
}
