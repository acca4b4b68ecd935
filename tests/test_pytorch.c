/* The PyTorch checkpoint reader (model/checkpoint/pytorch.c, pickle.c) in the
 * library suites, so that the sanitizer and valgrind passes read it too:
 * the fuzz target's seeds (torch's own files and the hand-written ones of
 * tests/pytorch_hostile.py), the pickle machine's limits at their edges,
 * and convert --to safetensors' shards. tests/test_pytorch.sh runs the
 * command end to end against torch-written files. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "pickle.h"
#include "pytorch.h"
#include "runner.h"

#define CORPUS HS_FIXTURE_DIR "/../fuzz/corpus/pytorch"
#define LLAMA_GQA HS_FIXTURE_DIR "/models/llama_gqa"

/* Every seed: torch's and the assembler's valid files open with tinylm_h1's
 * ten tensors (torch's with its buffers); a bool parameter opens (its
 * structure is sound; a load refuses its dtype); every other hand-written
 * file is refused with HS_EFORMAT and a message naming the file. */
static void test_seeds_open_or_are_refused(void)
{
    DIR *d = opendir(CORPUS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
        const int good = !strncmp(e->d_name, "torch-", 6) || !strncmp(e->d_name, "hand-valid", 10) ||
                         !strcmp(e->d_name, "hand-bool_parameter.bin");
        hs_safetensors st;
        const int rc = hs_pt_open(&st, path);
        if (good) {
            CU_ASSERT_EQUAL(rc, HS_OK);
            if (!rc) {
                CU_ASSERT(st.n >= 10);
                CU_ASSERT_PTR_NOT_NULL(hs_st_find(&st, "h.0.attn.q_proj.weight"));
                hs_st_close(&st);
            }
        } else {
            CU_ASSERT_EQUAL(rc, HS_EFORMAT);
            CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), e->d_name));
        }
        if (rc != (good ? HS_OK : HS_EFORMAT))
            printf("\n  %s: %d %s\n", e->d_name, rc, hs_last_error());
        seen++;
    }
    closedir(d);
    CU_ASSERT(seen >= 20);
}

/* One pickle of nesting `depth` (TUPLE1 around None), read or refused. */
static int nested(int depth, int marks)
{
    unsigned char buf[300];
    size_t n = 0;
    buf[n++] = 0x80, buf[n++] = 2;
    for (int i = 0; i < depth && marks; i++)
        buf[n++] = '(';
    buf[n++] = 'N';
    for (int i = 0; i < depth; i++)
        buf[n++] = marks ? 't' : 0x85;
    buf[n++] = '.';
    hs_pickle pk = { 0 };
    hs_pk *v;
    size_t used;
    const int rc = hs_pickle_read(&pk, buf, n, "nested", &v, &used);
    if (!rc)
        CU_ASSERT_EQUAL(used, n);
    hs_pickle_free(&pk);
    return rc;
}

/* Exactly HS_PK_MAX_DEPTH levels of containers and of marks are read; one
 * more is refused, naming the opcode. */
static void test_nesting_limit_at_its_edge(void)
{
    CU_ASSERT_EQUAL(nested(HS_PK_MAX_DEPTH, 0), HS_OK);
    CU_ASSERT_EQUAL(nested(HS_PK_MAX_DEPTH + 1, 0), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "TUPLE1"));
    CU_ASSERT_EQUAL(nested(HS_PK_MAX_DEPTH, 1), HS_OK);
    CU_ASSERT_EQUAL(nested(HS_PK_MAX_DEPTH + 1, 1), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "MARK"));
}

/* Integers as a pickler writes them: BININT's sign, LONG1's sign extension,
 * a LONG1 beyond int64 kept as bytes. */
static void test_integers_keep_their_sign(void)
{
    static const unsigned char p[] = { 0x80, 2, '(', 'J', 0xff, 0xff, 0xff, 0xff,
                                       0x8a, 2, 0x00, 0x80, 0x8a, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0,
                                       'M', 0xff, 0xff, 't', '.' };
    hs_pickle pk = { 0 };
    hs_pk *v;
    size_t used;
    CU_ASSERT_EQUAL_FATAL(hs_pickle_read(&pk, p, sizeof p, "ints", &v, &used), HS_OK);
    CU_ASSERT_EQUAL_FATAL(v->n, 4);
    CU_ASSERT_EQUAL(v->item[0]->i, -1);
    CU_ASSERT_EQUAL(v->item[1]->i, -32768);
    CU_ASSERT_EQUAL(v->item[2]->kind, HS_PK_BIGINT);
    CU_ASSERT_EQUAL(v->item[3]->i, 65535);
    hs_pickle_free(&pk);
}

/* Past max_shard bytes, convert writes shards and their index; loaded back,
 * every parameter is the original's, bit for bit. */
static void test_convert_shards_keep_every_bit(void)
{
    char out[] = "/tmp/hs_convert_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
    int n = 0, shards = 0;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_convert(LLAMA_GQA, out, 3000, &n, &shards), HS_OK);
    CU_ASSERT(shards > 1);
    char index[1100];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", out);
    CU_ASSERT_EQUAL(access(index, F_OK), 0);
    hs_model a, b;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, LLAMA_GQA), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&b, out), HS_OK);
    CU_ASSERT_EQUAL(a.n_params, b.n_params);
    CU_ASSERT(!memcmp(a.params, b.params, a.n_params * sizeof *a.params));
    hs_model_free(&a);
    hs_model_free(&b);
    CU_ASSERT_EQUAL(hs_checkpoint_convert(out, out, 3000, &n, &shards), HS_EINVAL);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_seeds_open_or_are_refused", test_seeds_open_or_are_refused },
        { "test_nesting_limit_at_its_edge", test_nesting_limit_at_its_edge },
        { "test_integers_keep_their_sign", test_integers_keep_their_sign },
        { "test_convert_shards_keep_every_bit", test_convert_shards_keep_every_bit },
    };
    return hs_run_tests("pytorch_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
