/* gnuplot as the figures use it: an external program run with its script
 * from scripts/ (HEADSCOPE_SCRIPTS overrides where) and -e assignments,
 * never through a shell. Everything a figure shows that came from a file or
 * an index (titles, token labels, paths) reaches gnuplot either as a data
 * field (hs_gp_data_label) or as a string expression that means exactly
 * itself (hs_gp_quote): nothing in them is ever read as a command. */
#ifndef HS_RENDER_GNUPLOT_H
#define HS_RENDER_GNUPLOT_H

#include <stddef.h>
#include <stdio.h>

#include "common.h"

/* The folder of the gnuplot scripts and the viewer's page: $HEADSCOPE_SCRIPTS,
 * else the source tree's scripts/ (a build), else the installed copy beside
 * the executable (bin/../share/headscope/scripts). */
const char *hs_scripts_dir(void);

/* "png", "svg" or "pdf" by out's suffix (any case); NULL for any other: the
 * figures refuse it (HS_EINVAL) and write nothing. */
const char *hs_plot_format(const char *out);

/* 0 when this gnuplot has no pdfcairo terminal (gnuplot-nox builds may lack
 * it); 1 otherwise, or when gnuplot cannot be run at all (the figure then
 * says so itself). */
int hs_plot_pdf_available(void);

/* s as a gnuplot string expression that means exactly s (single-quoted
 * pieces joined by "." to "'" for each quote; a control byte shows as a
 * space). Cut short, still well formed, when n is too small; n >= 12. */
void hs_gp_quote(char *out, size_t n, const char *s);

/* label as a data field that gnuplot reads back exactly as label (a
 * backslash doubled, a quote as an octal escape); label holds no tab or
 * control byte (hs_token_display). */
void hs_gp_data_label(FILE *f, const char *label);

/* Runs gnuplot on `script` (a file of hs_scripts_dir) with fmt and outfile
 * assigned first, then `assignments`; HS_OK when it exited 0 and outfile is
 * there and not empty, else HS_EIO saying why (HS_EINVAL for an unknown
 * format or a control character in outfile's name). */
int hs_gnuplot(const char *script, const char *assignments, const char *outfile);

/* A new private folder (mkdtemp, mode 0700) for a figure's data files, in
 * $TMPDIR unless that name could end a gnuplot string (then /tmp). */
int hs_plot_tmpdir(char *dir, size_t n);

/* A data file of a folder of hs_plot_tmpdir, created for writing (O_EXCL:
 * never an existing file or link). NULL with the message set. */
FILE *hs_plot_file(const char *path);

/* Removes the folder of hs_plot_tmpdir and every file in it ("" or NULL:
 * nothing). */
void hs_plot_tmpdir_remove(const char *dir);

#endif
