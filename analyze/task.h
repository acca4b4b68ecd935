/* A labelled task (SPEC §16): the examples of a task file, each right-padded
 * to the sequence length, and a classifier's outputs on them.
 *
 * The file (`--task FILE.jsonl`) has one JSON object a line: {"text": S,
 * "label": L} (tokenized with the tokenizer's special tokens), {"text": S,
 * "text_pair": S2, "label": L} (through the tokenizer's pair template, its
 * type_ids the token types), or {"ids": [...], "token_type_ids": [...]?,
 * "label": L}. L is an integer class, a string equal to one of id2label's
 * names, a number (regression) or a list of 0/1 (multi-label); every line
 * of one kind, and the kind the model's problem_type says (absent: HF's
 * inference -- one label: regression, integers: single-label, lists:
 * multi-label). A sequence longer than the length is refused naming its
 * line, unless `truncate` (a text's tokens dropped from its end, a pair's
 * from the end of the longer segment, the second on ties; special tokens
 * kept; an ids line is refused even then). Every error names the file and
 * the line. */
#ifndef HS_TASK_H
#define HS_TASK_H

#include <stdint.h>

#include "stats.h"
#include "task_metrics.h"
#include "tokenizer.h"
#include "tokens.h"
#include "transformer.h"

typedef struct {
    const char *path;
    int seq_len; /* 0: min(n_ctx, 256), as every command's --seq-len */
    int truncate;
    /* --label-map i0,i1,...: the model's output j scores the task's label
     * i_j (a checkpoint trained with its labels permuted); n_map 0: none */
    int label_map[HS_MAX_LABELS];
    int n_map;
    const char *metric; /* --metric: the headline (NULL: accuracy, or pearson for regression) */
} hs_task_opts;

typedef struct hs_task {
    int n, T;          /* examples, positions each (right-padded) */
    int32_t *ids;      /* n x T */
    unsigned char *types; /* n x T token type ids (pairs), or NULL: type 0 everywhere */
    int *len;          /* n: each example's tokens before its padding */
    hs_task_kind kind;
    int k;             /* the model's outputs (labels) */
    int *label;        /* single-label: n classes */
    double *target;    /* multi-label: n x k of 0/1; regression: n values */
    int label_map[HS_MAX_LABELS]; /* identity when none was given */
    hs_task_metric headline;      /* --metric's, checked against the kind */
} hs_task;

/* Reads o->path for the classifier c (tk: the tokenizer of text lines, NULL
 * when there is none). */
int hs_task_load(hs_task *t, const hs_task_opts *o, const hs_model_config *c,
                 const hs_tokenizer *tk);
void hs_task_free(hs_task *t);

/* `--text FILE --lines` (SPEC §21): each line of the text with tokens one
 * sequence of its own (the tokenizer's special tokens added), unlabelled
 * (k 0), right-padded to T: seq_len, or with 0 the longest line's; whole:
 * the whole text one sequence (`--seq-len auto`). A line longer than
 * seq_len (0: the model's n_ctx) is refused naming the file and line and
 * its count of tokens; a text without a tokenizer (tk NULL) refused. */
int hs_task_load_lines(hs_task *t, const char *path, int seq_len, int whole,
                       const hs_model_config *c, const hs_tokenizer *tk);

/* Parses --label-map's "i0,i1,..." into o (a permutation of 0..k-1 is
 * checked by hs_task_load, which knows k). HS_EINVAL naming the option. */
int hs_task_label_map_parse(hs_task_opts *o, const char *s);

/* The classifier's outputs on every example, in the task's label order,
 * into out (n x k), batch examples a forward; hooks may be NULL. */
int hs_task_run(double *out, const hs_model *m, const hs_task *t, int batch,
                const hs_hooks *hooks);

/* The classifier's outputs on the nb examples ex[0..nb) (a batch of
 * them, right-padded to t->T, into ids and types: nb x T each; the acts
 * read types through the backward too) in a (allocated for at
 * least nb rows of t->T: HS_ACTS_LOSS or HS_ACTS_INFER, or HS_ACTS_TRAIN
 * for a backward after it) into out (nb x k, in the task's label order),
 * the forward with hooks (may be NULL); pool (nb) gets each sequence's
 * pooled row (hs_classify_backward's). */
int hs_task_forward(hs_acts *a, double *out, int *pool, int32_t *ids, unsigned char *types,
                    const hs_model *m, const hs_task *t, const int *ex, int nb,
                    const hs_hooks *hooks);

/* The task's examples as token data (SPEC §4's batches of B x T: example
 * after example, each right-padded to t->T, and one more id) into out
 * (owned: hs_tokens_free), and with mask (may be NULL) each position's 1
 * (a token) or 0 (padding), malloc'd. */
int hs_task_tokens(hs_tokens *out, unsigned char **mask, const hs_task *t);

/* Example i alone, its outputs row (k values), as the metrics read it
 * (hs_task_loss(&o, 0), hs_task_loss_grad). */
hs_task_outputs hs_task_example(const hs_task *t, int i, const double *row);

/* The outputs as the metrics read them. */
hs_task_outputs hs_task_outputs_of(const hs_task *t, const double *out);

/* `eval --task`'s numbers: the mean per-example loss and its standard error
 * (SPEC §5 over examples), every metric of the task's kind with its
 * jackknife standard error, and the headline's index in metric[]. */
typedef struct {
    int n;
    hs_task_kind kind;
    double loss, loss_se;
    int n_metrics, headline;
    hs_task_metric metric[HS_TASK_N_METRICS];
    double value[HS_TASK_N_METRICS], se[HS_TASK_N_METRICS];
} hs_task_eval_result;

/* The numbers of the outputs out (n x k, hs_task_run's) on t. */
int hs_task_numbers(hs_task_eval_result *r, const hs_task *t, const double *out);

/* r as model-wide rows (layer = head = -1) of tb: task_loss and every
 * metric with its standard error, n the examples. */
int hs_task_numbers_to_table(hs_head_table *tb, const hs_task_eval_result *r);

/* The classifier's numbers on t (hs_task_run with hooks, may be NULL, then
 * hs_task_numbers), batch examples a forward. */
int hs_task_eval(hs_task_eval_result *r, const hs_model *m, const hs_task *t, int batch,
                 const hs_hooks *hooks);

#endif
