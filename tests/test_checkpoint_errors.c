/* Checkpoint loading against damaged files: each test copies a valid fixture
 * checkpoint (config.json + model.safetensors) into a fresh directory under
 * /tmp, corrupts one thing, and checks that hs_checkpoint_load refuses it with
 * the right status and a message naming the file and, for tensor problems,
 * the tensor. The safetensors header is edited as text (8-byte little-endian
 * length, JSON, data section kept byte for byte) and written back with the
 * recomputed length. Every failure message is printed for the test log. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "runner.h"

#define GPT2_TINY HS_FIXTURE_DIR "/models/gpt2_tiny"
#define LLAMA_GQA HS_FIXTURE_DIR "/models/llama_gqa"

/* ---- small file helpers -------------------------------------------------- */

/* Whole file, malloc'd (one spare NUL byte); NULL if it cannot be read. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET))
        buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

static int write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(buf, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void join(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

/* A fresh copy of the checkpoint in src under /tmp; returns the malloc'd
 * directory name, NULL on failure. */
static char *copy_dir(const char *src)
{
    char tmpl[] = "/tmp/hs_ckerr_XXXXXX";
    if (!mkdtemp(tmpl))
        return NULL;
    char *dir = strdup(tmpl);
    static const char *const files[] = { "config.json", "model.safetensors" };
    for (size_t i = 0; dir && i < 2; i++) {
        char from[1024], to[1024];
        size_t len = 0;
        join(from, sizeof from, src, files[i]);
        join(to, sizeof to, dir, files[i]);
        char *buf = read_file(from, &len);
        int rc = buf ? write_file(to, buf, len) : -1;
        free(buf);
        if (rc) {
            free(dir);
            dir = NULL;
        }
    }
    return dir;
}

