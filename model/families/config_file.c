/* config.json for every family, and the rules a family's file format adds to
 * the network's (config.c): parsing is strict about types, ranges and keys: a
 * wrong field, or a key that would change the computation and is not
 * implemented, is an error naming the file and the key. Presets and
 * "key=value" overrides go through the same parser. */
#include "config_file.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "family.h"
#include "json.h"

/* ---- what a family's file can express ------------------------------------ */

int hs_config_check(const hs_model_config *c)
{
    int rc = hs_config_check_network(c);
    if (rc)
        return rc;
    if (c->mla && c->family != HS_FAMILY_HEADSCOPE)
        return hs_fail(HS_EINVAL, "config: attention \"mla\" is a headscope-family architecture");
    const hs_family_ops *f = hs_family_ops_of(c->family);
    if (c->n_head_windows && c->family != HS_FAMILY_HEADSCOPE && !f->layer_windows)
        return hs_fail(HS_EINVAL, "config: window: per-layer or per-head windows are a "
                                  "headscope-family feature (use a headscope preset)");
    const int s2s_family = c->family == HS_FAMILY_T5 || c->family == HS_FAMILY_BART ||
                           c->family == HS_FAMILY_MARIAN;
    if (s2s_family != hs_config_seq2seq(c) ||
        (!s2s_family && (c->act != HS_ACT_GELU || c->pos == HS_POS_SINUSOID)))
        return hs_fail(HS_EINVAL, "config: two stacks, ReLU or SiLU MLPs and sinusoidal "
                                  "positions are the encoder-decoder families' (t5, bart, "
                                  "marian), and those have two stacks");
    /* The Hugging Face families' checkpoints are written in their layout,
     * which can express only that family's architecture. */
    /* (an encoder's layers are post-norm, its decoder has a bias: BERT's;
     * a headless encoder has neither the decoder nor the head's norm) */
    /* (an encoder-decoder's two stacks may differ: its fits() judges them) */
    const int s2s = hs_config_seq2seq(c);
    int uniform = s2s || ((c->encoder || (!c->post_norm && !c->lm_head_bias)) &&
                          (c->final_norm || c->headless));
    for (int l = 1; l < c->n_layer; l++) {
        const int first = s2s && l >= c->enc_layers ? c->enc_layers : 0; /* its stack's */
        uniform &= c->n_head[l] == c->n_head[first] && c->n_kv_head[l] == c->n_kv_head[first];
    }
    if (c->family != HS_FAMILY_HEADSCOPE && !(uniform && f->fits(c)))
        return hs_fail(HS_EINVAL, "config: this architecture is not %s's (use a headscope "
                                  "preset for other variants)", f->title);
    return HS_OK;
}

/* ---- keys the parsers do not read ---------------------------------------
 *
 * A key that changes the computation and that we do not implement is an
 * error, never ignored (SPEC §10). Hugging Face configs carry many keys that
 * do not (token ids, torch_dtype, use_cache, generation defaults, label
 * maps, ...), and new ones with each transformers release, so for those
 * families a key the parser does not read is accepted unless the table below
 * or the family's own rules name it as computation-changing with a value
 * other than the one we implement. headscope is our own format: a key it
 * does not read is refused unless it is bookkeeping. */

#define SLIDING_ELSEWHERE "sliding-window attention, which this family does not have (mistral, gemma2, " \
                          "gemma3_text and phi3 do)"
/* Every Hugging Face family's; a key the family's parser reads (mistral's
 * sliding_window, the llama family's rope_scaling) never reaches this table. */
