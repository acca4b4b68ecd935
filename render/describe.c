/* Text and JSON descriptions of a checkpoint (`info`) and of a map file
 * (`maps`). */
#include "describe.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "inputs.h"
#include "jsonout.h"
#include "labels.h"
#include "seq2seq.h"
#include "trainer.h"
#include "transformer.h"

static const char *const POS_NAMES[] = { "learned", "rope", "none", "sinusoid" };
static const char *const NORM_NAMES[] = { "layernorm", "rmsnorm" };
static const char *const MLP_NAMES[] = { "none", "gelu", "swiglu", "geglu" };
static const char *const ACT_NAMES[] = { "gelu", "relu", "silu" };

/* ---- info ----------------------------------------------------------------- */

/* The heads whose W_o columns are all zero (pruned with `prune --out`):
 * JSON `,"dead_heads":[[l,h],...]`, or a line "dead heads ..." of text. */
static void print_dead_heads(FILE *f, const hs_model_config *c, const unsigned char *dead, int n,
                             int json)
{
    fprintf(f, json ? ",\"dead_heads\":[" : n ? "dead heads   " : "dead heads   none\n");
    for (int l = 0, k = 0; l < c->n_layer && n; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (dead[(size_t)l * HS_MAX_HEADS + h])
                fprintf(f, json ? "%s[%d,%d]" : "%sL%dH%d", k++ ? (json ? "," : " ") : "", l, h);
    if (json)
        fprintf(f, "]");
    else if (n)
        fprintf(f, "  (%d of them: W_o columns all zero, their output never reaches the "
               "residual)\n", n);
}

/* headscope's per-layer or per-head windows as JSON: [0,32] per layer
 * where each layer's heads agree, else [[0,32],[32,0]] (0 = global). */
static void print_windows(FILE *f, const hs_model_config *c)
{
    fputc('[', f);
    for (int l = 0; l < c->n_layer; l++) {
        const int W = hs_config_layer_window(c, l);
        fprintf(f, l ? "," : "");
        if (W >= 0) {
            fprintf(f, "%d", W);
            continue;
        }
        for (int h = 0; h < c->n_head[l]; h++)
            fprintf(f, "%s%d", h ? "," : "[", hs_config_head_window(c, l, h));
        fputc(']', f);
    }
    fputc(']', f);
}

/* The family's particulars: sliding window, rotary dims and scaling, the
 * residual's shape and the q/k/v biases. */
static void print_particulars(FILE *f, const hs_model_config *c, int json)
{
    static const char *const SCALING[] = { "none", "linear", "llama3" };
    const int rotary = c->pos != HS_POS_ROPE ? 0
                       : c->mla          ? c->qk_rope_head_dim
                       : c->rotary_dims  ? c->rotary_dims
                                         : c->head_dim;
    if (c->mla && json)
        fprintf(f, ",\"attention\":\"mla\",\"kv_lora_rank\":%d,\"q_lora_rank\":%d,"
               "\"qk_nope_head_dim\":%d,\"qk_rope_head_dim\":%d,\"v_head_dim\":%d",
               c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim,
               c->v_head_dim);
    if (json) {
        fprintf(f, ",\"window\":%d,\"rotary_dims\":%d,\"rope_scaling\":\"%s\","
               "\"parallel_residual\":%s,\"qkv_bias\":%s",
               c->window, rotary, SCALING[c->rope_scaling.kind],
               c->parallel_residual ? "true" : "false",
               c->qkv_bias || c->attn_bias ? "true" : "false");
        if (c->n_head_windows || c->window_pattern)
            fprintf(f, ",\"windows\":"), print_windows(f, c);
        static const char *const QK[] = { "none", "head", "proj" };
        fprintf(f, ",\"qk_norm\":\"%s\",\"norm_offset\":%s,\"output_norm\":%s,"
                "\"embed_scale\":%s,\"attn_softcap\":", QK[c->qk_norm],
                c->norm_offset ? "true" : "false", c->out_norm ? "true" : "false",
                c->embed_scale ? "true" : "false");
        hs_json_number(f, c->attn_softcap, 9);
        fprintf(f, ",\"final_softcap\":");
        hs_json_number(f, c->final_softcap, 9);
        fprintf(f, ",\"query_pre_attn_scalar\":"), hs_json_number(f, c->attn_scalar, 9);
        fprintf(f, ",\"rope_local_theta\":"), hs_json_number(f, c->rope_local_theta, 9);
        if (c->encoder)
            fprintf(f, ",\"encoder\":true,\"type_vocab_size\":%d,\"position_offset\":%d,"
                    "\"pad_token_id\":%d,\"cls_token_id\":%d,\"sep_token_id\":%d,"
                    "\"mask_token_id\":%d,\"headless\":%s", c->type_vocab, c->pos_offset,
                    c->pad_id, c->cls_id, c->sep_id, c->mask_id, c->headless ? "true" : "false");
        if (hs_config_seq2seq(c))
            fprintf(f, ",\"encoder_layers\":%d,\"decoder_layers\":%d,\"activation\":\"%s\","
                    "\"relative_attention_num_buckets\":%d,\"relative_attention_max_distance\":%d,"
                    "\"decoder_start_token_id\":%d,\"eos_token_id\":%d,\"pad_token_id\":%d",
                    c->enc_layers, c->n_layer - c->enc_layers, ACT_NAMES[c->act],
                    c->rel_buckets, c->rel_max_distance, c->dec_start_id, c->eos_id, c->pad_id);
        return;
    }
    if (c->mla) {
        fprintf(f, "attention    multi-head latent (mla): kv_lora_rank %d, q_lora_rank %d%s, "
               "qk_nope_head_dim %d, qk_rope_head_dim %d (theta %g), v_head_dim %d\n",
               c->kv_lora_rank, c->q_lora_rank, c->q_lora_rank ? "" : " (q_proj)",
               c->qk_nope_head_dim, rotary, c->rope_theta, c->v_head_dim);
    } else {
        const int layered = c->n_head_windows || c->window_pattern;
        fprintf(f, "attention    %s", layered      ? "windows per layer "
                                  : c->window ? "sliding window "
                                  : c->encoder ? "bidirectional (an encoder), padding: id "
                                              : "global");
        if (c->encoder)
            fprintf(f, "%d", c->pad_id);
        if (layered)
            print_windows(f, c);
        else if (c->window)
            fprintf(f, "%d", c->window);
        if (rotary)
            fprintf(f, ", rotary on %d of %d dims (theta %g, scaling %s)", rotary, c->head_dim,
                   c->rope_theta, SCALING[c->rope_scaling.kind]);
        if (rotary && c->rope_local_theta > 0)
            fprintf(f, ", sliding layers' theta %g", c->rope_local_theta);
        if (c->attn_scalar > 0)
            fprintf(f, ", scores x %g^-1/2", c->attn_scalar);
        fprintf(f, ", q/k/v bias %s\n", c->qkv_bias || c->attn_bias ? "yes" : "no");
    }
    fprintf(f, "residual     %s%s\n", c->parallel_residual ? "parallel (x + attn(ln1 x) + mlp(ln2 x))"
                                                         : "sequential",
           c->gelu_exact ? ", exact GELU" : "");
    const char *feature[] = { c->qk_norm == HS_QK_NORM_HEAD ? "q/k norm per head"
                              : c->qk_norm                  ? "q/k norm over the projection"
                                                            : NULL,
                              c->norm_offset ? "norms (1 + w)" : NULL,
                              c->out_norm ? "sublayer outputs normed" : NULL,
                              c->embed_scale ? "embeddings x sqrt(d)" : NULL,
                              c->attn_softcap > 0 ? "attention soft-cap" : NULL,
                              c->final_softcap > 0 ? "final soft-cap" : NULL,
                              c->encoder && !c->headless
                                  ? "token types, embedding norm, MLM head, masked-LM loss"
                                  : NULL,
                              c->headless ? "token types, embedding norm, the encoder alone (no "
                                            "masked-LM head: no logits)"
                                          : NULL,
                              c->pos_offset ? "positions from pad_token_id + 1 (RoBERTa)" : NULL,
                              c->act == HS_ACT_RELU   ? "ReLU MLP"
                              : c->act == HS_ACT_SILU ? "SiLU MLP"
                                                      : NULL,
                              c->rel_buckets ? "relative position buckets (T5)" : NULL,
                              c->pos_shift ? "positions from row 2 (BART)" : NULL };
    if (hs_config_seq2seq(c))
        fprintf(f, "stacks       encoder of %d layers, then a decoder of %d with cross-attention "
                "(layers %d..%d); decoder start %d, eos %d, pad %d\n", c->enc_layers,
                c->n_layer - c->enc_layers, c->enc_layers, c->n_layer - 1, c->dec_start_id,
                c->eos_id, c->pad_id);
    for (size_t i = 0, k = 0; i < sizeof feature / sizeof feature[0]; i++)
        if (feature[i])
            fprintf(f, "%s%s", k++ ? ", " : "features     ", feature[i]);
    for (size_t i = 0; i < sizeof feature / sizeof feature[0]; i++)
        if (feature[i]) {
            fputc('\n', f);
            break;
        }
}

/* Where a block's norms sit: before the sublayers (pre), after the residual
 * sum (post: x = LN(x + f(x))), or only on the sublayers' outputs (OLMo-2:
 * x + LN(f(x)), no input norm). */
#define NORM_POSITION(c) ((c)->post_norm ? "post" : (c)->no_input_norm ? "output" : "pre")

/* What `info` knows of a checkpoint beside m: its dead heads, the bytes its
 * files store, and the batch and sequence length of a memory plan (B 0:
 * none asked for). */
typedef struct {
    const unsigned char *dead; /* hs_dead_heads' layout */
    int n_dead;
    hs_checkpoint_bytes bytes;
    int B, T;
} hs_model_facts;

/* The memory plan of `info --batch B --seq-len T`: the parameters as
 * loaded (hs_checkpoint_load_stored: the matrices as stored; the files'
 * bytes beside them) and the
 * activations each kind of command allocates (hs_acts_bytes): what it holds
 * at once, as hs_mem_reserve counts it (its resident peak can be lower,
 * where buffers stay untouched, plus the program's own): eval's forward
 * for the losses alone (HS_ACTS_LOSS), a forward (ablate, patch, dla,
 * logit-lens, generate),
 * one with maps (capture, scores, patterns), a backward (importance, atp,
 * circuit: atp and circuit also hold a forward's activations), training
 * (gradients and AdamW's two moments beside the parameters). */
_Static_assert(HS_LOSS_ROWS == 256, "the plan's eval line names HS_LOSS_ROWS");

static void print_memory_plan(FILE *f, const hs_model *m, const hs_model_facts *x, int json)
{
    const hs_model_config *c = &m->cfg;
    const size_t P = x->bytes.loaded;
    if (hs_config_seq2seq(c)) { /* seq2seq.h's activations have no size table yet */
        if (json)
            fprintf(f, ",\"memory_plan\":null");
        else
            fprintf(f, "memory plan  not computed for an encoder-decoder (parameters %zu bytes as "
                       "loaded; eval --pairs adds one batch's activations and logits)\n", P);
        return;
    }
    const size_t loss = hs_acts_bytes(c, x->B, x->T, HS_ACTS_LOSS),
                 fwd = hs_acts_bytes(c, x->B, x->T, HS_ACTS_INFER),
                 maps = hs_acts_bytes(c, x->B, x->T, HS_ACTS_MAPS),
                 train = hs_acts_bytes(c, x->B, x->T, HS_ACTS_TRAIN);
    static const char *const kind[] = { "eval", "forward", "maps", "backward", "train" };
    static const char *const who[] = {
        "eval: two layers' activations in turn, the logits 256 rows at a time",
        "ablate, patch, path-patch, dla, logit-lens, generate",
        "capture, scores, patterns",
        "importance; atp and circuit hold a forward's activations more",
        "train: gradients and AdamW's two moments beside the parameters",
    };
    /* training keeps a float master copy */
    const size_t master = m->n_params * sizeof(hs_real);
    const size_t acts[] = { loss, fwd, maps, train, hs_trainer_bytes(c, m->n_params, x->B, x->T) };
    size_t need[5];
    int over[5]; /* the activations' size (0) or their sum with the parameters overflows */
    for (int k = 0; k < 5; k++)
        over[k] = !acts[k] || __builtin_add_overflow(k < 4 ? P : master, acts[k], &need[k]);
    if (json) {
        fprintf(f, ",\"memory_plan\":{\"batch\":%d,\"seq_len\":%d,\"stored_bytes\":%zu,"
                "\"parameter_bytes\":%zu,\"packed_bytes\":%zu", x->B, x->T, x->bytes.stored, P,
                x->bytes.packed);
        for (int k = 0; k < 5; k++)
            over[k] ? fprintf(f, ",\"%s\":\"overflows\"", kind[k])
                    : fprintf(f, ",\"%s\":%zu", kind[k], need[k]);
        fprintf(f, "}");
        return;
    }
    fprintf(f, "memory plan  batch %d, seq-len %d: what each kind of command allocates, in "
            "bytes\n  parameters %zu as loaded (matrices as the files store them, the rest "
            "in %zu-byte values; the files store %zu)\n", x->B, x->T, P, sizeof(hs_real),
            x->bytes.stored);
    for (int k = 0; k < 5; k++)
        over[k] ? fprintf(f, "  %-10s overflows  (%s)\n", kind[k], who[k])
                : fprintf(f, "  %-10s %zu  (%s)\n", kind[k], need[k], who[k]);
    if (x->bytes.packed)
        fprintf(f, "  %-10s %zu  (the matrices' panels: what commands of many forwards add, "
                "where it fits)\n", "+ packed", x->bytes.packed);
}

static void describe_model(FILE *f, const hs_model *m, const hs_model_facts *x, const char *path,
                           int json)
{
    const hs_model_config *c = &m->cfg;
    /* KV cache per token: keys and values of every layer's G heads; MLA:
     * the latent and the shared rope key of every layer. */
    long kv_elems = 0;
    for (int l = 0; l < c->n_layer; l++)
        kv_elems += c->mla ? (long)c->kv_lora_rank + c->qk_rope_head_dim
                           : 2L * c->n_kv_head[l] * c->head_dim;
    if (json) {
        fprintf(f, "{\"model\":");
        hs_json_string(f, path);
        fprintf(f, ",\"model_type\":\"%s\",\"parameters\":%zu,\"n_layer\":%d,"
               "\"d_model\":%d,\"head_dim\":%d,\"vocab_size\":%d,\"n_ctx\":%d,\"positional\":\"%s\","
               "\"norm\":\"%s\",\"norm_position\":\"%s\",\"mlp\":\"%s\",\"d_ff\":%d,\"n_head\":[",
               hs_family_name(c->family), m->n_params, c->n_layer, c->d_model, c->head_dim,
               c->vocab_size, c->n_ctx, POS_NAMES[c->pos], NORM_NAMES[c->norm],
               NORM_POSITION(c), MLP_NAMES[c->mlp], c->d_ff);
        for (int l = 0; l < c->n_layer; l++)
            fprintf(f, "%s%d", l ? "," : "", c->n_head[l]);
        fprintf(f, "],\"n_kv_head\":[");
        for (int l = 0; l < c->n_layer; l++)
            fprintf(f, "%s%d", l ? "," : "", c->n_kv_head[l]);
        fprintf(f, "],\"kv_cache_bytes_per_token_f32\":%ld,\"kv_cache_bytes_per_token_f16\":%ld",
               kv_elems * 4, kv_elems * 2);
        print_particulars(f, c, 1);
        print_dead_heads(f, c, x->dead, x->n_dead, 1);
        if (x->B)
            print_memory_plan(f, m, x, 1);
        fprintf(f, "}\n");
    } else {
        fprintf(f, "model        %s (%s)\n", path, hs_family_name(c->family));
        fprintf(f, "parameters   %zu\n", m->n_params);
        fprintf(f, "layers       %d, d_model %d, head_dim %d, d_ff %d\n", c->n_layer, c->d_model,
               c->head_dim, c->d_ff);
        fprintf(f, "vocab        %d, context %d, positions %s\n", c->vocab_size, c->n_ctx,
               POS_NAMES[c->pos]);
        fprintf(f, "norm         %s (%s), mlp %s\n", NORM_NAMES[c->norm], NORM_POSITION(c),
                MLP_NAMES[c->mlp]);
        fprintf(f, "heads        ");
        for (int l = 0; l < c->n_layer; l++)
            fprintf(f, "%s%d/%d", l ? " " : "", c->n_head[l], c->n_kv_head[l]);
        fprintf(f, "  (query/kv per layer)\n");
        print_particulars(f, c, 0);
        print_dead_heads(f, c, x->dead, x->n_dead, 0);
        fprintf(f, "kv cache     %ld bytes per token (float32), %ld (16-bit)\n", kv_elems * 4,
               kv_elems * 2);
        if (x->B)
            print_memory_plan(f, m, x, 0);
    }
}

int hs_describe_checkpoint(FILE *f, const char *dir, int B, int T, int json)
{
    hs_model m;
    unsigned char *dead = hs_calloc((size_t)HS_MAX_LAYERS * HS_MAX_HEADS, 1, "dead heads");
    hs_model_facts x = { .dead = dead };
    int rc = dead ? hs_checkpoint_probe(&m, dir, dead, &x.n_dead, &x.bytes) : HS_ENOMEM;
    if (!rc && B > 0) {
        x.B = B;
        x.T = hs_seq_len_or_default(&m.cfg, T);
        rc = hs_seq_len_check(&m.cfg, x.T, "--seq-len");
    }
    if (!rc)
        describe_model(f, &m, &x, dir, json);
    if (dead)
        hs_model_free(&m);
    free(dead);
    return rc;
}

/* The first sequence's tokens as display strings (/token_text): in JSON the
 * raw strings ("token_text_0", null when the file has none), else one line
 * of them, each shown readably and separated by '|'. */
static void print_token_text(FILE *f, hs_maps_reader *r, const hs_maps_info *in, int json)
{
    char **text = in->has_token_text && in->n_seq > 0
                      ? calloc((size_t)in->seq_len, sizeof *text) : NULL;
    const int ok = text && !hs_maps_read_token_text(r, 0, text);
    if (json) {
        fprintf(f, ",\"token_text_0\":");
        for (int t = 0; t < in->seq_len && ok; t++)
            fprintf(f, "%s", t ? "," : "["), hs_json_string(f, text[t]);
        fprintf(f, "%s", ok ? "]" : "null");
    } else if (ok) {
        fprintf(f, "token text   sequence 0: ");
        size_t shown = 0;
        for (int t = 0; t < in->seq_len && shown < 400; t++) {
            char d[256];
            hs_token_display(d, sizeof d, text[t], 24, 0);
            shown += strlen(d) + 1;
            fprintf(f, "%s%s", t ? "|" : "", d);
        }
        fprintf(f, "%s\n", shown >= 400 ? "|…" : "");
    } else {
        fprintf(f, "token text   %s\n", in->has_token_text ? "unreadable" : "none (no tokenizer was known)");
    }
    hs_maps_free_token_text(text, text ? in->seq_len : 0);
    free(text);
}

void hs_describe_maps(FILE *f, hs_maps_reader *r, const char *path, int json)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    if (json) {
        fprintf(f, "{\"file\":");
        hs_json_string(f, path);
        fprintf(f, ",\"complete\":%d,\"version\":%d,\"sequences\":%lld,\"seq_len\":%d,"
               "\"model_sha256\":", in->complete, in->version, in->n_seq, in->seq_len);
        hs_json_string(f, in->model_sha256);
        fprintf(f, ",\"data_sha256\":");
        hs_json_string(f, in->data_sha256);
        fprintf(f, ",\"data_path\":");
        hs_json_string(f, in->data_path);
        fprintf(f, ",\"tool_version\":");
        hs_json_string(f, in->tool_version);
        fprintf(f, ",\"layers\":[");
        for (int i = 0; i < in->n_layers; i++) {
            const hs_maps_layer_info *l = &in->layers[i];
            fprintf(f, "%s{\"layer\":%d,", i ? "," : "", l->layer);
            if (l->attn)
                fprintf(f, "\"attn\":\"%s\",", hs_attn_type_name((hs_attn_type)l->attn));
            fprintf(f, "\"heads\":[");
            for (int h = 0; h < l->nh; h++)
                fprintf(f, "%s%d", h ? "," : "", l->heads[h]);
            fprintf(f, "],\"query_start\":%d,\"queries\":%d,\"keys\":%d,\"dtype\":\"%s\"}", l->q0,
                   l->nq, l->S, l->half ? "float16" : "float32");
        }
        fprintf(f, "]");
        if (in->features) {
            fprintf(f, ",\"features\":{\"d_sae\":%d,\"run_id\":%d,\"hook_name\":", in->d_sae,
                    in->features_run);
            hs_json_string(f, in->features_hook);
            fprintf(f, "}");
        }
        print_token_text(f, r, in, 1);
        fprintf(f, "}\n");
    } else {
        fprintf(f, "file         %s (%s)\n", path, in->complete ? "complete" : "INCOMPLETE");
        if (in->seq2seq)
            fprintf(f, "sequences    %lld: sources of length %d, decoder inputs of length %d\n",
                    in->n_seq, in->src_len, in->seq_len);
        else
            fprintf(f, "sequences    %lld of length %d\n", in->n_seq, in->seq_len);
        fprintf(f, "model        sha256 %s\n", in->model_sha256);
        fprintf(f, "data         %s (sha256 %s)\n", in->data_path, in->data_sha256);
        fprintf(f, "written by   headscope %s\n", in->tool_version);
        print_token_text(f, r, in, 0);
        if (in->features)
            fprintf(f, "features     %d of an SAE on %s, in CSR over the tokens (features run %d)\n",
                    in->d_sae, in->features_hook, in->features_run);
        for (int i = 0; i < in->n_layers; i++) {
            const hs_maps_layer_info *l = &in->layers[i];
            fprintf(f, "%-5s %2d     [%lld, %d, %d, %d] %s, queries %d..%d, heads",
                    l->attn ? hs_attn_type_name((hs_attn_type)l->attn) : "layer", l->layer, in->n_seq, l->nh, l->nq,
                    l->S, l->half ? "float16" : "float32", l->q0, l->q0 + l->nq - 1);
            for (int h = 0; h < l->nh; h++)
                fprintf(f, " %d", l->heads[h]);
            fprintf(f, "\n");
        }
    }
}
