/* Figures of map files: one head's map with token labels, every captured
 * head of a sequence as small multiples. */
#include "plot.h"
#include "config_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gnuplot.h"
#include "labels.h"
#include "maps.h"

/* At most this many labels on an axis: every step-th position is labelled. */
enum { MAP_MAX_LABELS = 40, MAP_LABEL_CHARS = 12 };

/* The label of position t: its token's display string (text, from the map
 * file's /token_text), else its id. */
static void write_label(FILE *f, int t, const int32_t *tok, char *const *text)
{
    char d[160];
    if (text)
        hs_token_display(d, sizeof d, text[t], MAP_LABEL_CHARS, 1);
    else
        snprintf(d, sizeof d, "%d", (int)tok[t]);
    fprintf(f, "%d\t", t);
    hs_gp_data_label(f, d);
    fprintf(f, "\n");
}

/* Labels of positions first..first+n-1 ("position<TAB>label" lines), at
 * most MAP_MAX_LABELS of them evenly spaced, always the first. */
static int write_labels(const char *p, int first, int n, const int32_t *tok, char *const *text)
{
    FILE *f = hs_plot_file(p);
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    const int step = (n + MAP_MAX_LABELS - 1) / MAP_MAX_LABELS;
    for (int i = 0; i < n; i += step)
        write_label(f, first + i, tok, text);
    return fclose(f) ? hs_fail(HS_EIO, "%s: write failed", p) : HS_OK;
}

/* One head's map: one tab-separated row per query, the key labels and the
 * query labels in files of their own (labels are data, never code). */
static int write_map_txt(const char *dir, const hs_maps_layer_info *l, const int32_t *tok,
                         char *const *text, const float *buf)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/map.txt", dir);
    FILE *f = hs_plot_file(p);
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    for (int q = 0; q < l->nq; q++)
        for (int s = 0; s < l->S; s++)
            fprintf(f, "%.5g%c", buf[(size_t)q * l->S + s], s + 1 < l->S ? '\t' : '\n');
    if (fclose(f))
        return hs_fail(HS_EIO, "%s: write failed", p);
    snprintf(p, sizeof p, "%s/xlabels.txt", dir);
    int rc = write_labels(p, 0, l->S, tok, text);
    snprintf(p, sizeof p, "%s/ylabels.txt", dir);
    return rc ? rc : write_labels(p, l->q0, l->nq, tok, text);
}

/* One head's map with token labels (plot_map.gp). */
static int draw_head(hs_maps_reader *r, const char *maps, int layer, int head, long long seq,
                     const int32_t *tok, char *const *text, float *buf, const char *dir,
                     const char *out)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int li = -1, hi = -1, rc = HS_OK;
    for (int i = 0; i < in->n_layers; i++)
        if (in->layers[i].layer == layer)
            li = i;
    for (int h = 0; li >= 0 && h < in->layers[li].nh; h++)
        if (in->layers[li].heads[h] == head)
            hi = h;
    if (li < 0 || hi < 0)
        return hs_fail(HS_EINVAL, "%s holds no map of layer %d head %d", maps, layer, head);
    const hs_maps_layer_info *l = &in->layers[li];
    char assign[16384], title[300], qtitle[2400];
    rc = hs_maps_read(r, li, seq, hi, buf);
    if (!rc)
        rc = write_map_txt(dir, l, tok, text, buf);
    snprintf(title, sizeof title, "layer %d, head %d, sequence %lld%s", layer, head, seq,
             text ? "" : " (token ids: the file holds no token text)");
    hs_gp_quote(qtitle, sizeof qtitle, title);
    snprintf(assign, sizeof assign, "datafile='%s/map.txt'; xlabels='%s/xlabels.txt'; "
             "ylabels='%s/ylabels.txt'; keys=%d; queries=%d; qstart=%d; plottitle=%s", dir, dir,
             dir, l->S, l->nq, l->q0, qtitle);
    return rc ? rc : hs_gnuplot("plot_map.gp", assign, out);
}