static const hs_key_rule HF_RULES[] = {
    { "sliding_window", HS_ALLOW_NULL, SLIDING_ELSEWHERE },
    { "use_sliding_window", HS_ALLOW_FALSE, SLIDING_ELSEWHERE },
    { "layer_types", HS_ALLOW_FULL, "per-layer attention types" },
    { "partial_rotary_factor", HS_ALLOW_ONE, "rotary embeddings on part of a head" },
    { "quantization_config", HS_ALLOW_NULL, "quantized weights" },
    { "pruned_heads", HS_ALLOW_EMPTY, "heads pruned at load time" },
    { "add_cross_attention", HS_ALLOW_FALSE, "cross-attention" },
    { "is_encoder_decoder", HS_ALLOW_FALSE, "an encoder-decoder model" },
    { "attn_logit_softcapping", HS_ALLOW_NULL, "attention logit soft-capping" },
    { "final_logit_softcapping", HS_ALLOW_NULL, "final logit soft-capping" },
    { "use_mrope", HS_ALLOW_FALSE, "multimodal rotary positions" },
    { "qk_layernorm", HS_ALLOW_FALSE, "norms on queries and keys" },
    { "use_qk_norm", HS_ALLOW_FALSE, "norms on queries and keys" },
};
#undef SLIDING_ELSEWHERE

/* Keys of any family that never change the computation. */
static const char *const bookkeeping[] = {
    "model_type", "architectures", "_name_or_path", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
};

/* Keys of Hugging Face configs that do not change what the causal LM
 * computes: PretrainedConfig's generation defaults, label maps and output
 * switches, other heads' settings (GPT-2's summary_*), precision or
 * parallelism switches with the same result (pretraining_tp,
 * reorder_and_upcast_attn), context lengths that rotary families do not
 * use, generation's cache type (cache_implementation) and the remote-code
 * class map (auto_map: the classes implemented here are transformers'
 * own). Anything else a family's parser does not read is refused: it may
 * change the computation. */
static const char *const hf_bookkeeping[] = {
    "sep_token_id", "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id",
    "n_ctx", "max_position_embeddings", "pretraining_tp", "reorder_and_upcast_attn",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "task_specific_params", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "is_decoder", "chunk_size_feed_forward",
    "tie_encoder_decoder", "cross_attention_hidden_size", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "finetuning_task", "id2label", "label2id", "num_labels",
    "tokenizer_class", "prefix", "problem_type", "_commit_hash", "_attn_implementation",
    "_attn_implementation_autoset", "initializer_range", "tie_word_embeddings", "_num_labels",
    "output_past", "gradient_checkpointing", "cache_implementation", "auto_map",
};

static int value_allowed(const cJSON *v, hs_allowed ok)
{
    const cJSON *e;
    switch (ok) {
    case HS_ALLOW_NULL:
        return cJSON_IsNull(v);
    case HS_ALLOW_FALSE:
        return cJSON_IsFalse(v);
    case HS_ALLOW_TRUE:
        return cJSON_IsTrue(v);
    case HS_ALLOW_ONE:
        return cJSON_IsNumber(v) && v->valuedouble == 1;
    case HS_ALLOW_EMPTY:
        return cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
    case HS_ALLOW_FULL:
        if (!cJSON_IsArray(v))
            return cJSON_IsNull(v);
        cJSON_ArrayForEach(e, v)
        {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
                return 0;
        }
        return 1;
    }
    return 0;
}

static const char *allowed_name(hs_allowed ok)
{
    static const char *const names[] = { "null", "false", "true", "1", "null, {} or []",
                                         "\"full_attention\" layers" };
    return names[ok];
}

/* Dropout probabilities (attn_pdrop, attention_dropout, ...): Hugging Face
 * applies them only in training, so loading and analysis are unchanged;
 * headscope trains without dropout. */
static int is_dropout(const char *key)
{
    size_t n = strlen(key);
    return (n >= 7 && !strcmp(key + n - 7, "dropout")) || (n >= 6 && !strcmp(key + n - 6, "_pdrop"));
}

/* The rule of rules[0..n) for key v: 1 when one names it (*rc: its
 * refusal, or HS_OK when the value is the one implemented). */
