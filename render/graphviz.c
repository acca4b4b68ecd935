/* Running Graphviz's dot (graphviz.h). */
#include "graphviz.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "gnuplot.h"

void hs_dot_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fputc('\\', f);
        fputc(*c < 0x20 || *c == 0x7f ? ' ' : *c, f);
    }
    fputc('"', f);
}

/* `dot -Tfmt -o out dotfile`, waited for: HS_OK when it exited 0. */
static int run_dot(const char *fmt, const char *out, const char *dotfile)
{
    char type[16];
    snprintf(type, sizeof type, "-T%s", fmt);
    pid_t pid = fork();
    if (pid < 0)
        return hs_fail(HS_EIO, "cannot start dot: %s", strerror(errno));
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(126);

        execlp("dot", "dot", type, "-o", out, dotfile, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return hs_fail(HS_EIO, "dot failed on %s (exit %d%s)", dotfile,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                       WIFEXITED(status) && WEXITSTATUS(status) == 127
                           ? ": dot not found, run scripts/setup (graphviz)"
                           : "");
    return HS_OK;
}

int hs_dot(const char *dotfile, const char *outfile)
{
    const char *fmt = hs_plot_format(outfile);
    if (!fmt)
        return hs_fail(HS_EINVAL, "%s: unknown output format (name it .png, .svg or .pdf)",
                       outfile);
    for (const unsigned char *c = (const unsigned char *)outfile; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return hs_fail(HS_EINVAL, "--out: a file name with a control character is refused");
    /* dot writes into a private folder of ours (see hs_gnuplot) */
    char dir[PATH_MAX + 64], tmp[PATH_MAX + 80];
    int rc = hs_tmp_dir_create(outfile, "figure", dir, sizeof dir, tmp, sizeof tmp);
    if (!rc)
        rc = run_dot(fmt, tmp, dotfile);
    return hs_tmp_dir_commit(rc, dir, tmp, outfile, "dot");
}
