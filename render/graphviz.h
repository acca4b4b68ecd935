/* Graphviz's dot as the circuit figures use it: an external program run on
 * a DOT file we wrote, never through a shell, its output written beside the
 * figure under an exclusive temporary name and moved into place when
 * complete (as hs_gnuplot does). */
#ifndef HS_RENDER_GRAPHVIZ_H
#define HS_RENDER_GRAPHVIZ_H

#include <stddef.h>
#include <stdio.h>

/* s as a DOT quoted string ("..." with quotes and backslashes escaped, a
 * control byte as a space): it means exactly s. */
void hs_dot_string(FILE *f, const char *s);

/* Runs `dot -T<fmt> -o TMP dotfile` (fmt by outfile's suffix: png, svg,
 * pdf) and moves TMP to outfile. HS_OK, or HS_EIO saying why (dot missing:
 * "run scripts/setup", which installs graphviz), HS_EINVAL for an unknown
 * format. */
int hs_dot(const char *dotfile, const char *outfile);

#endif