static int apply_rule(const hs_cfg_reader *r, const hs_key_rule *rules, int n, const cJSON *v,
                      int *rc)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v->string, rules[i].key)) {
            *rc = value_allowed(v, rules[i].ok)
                      ? HS_OK
                      : hs_fail(HS_EFORMAT, "%s: \"%s\": %s: not implemented (only %s is "
                                "accepted)", r->path, v->string, rules[i].what,
                                allowed_name(rules[i].ok));
            return 1;
        }
    return 0;
}

static int check_other_keys(const hs_cfg_reader *r, const hs_family_ops *f)
{
    const int hf = f->id != HS_FAMILY_HEADSCOPE;
    const cJSON *v;
    cJSON_ArrayForEach(v, r->root)
    {
        const char *k = v->string;
        int known = hs_cfg_was_read(r, k), rc = HS_OK;
        for (size_t i = 0; !known && i < sizeof bookkeeping / sizeof bookkeeping[0]; i++)
            known = !strcmp(k, bookkeeping[i]);
        const size_t n_hf = hf ? sizeof hf_bookkeeping / sizeof hf_bookkeeping[0] : 0;
        for (size_t i = 0; !known && i < n_hf; i++)
            known = !strcmp(k, hf_bookkeeping[i]);
        if (!known)
            known = apply_rule(r, f->rules, f->nrules, v, &rc) ||
                    (hf && apply_rule(r, HF_RULES, sizeof HF_RULES / sizeof HF_RULES[0], v, &rc));
        if (rc)
            return rc;
        if (!known && is_dropout(k)) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1)
                return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a probability", r->path, k);
            if (!hf && v->valuedouble != 0)
                return hs_fail(HS_EFORMAT,
                               "%s: \"%s\": dropout is not implemented (only 0 is accepted)",
                               r->path, k);
            known = 1;
        }
        if (!known)
            return hs_fail(HS_EFORMAT,
                           "%s: unknown key \"%s\" (not a %s config.json key headscope knows; "
                           "keys that would change the computation are refused until "
                           "implemented)",
                           r->path, k, f->model_type);
    }
    return HS_OK;
}

static int classifies(hs_family f)
{
    static const hs_family ok[] = { HS_FAMILY_BERT,    HS_FAMILY_ROBERTA, HS_FAMILY_GPT2,
                                    HS_FAMILY_LLAMA,   HS_FAMILY_MISTRAL, HS_FAMILY_QWEN2,
                                    HS_FAMILY_QWEN3,   HS_FAMILY_GEMMA,   HS_FAMILY_GEMMA2 };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (ok[i] == f)
            return 1;
    return 0;
}

int hs_config_classifies(const hs_model_config *c)
{
    return classifies(c->family);
}

/* A sequence classifier's keys (HF PretrainedConfig): id2label ({"0":
 * name, ...}, its keys 0 .. K-1), num_labels (= len(id2label); default 2),
 * problem_type, and a decoder's pad_token_id (the pooled token is the last
 * that is not padding). */