/* Removes dir and every file in it, then frees the name. */
static void remove_dir(char *dir)
{
    if (!dir)
        return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char path[1024];
            join(path, sizeof path, dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

/* text with the first occurrence of from replaced by to (malloc'd), or NULL
 * when from does not occur. */
static char *replace_once(const char *text, size_t len, const char *from, const char *to,
                          size_t *out_len)
{
    const char *at = memmem(text, len, from, strlen(from));
    if (!at)
        return NULL;
    size_t pre = (size_t)(at - text), fl = strlen(from), tl = strlen(to);
    size_t n = len - fl + tl;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    memcpy(out, text, pre);
    memcpy(out + pre, to, tl);
    memcpy(out + pre + tl, at + fl, len - pre - fl);
    out[n] = 0;
    *out_len = n;
    return out;
}

/* Replaces the first `from` in the JSON header of dir/model.safetensors by
 * `to`, writing the recomputed header length and the data section as it was.
 * 0 on success, -1 when the file is unreadable or `from` is not in the
 * header. */
static int rewrite_header(const char *dir, const char *from, const char *to)
{
    char path[1024];
    join(path, sizeof path, dir, "model.safetensors");
    size_t len = 0, hlen = 0, new_hlen = 0;
    unsigned char *file = (unsigned char *)read_file(path, &len);
    if (!file || len < 8) {
        free(file);
        return -1;
    }
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | file[i];
    int rc = -1;
    char *header = hlen <= len - 8
                       ? replace_once((const char *)file + 8, hlen, from, to, &new_hlen)
                       : NULL;
    if (header) {
        size_t data_len = len - 8 - hlen, n = 8 + new_hlen + data_len;
        unsigned char *out = malloc(n);
        if (out) {
            for (int i = 0; i < 8; i++)
                out[i] = (unsigned char)((uint64_t)new_hlen >> (8 * i));
            memcpy(out + 8, header, new_hlen);
            memcpy(out + 8 + new_hlen, file + 8 + hlen, data_len);
            rc = write_file(path, out, n);
            free(out);
        }
    }
    free(header);
    free(file);
    return rc;
}

/* The same edit on dir/config.json. */
static int rewrite_config(const char *dir, const char *from, const char *to)
{
    char path[1024];
    join(path, sizeof path, dir, "config.json");
    size_t len = 0, n = 0;
    char *text = read_file(path, &len);
    char *edited = text ? replace_once(text, len, from, to, &n) : NULL;
    int rc = edited ? write_file(path, edited, n) : -1;
    free(edited);
    free(text);
    return rc;
}

/* Sets the 8-byte header length of dir/model.safetensors. */
static int set_header_length(const char *dir, uint64_t hlen)
{
    char path[1024];
    join(path, sizeof path, dir, "model.safetensors");
    size_t len = 0;
    unsigned char *file = (unsigned char *)read_file(path, &len);
    int rc = -1;
    if (file && len >= 8) {
        for (int i = 0; i < 8; i++)
            file[i] = (unsigned char)(hlen >> (8 * i));
        rc = write_file(path, file, len);
    }
    free(file);
    return rc;
}

/* Keeps the first keep bytes of dir/name. */
static int truncate_to(const char *dir, const char *name, size_t keep)
{
    char path[1024];
    join(path, sizeof path, dir, name);
    size_t len = 0;
    char *file = read_file(path, &len);
    int rc = file && keep <= len ? write_file(path, file, keep) : -1;
    free(file);
    return rc;
}

static size_t file_size(const char *dir, const char *name)
{
    char path[1024];
    join(path, sizeof path, dir, name);
    size_t len = 0;
    char *file = read_file(path, &len);
    free(file);
    return file ? len : 0;
}

/* ---- the check every failure case shares --------------------------------- */

/* Loads dir expecting failure: status `code` (any non-zero status when code
 * is -1) and a message containing each of the NULL-terminated needles. The
 * model must be left without parameters (freed or never allocated); calling
 * hs_model_free on it again must be harmless. */
static void expect_failure(const char *what, const char *dir, int code, const char *const *needles)
{
    hs_model *m = calloc(1, sizeof *m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int rc = hs_checkpoint_load(m, dir);
    const char *msg = hs_last_error();
    printf("\n    %s: rc=%d (%s): %s", what, rc, hs_status_name(rc), msg);
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    if (code >= 0)
        CU_ASSERT_EQUAL(rc, code);
    for (int i = 0; needles && needles[i]; i++) {
        int found = strstr(msg, needles[i]) != NULL;
        if (!found)
            printf("\n      message lacks \"%s\"", needles[i]);
        CU_ASSERT(found);
    }
    if (rc != HS_OK) {
        CU_ASSERT_PTR_NULL(m->params);
        CU_ASSERT_PTR_NULL(m->tensors);
    }
    hs_model_free(m); /* zeroed by the library or by calloc: a no-op */
    free(m);
}

#define NEEDLES(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* A copy of src edited in its safetensors header, expected to fail. */
static void header_case(const char *what, const char *src, const char *from, const char *to,
                        int code, const char *const *needles)
{
    char *dir = copy_dir(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    int edited = rewrite_header(dir, from, to);
    if (edited)
        printf("\n    %s: pattern %s not in the header of %s", what, from, src);
    CU_ASSERT_EQUAL(edited, 0);
    if (!edited)
        expect_failure(what, dir, code, needles);
    remove_dir(dir);
}

/* A copy of src edited in its config.json, expected to fail. */
static void config_case(const char *what, const char *src, const char *from, const char *to,
                        int code, const char *const *needles)
{
    char *dir = copy_dir(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    int edited = rewrite_config(dir, from, to);
    if (edited)
        printf("\n    %s: pattern %s not in %s/config.json", what, from, src);
    CU_ASSERT_EQUAL(edited, 0);
    if (!edited)
        expect_failure(what, dir, code, needles);
    remove_dir(dir);
}

/* ---- tests --------------------------------------------------------------- */

/* Control: the untouched copies load, so failures below come from the edit
 * and not from the harness. Every F32 byte of the data section becomes one
 * parameter (gpt2_tiny ties its embeddings; llama_gqa has lm_head). The
 * header helper is proven too: a no-op rewrite (same text, recomputed
 * length) still loads. */
static void control_case(const char *src)
{
    char *dir = copy_dir(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            CU_ASSERT_EQUAL(rewrite_header(dir, "\"__metadata__\"", "\"__metadata__\""), 0);
        hs_model *m = calloc(1, sizeof *m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        int rc = hs_checkpoint_load(m, dir);
        if (rc)
            printf("\n    control %s: rc=%d: %s", src, rc, hs_last_error());
        CU_ASSERT_EQUAL(rc, HS_OK);
        if (rc == HS_OK) {
            char path[1024];
            join(path, sizeof path, dir, "model.safetensors");
            size_t len = 0, hlen = 0;
            unsigned char *file = (unsigned char *)read_file(path, &len);
            CU_ASSERT_PTR_NOT_NULL(file);
            if (file) {
                for (int i = 7; i >= 0; i--)
                    hlen = hlen << 8 | file[i];
                CU_ASSERT_EQUAL(m->n_params * 4, len - 8 - hlen);
            }
            free(file);
            CU_ASSERT_PTR_NOT_NULL(m->params);
            CU_ASSERT(m->n_tensors > 0);
        }
        hs_model_free(m);
        free(m);
    }
    remove_dir(dir);
}

static void test_untouched_copy_loads(void)
{
    control_case(GPT2_TINY);
    control_case(LLAMA_GQA);
}

static void test_file_shorter_than_length_field_is_rejected(void)
{
    static const size_t keep[] = { 0, 5 };
    for (size_t i = 0; i < 2; i++) {
        char *dir = copy_dir(GPT2_TINY);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
        CU_ASSERT_EQUAL_FATAL(truncate_to(dir, "model.safetensors", keep[i]), 0);
        char size[32]; /* the message states the file's real size */
        snprintf(size, sizeof size, "%zu bytes", keep[i]);
        expect_failure(keep[i] ? "5-byte file" : "empty file", dir, HS_EFORMAT,
                       NEEDLES("model.safetensors", size));
        remove_dir(dir);
    }
}

static void test_header_length_beyond_file_is_rejected(void)
{
    char *dir = copy_dir(GPT2_TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    size_t len = file_size(dir, "model.safetensors");
    CU_ASSERT_FATAL(len > 8);
    /* one byte more than the file holds after the length field, then the
     * largest 64-bit value (must not wrap around in the bounds check) */
    char size[32]; /* the message states the file's real size */
    snprintf(size, sizeof size, "%zu bytes", len);
    CU_ASSERT_EQUAL_FATAL(set_header_length(dir, (uint64_t)len - 8 + 1), 0);
    expect_failure("header length = file - 7", dir, HS_EFORMAT,
                   NEEDLES("model.safetensors", size));
    CU_ASSERT_EQUAL_FATAL(set_header_length(dir, UINT64_MAX), 0);
    expect_failure("header length = 2^64-1", dir, HS_EFORMAT, NEEDLES("model.safetensors", size));
    remove_dir(dir);
}

/* gpt2_tiny ends with ln_f.weight [30336, 30400] and ln_f.bias [30400,
 * 30464]: without the last 100 bytes both run past the data section. */
static void test_truncated_data_is_rejected(void)
{
    char *dir = copy_dir(GPT2_TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    size_t len = file_size(dir, "model.safetensors");
    CU_ASSERT_FATAL(len > 100);
    CU_ASSERT_EQUAL_FATAL(truncate_to(dir, "model.safetensors", len - 100), 0);
    expect_failure("data truncated by 100 bytes", dir, HS_EFORMAT,
                   NEEDLES("model.safetensors", "ln_f."));
    remove_dir(dir);
}

static void test_header_not_json_is_rejected(void)
{
    header_case("header without a colon", GPT2_TINY, "\"__metadata__\":", "\"__metadata__\"",
                HS_EFORMAT, NEEDLES("model.safetensors"));
    header_case("header with an unbalanced bracket", GPT2_TINY, "{\"__metadata__\":", "[{\"__metadata__\":",
                HS_EFORMAT, NEEDLES("model.safetensors"));
}

static void test_unknown_dtype_names_tensor(void)
{
    header_case("dtype Q4", GPT2_TINY, "\"h.0.ln_1.bias\":{\"dtype\":\"F32\"",
                "\"h.0.ln_1.bias\":{\"dtype\":\"Q4\"", HS_EFORMAT,
                NEEDLES("model.safetensors", "h.0.ln_1.bias", "Q4"));
}

/* ln_f.bias: 16 F32 = 64 bytes, declared as 8 I64 = 64 bytes, so the
 * container is consistent and only the loader can refuse it. */
static void test_unsupported_dtype_names_tensor(void)
{
    header_case("ln_f.bias as I64", GPT2_TINY, "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16]",
                "\"ln_f.bias\":{\"dtype\":\"I64\",\"shape\":[8]", HS_EFORMAT,
                NEEDLES("model.safetensors", "ln_f.bias", "I64", "not supported"));
}

static void test_wrong_shape_names_tensor(void)
{
    header_case("c_fc.weight transposed", GPT2_TINY,
                "\"h.0.mlp.c_fc.weight\":{\"dtype\":\"F32\",\"shape\":[16,64]",
                "\"h.0.mlp.c_fc.weight\":{\"dtype\":\"F32\",\"shape\":[64,16]", HS_EFORMAT,
                NEEDLES("model.safetensors", "h.0.mlp.c_fc.weight", "shape"));
}

/* h.0.ln_1.bias moved from [4160, 4224] to [4128, 4192]: the same 64 bytes,
 * half of them inside h.0.ln_1.weight [4096, 4160]. */
static void test_overlapping_offsets_are_rejected(void)
{
    header_case("ln_1.bias overlapping ln_1.weight", GPT2_TINY,
                "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[4160,4224]}",
                "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[4128,4192]}",
                HS_EFORMAT, NEEDLES("model.safetensors", "overlap", "h.0.ln_1.bias"));
}

/* The data section holds 30464 bytes; ln_f.bias keeps its 64-byte size but
 * is moved past the end, and then given an end before its begin. */
static void test_offsets_out_of_range_are_rejected(void)
{
    header_case("ln_f.bias beyond the data section", GPT2_TINY,
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[30400,30464]}",
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[40000,40064]}",
                HS_EFORMAT, NEEDLES("model.safetensors", "ln_f.bias"));
    header_case("ln_f.bias ending past 2^64", GPT2_TINY,
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[30400,30464]}",
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],"
                "\"data_offsets\":[18446744073709551600,18446744073709551664]}",
                HS_EFORMAT, NEEDLES("model.safetensors", "ln_f.bias"));
    header_case("ln_f.bias with end < begin", GPT2_TINY,
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[30400,30464]}",
                "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[30464,30400]}",
                HS_EFORMAT, NEEDLES("model.safetensors", "ln_f.bias"));
}

static void test_missing_tensor_is_named(void)
{
    header_case("ln_f.bias renamed", GPT2_TINY, "\"ln_f.bias\"", "\"ln_f.biax\"", HS_EFORMAT,
                NEEDLES("model.safetensors", "ln_f.bias", "missing"));
}

static void test_malformed_config_is_rejected(void)
{
    config_case("config with a double comma", GPT2_TINY, "\"n_embd\": 16,", "\"n_embd\": 16,,",
                HS_EFORMAT, NEEDLES("config.json"));
}

static void test_config_missing_key_is_named(void)
{
    config_case("config without n_embd", GPT2_TINY, "\"n_embd\": 16,", "", HS_EFORMAT,
                NEEDLES("config.json", "n_embd"));
}

static void test_unknown_model_type_is_rejected(void)
{
    config_case("model_type mamba", GPT2_TINY, "\"model_type\": \"gpt2\"",
                "\"model_type\": \"mamba\"", HS_EFORMAT,
                NEEDLES("config.json", "model_type", "mamba"));
}

static void test_heads_not_dividing_width_are_rejected(void)
{
    config_case("n_embd 16 with n_head 3", GPT2_TINY, "\"n_head\": 4", "\"n_head\": 3",
                HS_EFORMAT, NEEDLES("config.json", "n_head"));
}

static void test_missing_config_is_io_error(void)
{
    char *dir = copy_dir(GPT2_TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[1024];
    join(path, sizeof path, dir, "config.json");
    CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    expect_failure("config.json removed", dir, HS_EIO, NEEDLES("config.json"));
    remove_dir(dir);
}

static void test_missing_safetensors_is_io_error(void)
{
    char *dir = copy_dir(GPT2_TINY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[1024];
    join(path, sizeof path, dir, "model.safetensors");
    CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    expect_failure("model.safetensors removed", dir, HS_EIO, NEEDLES("model.safetensors"));
    remove_dir(dir);
}

/* llama_gqa has 4 query heads over 2 key/value heads (k_proj [8, 16]); with
 * one key/value head the configuration implies k_proj [4, 16]. */
static void test_llama_kv_heads_mismatch_names_k_proj(void)
{
    config_case("llama with num_key_value_heads 1", LLAMA_GQA, "\"num_key_value_heads\": 2",
                "\"num_key_value_heads\": 1", HS_EFORMAT,
                NEEDLES("model.safetensors", "model.layers.0.self_attn.k_proj.weight", "shape"));
}

/* ---- zero and non-dividing head counts ------------------------------------ */

#define TINYLM_H4 HS_FIXTURE_DIR "/models/tinylm_h4"
#define HS_POST_GELU HS_FIXTURE_DIR "/models/hs_post_gelu"
#define HS_MIXED HS_FIXTURE_DIR "/models/hs_mixed"

/* "n_head": 0 in a headscope config without head_dim divided d_model by
 * zero (SIGFPE) while deriving head_dim: it is a format error naming the
 * key, with or without head_dim and n_kv_head. */
static void test_headscope_zero_heads_are_refused_not_a_signal(void)
{
    config_case("headscope n_head 0, no head_dim", TINYLM_H4,
                "\"n_head\": 4,\n  \"n_kv_head\": 4,\n  \"head_dim\": 4,", "\"n_head\": 0,",
                HS_EFORMAT, NEEDLES("config.json", "\"n_head\"", "positive"));
    config_case("headscope n_head 0 with head_dim", TINYLM_H4, "\"n_head\": 4,", "\"n_head\": 0,",
                HS_EFORMAT, NEEDLES("config.json", "\"n_head\"", "positive"));
    config_case("headscope n_head [4, 0]", HS_MIXED, "\"n_head\": [\n    4,\n    2\n  ]",
                "\"n_head\": [4, 0]", HS_EFORMAT, NEEDLES("config.json", "\"n_head\"[1]"));
    config_case("headscope n_kv_head 3 of 4 heads", HS_POST_GELU, "\"n_kv_head\": 4,",
                "\"n_kv_head\": 3,", HS_EFORMAT, NEEDLES("config.json", "n_head=4", "n_kv_head=3"));
    config_case("headscope n_layer 0", TINYLM_H4, "\"n_layer\": 1,", "\"n_layer\": 0,", HS_EFORMAT,
                NEEDLES("config.json", "n_layer"));
    config_case("headscope d_model 18 by 4 heads", TINYLM_H4,
                "\"d_model\": 16,\n  \"n_head\": 4,\n  \"n_kv_head\": 4,\n  \"head_dim\": 4,",
                "\"d_model\": 18,\n  \"n_head\": 4,", HS_EFORMAT,
                NEEDLES("config.json", "d_model=18", "n_head=4"));
}

/* The last message holds no wrapped (negative) size. */
static void expect_no_wrapped_number(void)
{
    const int wrapped = strstr(hs_last_error(), "=-") || strstr(hs_last_error(), "[-") ||
                        strstr(hs_last_error(), ",-");
    if (wrapped)
        printf("\n      wrapped number in: %s", hs_last_error());
    CU_ASSERT(!wrapped);
}

/* Numbers no model has: 1e300 heads (float -> int overflow), gpt2's
 * n_embd 1e9 (4 n_embd overflowed int: "d_ff=-294967296"), non-finite
 * numbers (1e400 parses as infinity). Each is a format error naming the key,
 * never undefined behaviour or a wrapped number in the message. */
static void test_huge_and_nonfinite_numbers_are_refused(void)
{
    config_case("headscope n_head [4, 1e300]", HS_MIXED, "\"n_head\": [\n    4,\n    2\n  ]",
                "\"n_head\": [4, 1e300]", HS_EFORMAT, NEEDLES("config.json", "\"n_head\"[1]"));
    expect_no_wrapped_number();
    config_case("headscope n_head 1e300", TINYLM_H4, "\"n_head\": 4,", "\"n_head\": 1e300,",
                HS_EFORMAT, NEEDLES("config.json", "\"n_head\""));
    expect_no_wrapped_number();
    config_case("headscope n_head 5000", TINYLM_H4, "\"n_head\": 4,", "\"n_head\": 5000,",
                HS_EFORMAT, NEEDLES("config.json", "\"n_head\"", "5000"));
    config_case("gpt2 n_embd 1e9", GPT2_TINY, "\"n_embd\": 16,", "\"n_embd\": 1000000000,",
                HS_EFORMAT, NEEDLES("config.json", "n_embd=1000000000"));
    expect_no_wrapped_number();
    config_case("gpt2 n_layer 1e300", GPT2_TINY, "\"n_layer\": 2,", "\"n_layer\": 1e300,",
                HS_EFORMAT, NEEDLES("config.json", "\"n_layer\""));
    config_case("gpt2 layer_norm_epsilon 1e400", GPT2_TINY, "\"layer_norm_epsilon\": 1e-05,",
                "\"layer_norm_epsilon\": 1e400,", HS_EFORMAT,
                NEEDLES("config.json", "\"layer_norm_epsilon\"", "finite"));
    config_case("headscope rope_theta -1e400", TINYLM_H4, "\"rope_theta\": 10000.0,",
                "\"rope_theta\": -1e400,", HS_EFORMAT,
                NEEDLES("config.json", "\"rope_theta\"", "finite"));
    config_case("headscope head_dim 1e9 x 4 heads", TINYLM_H4, "\"head_dim\": 4,",
                "\"head_dim\": 1000000000,", HS_EFORMAT, NEEDLES("config.json", "head_dim"));
    expect_no_wrapped_number();
}

/* A key given twice: cJSON's lookups found the first, Python (and so
 * Hugging Face) keeps the last. A second rope_scaling slipped an
 * unimplemented yarn past the refusal; a second Mistral sliding_window ran
 * another attention than HF's. Refused in every object, at any depth, and
 * text after the value (the first value alone was read) is refused with its
 * offset; so is a safetensors header repeating a tensor. */
static void test_repeated_keys_and_trailing_text_are_refused(void)
{
    config_case("llama rope_scaling twice", LLAMA_GQA, "\"rope_theta\": 10000.0,",
                "\"rope_theta\": 10000.0, \"rope_scaling\": null, \"rope_scaling\": "
                "{\"rope_type\": \"yarn\", \"factor\": 4},", HS_EFORMAT,
                NEEDLES("config.json", "\"rope_scaling\" is repeated", "top-level object"));
    config_case("llama nested repeat", LLAMA_GQA, "\"rope_theta\": 10000.0,",
                "\"rope_theta\": 10000.0, \"rope_scaling\": {\"rope_type\": \"linear\", "
                "\"factor\": 2, \"factor\": 4},", HS_EFORMAT,
                NEEDLES("\"factor\" is repeated", "\"rope_scaling\""));
    config_case("llama text after the object", LLAMA_GQA, "  ]\n}", "  ]\n}{\"model_type\": 1}",
                HS_EFORMAT, NEEDLES("config.json", "text after the JSON value at byte"));
    char *dir = copy_dir(LLAMA_GQA), path[1024];
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    join(path, sizeof path, dir, "config.json");
    size_t len = 0;
    char *text = read_file(path, &len), *nul = text ? realloc(text, len + 8) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(nul);
    memcpy(nul + len, "\0garbage", 8);
    CU_ASSERT_EQUAL(write_file(path, nul, len + 8), 0);
    free(nul);
    expect_failure("llama NUL and garbage after the object", dir, HS_EFORMAT,
                   NEEDLES("config.json", "a NUL byte at byte"));
    remove_dir(dir);
    header_case("header repeats a tensor", GPT2_TINY, "\"__metadata__\"",
                "\"wte.weight\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                "\"__metadata__\"", HS_EFORMAT, NEEDLES("model.safetensors", "\"wte.weight\" is repeated"));
}

/* vocab_size, n_ctx or d_ff of 1e9 over a 40 KB checkpoint: once tried to
 * allocate 4-64 GB for the parameters before reading the file. The sizes are
 * checked against the file's tensors first: the error names the tensor. */
static void test_sizes_beyond_the_file_are_refused_before_allocating(void)
{
    config_case("gpt2 vocab_size 1e9", GPT2_TINY, "\"vocab_size\": 48,",
                "\"vocab_size\": 1000000000,", HS_EFORMAT,
                NEEDLES("model.safetensors", "wte.weight", "1000000000"));
    config_case("gpt2 n_positions 1e9", GPT2_TINY, "\"n_positions\": 16,",
                "\"n_positions\": 1000000000,", HS_EFORMAT,
                NEEDLES("model.safetensors", "wpe.weight", "1000000000"));
    config_case("headscope d_ff 1e9", HS_POST_GELU, "\"d_ff\": 32,", "\"d_ff\": 1000000000,",
                HS_EFORMAT, NEEDLES("model.safetensors", "mlp.fc.weight", "1000000000"));
    config_case("llama intermediate_size 1e9", LLAMA_GQA, "\"intermediate_size\": 40,",
                "\"intermediate_size\": 1000000000,", HS_EFORMAT,
                NEEDLES("model.safetensors", "mlp.gate_proj.weight", "1000000000"));
}

/* A config.json or model.safetensors that is a FIFO blocked the load for
 * ever (open waits for a writer); a directory is refused the same way. */
static void test_non_regular_files_are_refused(void)
{
    static const char *const names[] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        char *dir = copy_dir(GPT2_TINY);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
        char path[1024];
        join(path, sizeof path, dir, names[i]);
        CU_ASSERT_EQUAL(unlink(path), 0);
        CU_ASSERT_EQUAL(mkfifo(path, 0600), 0);
        expect_failure(names[i], dir, HS_EIO, NEEDLES(names[i], "not a regular file", "FIFO"));
        CU_ASSERT_EQUAL(unlink(path), 0);
        CU_ASSERT_EQUAL(mkdir(path, 0700), 0);
        expect_failure(names[i], dir, HS_EIO, NEEDLES(names[i], "not a regular file"));
        rmdir(path);
        remove_dir(dir);
    }
}

/* Zero or non-dividing key/value heads in Llama configs are named by the
 * Llama key, not by the attention module's internal names. */
static void test_llama_bad_kv_heads_name_the_key(void)
{
    config_case("llama num_key_value_heads 0", LLAMA_GQA, "\"num_key_value_heads\": 2",
                "\"num_key_value_heads\": 0", HS_EFORMAT,
                NEEDLES("config.json", "num_key_value_heads", "positive"));
    config_case("llama num_key_value_heads 3", LLAMA_GQA, "\"num_key_value_heads\": 2",
                "\"num_key_value_heads\": 3", HS_EFORMAT,
                NEEDLES("config.json", "num_attention_heads=4", "num_key_value_heads=3"));
    config_case("llama num_attention_heads 0", LLAMA_GQA, "\"num_attention_heads\": 4",
                "\"num_attention_heads\": 0", HS_EFORMAT,
                NEEDLES("config.json", "num_attention_heads"));
    config_case("gpt2 n_head 0", GPT2_TINY, "\"n_head\": 4", "\"n_head\": 0", HS_EFORMAT,
                NEEDLES("config.json", "\"n_head\""));
}

/* The override path `train --preset P n_head=0` takes: it re-parses the
 * configuration without head_dim and divided by zero the same way. */
static void test_zero_head_overrides_are_refused(void)
{
    static const char *const presets[] = { "gpt2", "llama", "attn-only", "tinylm" };
    static const char *const bad[] = { "n_head=0", "n_head=[0,4]", "n_layer=0", "d_model=0",
                                       "n_kv_head=3", "n_head=-1" };
    for (size_t p = 0; p < 4; p++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            hs_model_config c;
            CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, presets[p]), HS_OK);
            int rc = hs_config_override(&c, bad[i]);
            printf("\n    %s %s: rc=%d: %s", presets[p], bad[i], rc, hs_last_error());
            CU_ASSERT_EQUAL(rc, HS_EINVAL);
            char key[16];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(bad[i], "="), bad[i]);
            CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), key));
        }
}