/* One panel's matrix: head hi of captured layer li, sequence seq. */
static int write_panel(hs_maps_reader *r, int li, int hi, long long seq, float *buf,
                       const char *p)
{
    const hs_maps_layer_info *l = &hs_maps_get_info(r)->layers[li];
    FILE *f = hs_plot_file(p);
    if (!f)
        return hs_fail(HS_EIO, "%s: cannot write", p);
    int rc = hs_maps_read(r, li, seq, hi, buf);
    for (int q = 0; !rc && q < l->nq; q++) {
        for (int s = 0; s < l->S; s++)
            fprintf(f, "%s%.4g", s ? " " : "", buf[(size_t)q * l->S + s]);
        fprintf(f, "\n");
    }
    if (fclose(f) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed", p);
    return rc;
}

/* Every captured head of a sequence (plot_grid.gp): one row per captured
 * layer, one column per head index, one file per drawn panel. A cell that
 * is no head of the model, or a head the capture left out, is a grey panel
 * saying so, never an empty map. nl x nh is the panel grid. */
static int draw_grid(hs_maps_reader *r, const char *maps, long long seq, float *buf,
                     const char *dir, const char *out, int *nl, int *nh)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int rc = HS_OK;
    char title[300], qtitle[2400], p[1200];
    *nl = in->n_layers;
    for (int i = 0; i < in->n_layers; i++)
        for (int k = 0; k < in->layers[i].nh; k++)
            *nh = in->layers[i].heads[k] + 1 > *nh ? in->layers[i].heads[k] + 1 : *nh;
    size_t cap = (size_t)*nl * *nh * 24 + 1024, len = 0;
    char *labels = malloc(cap), *assign = malloc(cap + 4000);
    if (!labels || !assign)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    /* the model's heads per layer, where the file's config.json parses */
    hs_model_config c;
    const int known = in->model_config && !hs_config_parse(&c, in->model_config, maps);
    for (int i = 0; !rc && i < in->n_layers; i++) {
        const hs_maps_layer_info *l = &in->layers[i];
        const int model_heads = known && l->layer < c.n_layer ? c.n_head[l->layer] : -1;
        for (int h = 0; !rc && h < *nh; h++) {
            int hi = -1;
            for (int k = 0; k < l->nh; k++)
                hi = l->heads[k] == h ? k : hi;
            snprintf(p, sizeof p, "%s/%d_%d.txt", dir, i, h);
            if (hi >= 0)
                rc = write_panel(r, i, hi, seq, buf, p);
            char word[32];
            if (hi >= 0)
                snprintf(word, sizeof word, "L%dH%d", l->layer, h);
            else
                snprintf(word, sizeof word, "%s",
                         model_heads >= 0 && h >= model_heads ? "nohead" : "notcaptured");
            len += (size_t)snprintf(labels + len, cap - len, "%s%s", len ? " " : "", word);
        }
    }
    snprintf(title, sizeof title, "%s, sequence %lld: attention probability, one scale 0 .. 1",
             maps, seq);
    hs_gp_quote(qtitle, sizeof qtitle, title);
    if (!rc) {
        snprintf(assign, cap + 4000, "dir='%s'; nl=%d; nh=%d; plottitle=%s; "
                 "labels='%s'", dir, *nl, *nh, qtitle, labels);
        rc = hs_gnuplot("plot_grid.gp", assign, out);
    }
    free(labels);
    free(assign);
    return rc;
}

int hs_plot_map(const char *maps, int layer, int head, long long seq, const char *out, int grid)
{
    hs_maps_reader *r;
    int rc = hs_maps_open(&r, maps);
    if (rc)
        return rc;
    const hs_maps_info *in = hs_maps_get_info(r);
    char dir[600] = "";
    int nl = 0, nh = 0;
    int32_t *tok = malloc(sizeof(int32_t) * in->seq_len);
    char **text = in->has_token_text ? calloc((size_t)in->seq_len, sizeof *text) : NULL;
    float *buf = malloc(sizeof(float) * (size_t)in->seq_len * in->seq_len);
    if (!tok || !buf || (in->has_token_text && !text))
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (!rc && (seq < 0 || seq >= in->n_seq))
        rc = hs_fail(HS_EINVAL, "%s: no sequence %lld (it holds %lld)", maps, seq, in->n_seq);
    if (!rc && !in->complete)
        rc = hs_fail(HS_EFORMAT, "%s is not marked complete", maps);
    if (!rc && in->seq2seq) /* two token sequences: the viewer draws them */
        rc = hs_fail(HS_EINVAL, "%s holds an encoder-decoder's maps: plot draws one stack's; "
                                "'headscope view --maps %s' shows every type", maps, maps);
    if (!rc)
        rc = hs_maps_read_tokens(r, seq, tok);
    if (!rc && text)
        rc = hs_maps_read_token_text(r, seq, text);
    if (!rc)
        rc = hs_plot_tmpdir(dir, sizeof dir);
    if (!rc)
        rc = grid ? draw_grid(r, maps, seq, buf, dir, out, &nl, &nh)
                  : draw_head(r, maps, layer, head, seq, tok, text, buf, dir, out);
    hs_plot_tmpdir_remove(dir);
    hs_maps_free_token_text(text, text ? in->seq_len : 0);
    free(text);
    free(tok);
    free(buf);
    hs_maps_close(r);
    return rc;
}