static int read_classifier(hs_model_config *c, hs_cfg_reader *r)
{
    const cJSON *names = hs_cfg_lookup(r, "id2label"), *e;
    int n = cJSON_IsObject(names) ? cJSON_GetArraySize(names) : 0, given = 0, rc;
    if (names && !cJSON_IsNull(names) && !cJSON_IsObject(names))
        return hs_fail(HS_EFORMAT, "%s: \"id2label\" must map label ids to names", r->path);
    if ((rc = hs_cfg_int(r, "num_labels", HS_CFG_NULL_DEFAULT, n ? n : 2, &given)))
        return rc;
    if (n && given != n)
        return hs_fail(HS_EFORMAT, "%s: \"num_labels\" %d, but \"id2label\" names %d labels",
                       r->path, given, n);
    if (given < 1 || given > HS_MAX_LABELS)
        return hs_fail(HS_EFORMAT, "%s: \"num_labels\" %d: 1 to %d labels", r->path, given,
                       HS_MAX_LABELS);
    c->n_labels = given;
    cJSON_ArrayForEach(e, names)
    {
        char *end;
        const long id = strtol(e->string, &end, 10);
        if (*end || end == e->string || id < 0 || id >= n || !cJSON_IsString(e) ||
            strlen(e->valuestring) >= HS_LABEL_CHARS || c->label_names[id][0])
            return hs_fail(HS_EFORMAT, "%s: \"id2label\"[\"%.32s\"]: the keys must be 0 .. %d, "
                                       "each once, the names strings of at most %d bytes",
                           r->path, e->string, n - 1, HS_LABEL_CHARS - 1);
        snprintf(c->label_names[id], HS_LABEL_CHARS, "%s", e->valuestring);
    }
    static const char *const problems[] = { "single_label_classification",
                                            "multi_label_classification", "regression" };
    const cJSON *p = hs_cfg_lookup(r, "problem_type");
    for (int i = 0; cJSON_IsString(p) && i < 3; i++)
        if (!strcmp(p->valuestring, problems[i]))
            c->problem = HS_PROBLEM_SINGLE + i;
    if (p && !cJSON_IsNull(p) && !c->problem)
        return hs_fail(HS_EFORMAT, "%s: \"problem_type\" must be single_label_classification, "
                                   "multi_label_classification or regression", r->path);
    if (c->problem == HS_PROBLEM_REGRESSION && c->n_labels != 1)
        return hs_fail(HS_EFORMAT, "%s: \"problem_type\" regression has one label, not %d",
                       r->path, c->n_labels);
    if (!c->encoder && (rc = hs_cfg_token_id(r, "pad_token_id", -1, &c->pad_id)))
        return rc;
    c->headless = 1;
    c->lm_head_bias = 0;
    if (c->encoder)
        c->mlm_transform = c->final_norm = 0;
    return HS_OK;
}

/* config.json's architectures[0] (SPEC §16): the head. The language-model
 * heads are the families' own; BertModel and RobertaModel are the encoder
 * alone (headless); …ForSequenceClassification a classifier; any other task
 * head is refused naming it. */
static int read_head(hs_model_config *c, hs_cfg_reader *r)
{
    const cJSON *a = hs_cfg_lookup(r, "architectures");
    const cJSON *first = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
    if (!a || cJSON_IsNull(a) || (cJSON_IsArray(a) && !first))
        return HS_OK;
    if (!cJSON_IsString(first))
        return hs_fail(HS_EFORMAT, "%s: \"architectures\" must be a list of class names",
                       r->path);
    const char *name = first->valuestring;
    if (c->encoder && (!strcmp(name, "BertModel") || !strcmp(name, "RobertaModel"))) {
        hs_config_make_headless(c);
        return HS_OK;
    }
    if (strstr(name, "ForSequenceClassification") && hs_config_classifies(c))
        return read_classifier(c, r);
    static const char *const tasks[] = { "ForSequenceClassification", "ForTokenClassification",
                                         "ForQuestionAnswering", "ForMultipleChoice",
                                         "ForNextSentencePrediction" };
    for (size_t i = 0; i < sizeof tasks / sizeof *tasks; i++)
        if (strstr(name, tasks[i]))
            return hs_fail(HS_EFORMAT, "%s: \"architectures\": %.64s: this task head is not "
                                       "implemented (the language-model heads, the encoders "
                                       "alone and SPEC §16's sequence classifiers are)",
                           r->path, name);
    return HS_OK;
}