/* `train --preset P A B` and `train --preset P B A` build the same model: a
 * derived key (n_kv_head, head_dim, gpt2's d_ff) follows its source only
 * while no override gave it. Each pair is applied in both orders and the
 * config.json texts compared, then the values that matter checked. */
static char *config_after(const char *preset, const char *first, const char *second)
{
    hs_model_config c;
    if (hs_config_preset(&c, preset) || hs_config_override(&c, first) ||
        hs_config_override(&c, second)) {
        printf("\n    %s %s %s: %s", preset, first, second, hs_last_error());
        return NULL;
    }
    return hs_config_to_json(&c);
}

static void test_overrides_commute(void)
{
    static const struct {
        const char *preset, *a, *b;
        int n_head1, n_kv_head1, head_dim, d_ff; /* of layer 1 */
    } cases[] = {
        { "llama", "n_kv_head=1", "n_head=8", 8, 1, 8, 172 },
        { "llama", "n_kv_head=2", "n_head=8", 8, 2, 8, 172 },
        { "attn-only", "head_dim=32", "n_head=[1,8]", 8, 8, 32, 0 },
        { "attn-only", "n_kv_head=[1,2]", "n_head=[1,8]", 8, 2, 64, 0 },
        { "attn-only", "n_head=8", "d_model=128", 8, 8, 16, 0 },
        { "attn-only", "head_dim=8", "d_model=128", 4, 4, 8, 0 },
        { "gpt2", "d_ff=100", "d_model=128", 4, 4, 32, 100 },
        { "gpt2", "n_head=8", "d_model=128", 8, 8, 16, 512 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *ab = config_after(cases[i].preset, cases[i].a, cases[i].b);
        char *ba = config_after(cases[i].preset, cases[i].b, cases[i].a);
        CU_ASSERT_PTR_NOT_NULL(ab);
        CU_ASSERT_PTR_NOT_NULL(ba);
        if (ab && ba && strcmp(ab, ba))
            printf("\n    %s %s %s:\n%s\n  differs from the other order:\n%s", cases[i].preset,
                   cases[i].a, cases[i].b, ab, ba);
        CU_ASSERT(ab && ba && !strcmp(ab, ba));
        free(ab);
        free(ba);
        hs_model_config c;
        CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, cases[i].preset), HS_OK);
        CU_ASSERT_EQUAL(hs_config_override(&c, cases[i].b), HS_OK);
        CU_ASSERT_EQUAL(hs_config_override(&c, cases[i].a), HS_OK);
        CU_ASSERT_EQUAL(c.n_head[1], cases[i].n_head1);
        CU_ASSERT_EQUAL(c.n_kv_head[1], cases[i].n_kv_head1);
        CU_ASSERT_EQUAL(c.head_dim, cases[i].head_dim);
        CU_ASSERT_EQUAL(c.d_ff, cases[i].d_ff);
        CU_ASSERT_EQUAL(hs_config_check(&c), HS_OK);
    }
}

