/* `report`: one static HTML page (index.html + gnuplot PNGs) of what an
 * index holds: training curves, the induction claim with its causal check,
 * score grids beside their random-init controls, attention maps of the
 * heads the scores single out (and the interactive viewer beside them),
 * ablation, importance, pruning, pattern statistics, the experiments, the
 * causal instruments, every run with its provenance. Each figure is
 * captioned with what it shows and what it does not. */
#ifndef HS_RENDER_REPORT_H
#define HS_RENDER_REPORT_H

#include <stdio.h>

typedef struct {
    const char *db;   /* the index, opened read-only */
    const char *dir;  /* created when missing: index.html, the figures, viewer/ */
    const char *maps; /* the map file to draw (NULL: the latest capture run's) */
    long long seq;    /* its sequence */
    /* --runs "ID,ID,...": the runs a section may show (NULL: every complete
     * run; each section shows the latest of its kinds); --heads "L.H,...":
     * the heads the maps section draws (NULL: those the causal runs single
     * out first, then those the scores do) */
    const char *runs, *heads;
} hs_report_request;

typedef struct {
    char page[1200]; /* dir/index.html */
    int figures;     /* drawn */
    int missing;     /* not drawn: the page says why at each */
} hs_report_summary;

/* Writes the page of rq->db into rq->dir. Each section uses the latest
 * complete run of its kind (of each experiment); a figure that cannot be
 * drawn is a line on the page saying why, not a failure. The page is
 * written under a temporary name and moved into place when complete, so a
 * failure (HS_EIO, the index unreadable) leaves no half page. */
int hs_report_write(const hs_report_request *rq, hs_report_summary *sum);

/* What `report` prints of sum: one line, or with json one JSON object
 * {"out", "figures", "missing"}. */
void hs_report_print(FILE *f, const hs_report_summary *sum, int json);

#endif