int hs_config_parse(hs_model_config *c, const char *json, const char *path)
{
    memset(c, 0, sizeof *c);
    hs_config_no_specials(c);
    cJSON *root;
    int rc = hs_json_parse(&root, json, strlen(json), path);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hs_fail(HS_EFORMAT, "%s: not a JSON object", path);
    }
    hs_cfg_reader r = { .root = root, .path = path };
    const cJSON *type = hs_cfg_lookup(&r, "model_type");
    const hs_family_ops *f = cJSON_IsString(type) ? hs_family_by_type(type->valuestring) : NULL;
    if (!cJSON_IsString(type))
        rc = hs_fail(HS_EFORMAT, "%s: missing \"model_type\" (%s)", path, hs_family_types());
    else if (!f)
        rc = hs_fail(HS_EFORMAT, "%s: model_type \"%s\" is not %s", path, type->valuestring,
                     hs_family_types());
    else
        c->family = f->id, rc = f->parse(c, &r);
    if (!rc)
        rc = read_head(c, &r);
    if (!rc)
        rc = check_other_keys(&r, f);
    cJSON_Delete(root);
    if (!rc && hs_config_check(c))
        rc = hs_fail(HS_EFORMAT, "%s: %s", path, hs_last_error());
    return rc;
}

/* A classifier's keys as HF writes them, its architectures the family's
 * …ForSequenceClassification. */
static void write_classifier(cJSON *o, const hs_model_config *c)
{
    static const struct {
        hs_family f;
        const char *prefix;
    } names[] = { { HS_FAMILY_BERT, "Bert" },       { HS_FAMILY_ROBERTA, "Roberta" },
                  { HS_FAMILY_GPT2, "GPT2" },       { HS_FAMILY_LLAMA, "Llama" },
                  { HS_FAMILY_MISTRAL, "Mistral" }, { HS_FAMILY_QWEN2, "Qwen2" },
                  { HS_FAMILY_QWEN3, "Qwen3" },     { HS_FAMILY_GEMMA, "Gemma" },
                  { HS_FAMILY_GEMMA2, "Gemma2" } };
    char arch[64] = "";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].f == c->family)
            snprintf(arch, sizeof arch, "%sForSequenceClassification", names[i].prefix);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "architectures");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"), cJSON_CreateString(arch));
    cJSON *id2label = cJSON_AddObjectToObject(o, "id2label");
    for (int k = 0; k < c->n_labels; k++) {
        char key[16], dflt[32];
        snprintf(key, sizeof key, "%d", k);
        snprintf(dflt, sizeof dflt, "LABEL_%d", k);
        cJSON_AddStringToObject(id2label, key, c->label_names[k][0] ? c->label_names[k] : dflt);
    }
    static const char *const problems[] = { NULL, "single_label_classification",
                                            "multi_label_classification", "regression" };
    if (c->problem)
        cJSON_AddStringToObject(o, "problem_type", problems[c->problem]);
    if (!c->encoder && c->pad_id >= 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "pad_token_id");
        cJSON_AddNumberToObject(o, "pad_token_id", c->pad_id);
    }
}

char *hs_config_to_json(const hs_model_config *c)
{
    const hs_family_ops *f = hs_family_ops_of(c->family);
    cJSON *o = f ? cJSON_CreateObject() : NULL;
    if (!o) {
        hs_fail(f ? HS_ENOMEM : HS_EINVAL, "config: cannot build JSON");
        return NULL;
    }
    cJSON_AddStringToObject(o, "model_type", f->model_type);
    f->write(o, c);
    if (c->n_labels)
        write_classifier(o, c);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        hs_fail(HS_ENOMEM, "config: cannot print JSON");
    return text;
}

/* ---- presets and overrides ---------------------------------------------- */