/* Without an explicit value the derived keys still follow their source:
 * n_head=8 alone makes llama's 2 KV heads 8 (MHA), as before. */
static void test_derived_keys_follow_their_source(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "llama"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "n_head=8"), HS_OK);
    CU_ASSERT_EQUAL(c.n_kv_head[0], 8);
    CU_ASSERT_EQUAL(c.head_dim, 8);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "d_model=128"), HS_OK);
    CU_ASSERT_EQUAL(c.head_dim, 16);
    CU_ASSERT_EQUAL(c.d_ff, 172); /* llama's preset does not derive it */
}

/* ---- keys that change the computation ------------------------------------ */

/* A copy of src edited in its config.json, expected to load. */
static void config_loads(const char *what, const char *src, const char *from, const char *to)
{
    char *dir = copy_dir(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    int edited = rewrite_config(dir, from, to);
    CU_ASSERT_EQUAL(edited, 0);
    hs_model *m = calloc(1, sizeof *m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int rc = edited ? -1 : hs_checkpoint_load(m, dir);
    if (rc)
        printf("\n    %s: rc=%d: %s", what, rc, hs_last_error());
    CU_ASSERT_EQUAL(rc, HS_OK);
    hs_model_free(m);
    free(m);
    remove_dir(dir);
}

#define LLAMA_AT "\"hidden_act\": \"silu\","
#define GPT2_AT "\"layer_norm_epsilon\": 1e-05,"

/* Each key below changes what the model computes and is not implemented:
 * loading refuses it, naming the key, instead of computing another model. */
static void test_unimplemented_keys_are_refused(void)
{
    static const struct {
        const char *src, *at, *add, *key;
    } cases[] = {
        { LLAMA_GQA, LLAMA_AT, "\"sliding_window\": 4096,", "sliding_window" },
        { LLAMA_GQA, LLAMA_AT, "\"use_sliding_window\": true,", "use_sliding_window" },
        { LLAMA_GQA, LLAMA_AT, "\"layer_types\": [\"sliding_attention\", \"full_attention\"],",
          "layer_types" },
        { LLAMA_GQA, LLAMA_AT, "\"partial_rotary_factor\": 0.5,", "partial_rotary_factor" },
        { LLAMA_GQA, LLAMA_AT, "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2.0},",
          "rope_scaling" },
        { LLAMA_GQA, LLAMA_AT, "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0},",
          "rope_scaling" },
        { LLAMA_GQA, LLAMA_AT, "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8},",
          "rope_parameters" },
        { LLAMA_GQA, LLAMA_AT, "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": "
                               "500000.0},",
          "rope_theta" },
        { LLAMA_GQA, LLAMA_AT, "\"quantization_config\": {\"quant_method\": \"gptq\"},",
          "quantization_config" },
        { LLAMA_GQA, LLAMA_AT, "\"pruned_heads\": {\"0\": [1]},", "pruned_heads" },
        { LLAMA_GQA, LLAMA_AT, "\"attn_logit_softcapping\": 50.0,", "attn_logit_softcapping" },
        { GPT2_TINY, GPT2_AT, "\"scale_attn_weights\": false,", "scale_attn_weights" },
        { GPT2_TINY, GPT2_AT, "\"scale_attn_by_inverse_layer_idx\": true,",
          "scale_attn_by_inverse_layer_idx" },
        { GPT2_TINY, GPT2_AT, "\"add_cross_attention\": true,", "add_cross_attention" },
        { GPT2_TINY, GPT2_AT, "\"sliding_window\": 8,", "sliding_window" },
        { GPT2_TINY, GPT2_AT, "\"rope_scaling\": {\"factor\": 2.0},", "rope_scaling" },
        { GPT2_TINY, GPT2_AT, "\"attn_pdrop\": 1.5,", "attn_pdrop" },
        { TINYLM_H4, "\"n_ctx\": 8,", "\"window\": [[0, 4, 4]],", "window" },
        { TINYLM_H4, "\"n_ctx\": 8,", "\"sliding_window\": 4,", "sliding_window" },
        { TINYLM_H4, "\"n_ctx\": 8,", "\"n_heads\": 4,", "n_heads" },
        { TINYLM_H4, "\"n_ctx\": 8,", "\"dropout\": 0.1,", "dropout" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char to[256], what[300];
        snprintf(to, sizeof to, "%s\n  %s", cases[i].at, cases[i].add);
        snprintf(what, sizeof what, "%s + %s", strrchr(cases[i].src, '/') + 1, cases[i].add);
        config_case(what, cases[i].src, cases[i].at, to, HS_EFORMAT,
                    NEEDLES("config.json", cases[i].key));
    }
}

/* Bookkeeping stays accepted: the keys of the public GPT-2 and Llama config
 * files (dropouts of 0.1 included: Hugging Face applies them only in
 * training), the implemented values of the refused keys, and plain RoPE
 * spelled as an object. */
static void test_bookkeeping_keys_are_accepted(void)
{
    config_loads("gpt2 with the public GPT-2 config's keys", GPT2_TINY, GPT2_AT,
                 GPT2_AT "\"attn_pdrop\": 0.1, \"embd_pdrop\": 0.1, \"resid_pdrop\": 0.1,"
                         "\"summary_first_dropout\": 0.1, \"summary_activation\": null,"
                         "\"summary_proj_to_labels\": true, \"summary_type\": \"cls_index\","
                         "\"summary_use_proj\": true, \"n_ctx\": 16, \"bos_token_id\": 47,"
                         "\"eos_token_id\": 47, \"initializer_range\": 0.02,"
                         "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true,"
                         "\"max_length\": 50}}, \"scale_attn_weights\": true,"
                         "\"scale_attn_by_inverse_layer_idx\": false,"
                         "\"reorder_and_upcast_attn\": false, \"use_cache\": true,"
                         "\"torch_dtype\": \"float32\", \"transformers_version\": \"4.40.0\",");
    config_loads("llama with bookkeeping keys", LLAMA_GQA, LLAMA_AT,
                 LLAMA_AT "\"attention_dropout\": 0.0, \"pretraining_tp\": 1,"
                          "\"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": null,"
                          "\"rope_scaling\": null, \"sliding_window\": null,"
                          "\"use_sliding_window\": false, \"partial_rotary_factor\": 1.0,"
                          "\"pruned_heads\": {}, \"quantization_config\": null,"
                          "\"layer_types\": [\"full_attention\", \"full_attention\"],"
                          "\"torch_dtype\": \"bfloat16\", \"_name_or_path\": \"tiny\",");
    config_loads("llama with plain RoPE as an object", LLAMA_GQA, LLAMA_AT,
                 LLAMA_AT "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": "
                          "10000.0},");
    config_loads("headscope with bookkeeping keys", TINYLM_H4, "\"n_ctx\": 8,",
                 "\"n_ctx\": 8, \"architectures\": [\"X\"], \"torch_dtype\": \"float32\","
                 "\"dropout\": 0, \"attn_pdrop\": 0.0, \"use_cache\": true,");
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_untouched_copy_loads", test_untouched_copy_loads },
        { "test_file_shorter_than_length_field_is_rejected",
          test_file_shorter_than_length_field_is_rejected },
        { "test_header_length_beyond_file_is_rejected", test_header_length_beyond_file_is_rejected },
        { "test_truncated_data_is_rejected", test_truncated_data_is_rejected },
        { "test_header_not_json_is_rejected", test_header_not_json_is_rejected },
        { "test_unknown_dtype_names_tensor", test_unknown_dtype_names_tensor },
        { "test_unsupported_dtype_names_tensor", test_unsupported_dtype_names_tensor },
        { "test_wrong_shape_names_tensor", test_wrong_shape_names_tensor },
        { "test_overlapping_offsets_are_rejected", test_overlapping_offsets_are_rejected },
        { "test_offsets_out_of_range_are_rejected", test_offsets_out_of_range_are_rejected },
        { "test_missing_tensor_is_named", test_missing_tensor_is_named },
        { "test_malformed_config_is_rejected", test_malformed_config_is_rejected },
        { "test_config_missing_key_is_named", test_config_missing_key_is_named },
        { "test_unknown_model_type_is_rejected", test_unknown_model_type_is_rejected },
        { "test_heads_not_dividing_width_are_rejected", test_heads_not_dividing_width_are_rejected },
        { "test_missing_config_is_io_error", test_missing_config_is_io_error },
        { "test_missing_safetensors_is_io_error", test_missing_safetensors_is_io_error },
        { "test_llama_kv_heads_mismatch_names_k_proj", test_llama_kv_heads_mismatch_names_k_proj },
        { "test_headscope_zero_heads_are_refused_not_a_signal",
          test_headscope_zero_heads_are_refused_not_a_signal },
        { "test_llama_bad_kv_heads_name_the_key", test_llama_bad_kv_heads_name_the_key },
        { "test_zero_head_overrides_are_refused", test_zero_head_overrides_are_refused },
        { "test_huge_and_nonfinite_numbers_are_refused",
          test_huge_and_nonfinite_numbers_are_refused },
        { "test_sizes_beyond_the_file_are_refused_before_allocating",
          test_sizes_beyond_the_file_are_refused_before_allocating },
        { "test_non_regular_files_are_refused", test_non_regular_files_are_refused },
        { "test_repeated_keys_and_trailing_text_are_refused",
          test_repeated_keys_and_trailing_text_are_refused },
        { "test_overrides_commute", test_overrides_commute },
        { "test_derived_keys_follow_their_source", test_derived_keys_follow_their_source },
        { "test_unimplemented_keys_are_refused", test_unimplemented_keys_are_refused },
        { "test_bookkeeping_keys_are_accepted", test_bookkeeping_keys_are_accepted },
    };
    return hs_run_tests("checkpoint_errors_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