int hs_config_preset(hs_model_config *c, const char *name)
{
    memset(c, 0, sizeof *c);
    hs_config_no_specials(c);
    c->vocab_size = 256; /* byte-level data from `headscope tokens` */
    c->n_layer = 2;
    c->d_model = 64;
    c->n_ctx = 256;
    c->norm_eps = 1e-5;
    c->init_std = 0.02;
    c->rope_theta = 10000.0;
    c->final_norm = 1;
    c->norm_bias = 1;
    c->tie_embeddings = 1;
    int H = 4, G = 4;
    const hs_preset *p = NULL;
    char names[512] = "";
    for (int f = 0; f < HS_FAMILY_COUNT; f++) {
        const hs_family_ops *o = hs_family_ops_of((hs_family)((f + 1) % HS_FAMILY_COUNT));
        for (int i = 0; i < o->npresets; i++) {
            if (!strcmp(o->presets[i].name, name))
                p = &o->presets[i], c->family = o->id;
            const size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", o->presets[i].name);
        }
    }
    if (!p)
        return hs_fail(HS_EINVAL, "unknown preset \"%s\" (%s)", name, names);
    p->apply(c, &H, &G);
    for (int l = 0; l < HS_MAX_LAYERS; l++)
        c->n_head[l] = H, c->n_kv_head[l] = G;
    c->head_dim = c->mla ? c->v_head_dim : c->d_model / H;
    return HS_OK;
}

int hs_config_override(hs_model_config *c, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return hs_fail(HS_EINVAL, "override \"%s\" is not KEY=VALUE", kv);
    /* Re-parse the configuration as headscope JSON with the one key replaced:
     * the override obeys exactly the config.json rules. */
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    hs_family family = c->family;
    hs_model_config tmp = *c;
    tmp.family = HS_FAMILY_HEADSCOPE;
    char *json = hs_config_to_json(&tmp);
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!o)
        return hs_fail(HS_ENOMEM, "override: cannot build JSON");
    /* optional keys written only when set */
    if (!cJSON_GetObjectItemCaseSensitive(o, key))
        hs_headscope_add_default(o, key);
    if (!cJSON_GetObjectItemCaseSensitive(o, key)) {
        cJSON_Delete(o);
        return hs_fail(HS_EINVAL, "override: unknown key \"%s\"", key);
    }
    /* A JSON value (4, true, [4,2]) or else a bare word such as gelu; "4x"
     * is neither, and the config parser then rejects the string. */
    cJSON *val = cJSON_ParseWithOpts(eq + 1, NULL, 1);
    if (!val)
        val = cJSON_CreateString(eq + 1);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, val);
    /* Derived keys follow their source unless an override gave them: then the
     * order of the overrides does not matter. */
    static const struct { const char *key; unsigned bit; } given[] = {
        { "n_kv_head", HS_GIVEN_N_KV_HEAD }, { "head_dim", HS_GIVEN_HEAD_DIM },
        { "d_ff", HS_GIVEN_D_FF } };
    unsigned now_given = c->given;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (!strcmp(key, given[i].key))
            now_given |= given[i].bit;
    const int n_head = !strcmp(key, "n_head"), d_model = !strcmp(key, "d_model");
    if ((n_head || d_model) && !(now_given & HS_GIVEN_HEAD_DIM))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "head_dim");
    if (n_head && !(now_given & HS_GIVEN_N_KV_HEAD))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "n_kv_head");
    const int derive_d_ff = d_model && family == HS_FAMILY_GPT2 && !(now_given & HS_GIVEN_D_FF);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    hs_model_config out;
    int rc = text ? hs_config_parse(&out, text, "override") : HS_ENOMEM;
    free(text);
    if (rc)
        return hs_fail(HS_EINVAL, "override %s: %s", kv,
                       strncmp(hs_last_error(), "override: ", 10) ? hs_last_error()
                                                                  : hs_last_error() + 10);
    out.family = family;
    out.given = now_given;
    if (derive_d_ff && out.d_model <= INT_MAX / 4) /* GPT-2's n_inner null: 4 n_embd */
        out.d_ff = 4 * out.d_model;
    *c = out;
    return HS_OK;
}

int hs_config_build(hs_model_config *c, const char *preset, const char *const *overrides,
                    int n)
{
    int rc = hs_config_preset(c, preset);
    for (int i = 0; !rc && i < n; i++)
        rc = hs_config_override(c, overrides[i]);
    return rc;
}
