/* Running gnuplot (SPEC §8: an external program, never through a shell):
 * the scripts' folder, quoting every string that reaches a script as
 * gnuplot data or a string expression that means exactly itself, a
 * temporary folder for a figure's data files. */
#include "gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HS_SCRIPTS_DIR
#define HS_SCRIPTS_DIR "scripts"
#endif

#ifndef HS_INSTALLED_SCRIPTS_REL
#define HS_INSTALLED_SCRIPTS_REL "../share/headscope/scripts"
#endif

/* $HEADSCOPE_SCRIPTS, else the source tree's scripts/ (a build), else the
 * installed copy beside the executable (bin/../share/headscope/scripts). */
const char *hs_scripts_dir(void)
{
    static char installed[PATH_MAX];
    const char *env = getenv("HEADSCOPE_SCRIPTS");
    if (env && *env)
        return env;
    if (!access(HS_SCRIPTS_DIR "/plot_map.gp", R_OK))
        return HS_SCRIPTS_DIR;
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return HS_SCRIPTS_DIR;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(installed, sizeof installed, "%s/%s", exe, HS_INSTALLED_SCRIPTS_REL);
    return installed;
}

const char *hs_plot_format(const char *out)
{
    const char *dot = out ? strrchr(out, '.') : NULL;
    if (!dot || strchr(dot, '/'))
        return NULL;
    static const char *const known[] = { "png", "svg", "pdf" };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcasecmp(dot + 1, known[i]))
            return known[i];
    return NULL;
}

/* HS_OK when outfile's directory exists (an unwritable output is our error
 * to report, not gnuplot's). */
static int check_parent(const char *outfile)
{
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", outfile);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = 0;
    struct stat ps;
    if (slash && *parent && (stat(parent, &ps) || !S_ISDIR(ps.st_mode)))
        return hs_fail(HS_EIO, "%s: cannot write: %s is not a directory", outfile, parent);
    return HS_OK;
}

/* Writes s as a gnuplot string expression that means exactly s: single-quoted
 * pieces (inside them nothing is special: no backquote, macro or backslash)
 * joined by "." to "'" for each quote, since gnuplot 5.4 misreads runs of
 * doubled quotes. A control byte (a newline would end the command) is shown
 * as a space. Cut short, still well formed, when n is too small; n >= 12.
 * Nothing in s is ever read as a command. */
void hs_gp_quote(char *out, size_t n, const char *s)
{
    size_t k = 0;
    int open = 0;
    for (; *s && k + 10 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'') {
            if (open)
                out[k++] = '\'';
            open = 0;
            k += (size_t)snprintf(out + k, n - k, "%s\"'\"", k ? "." : "");
            continue;
        }
        if (!open && k)
            out[k++] = '.';
        if (!open)
            out[k++] = '\'';
        open = 1;
        out[k++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    if (open)
        out[k++] = '\'';
    if (!k) {
        out[k++] = '"';
        out[k++] = '"';
    }
    out[k] = 0;
}

/* Runs `gnuplot -e assignments script` and waits: HS_OK when it exited 0,
 * else HS_EIO saying how it failed. */
static int run_gnuplot(const char *script, const char *path, const char *assignments)
{
    pid_t pid = fork();
    if (pid < 0)
        return hs_fail(HS_EIO, "cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        /* gnuplot's own diagnostics are noise once we report the failure. */
        if (!freopen("/dev/null", "w", stderr))
            _exit(126);
        execlp("gnuplot", "gnuplot", "-e", assignments, path, (char *)NULL);
        fprintf(stderr, "headscope: plot: cannot run gnuplot: %s\n", strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return hs_fail(HS_EIO, "gnuplot failed on %s (exit %d%s)", script,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                       WIFEXITED(status) && WEXITSTATUS(status) == 127
                           ? ": gnuplot not found, run scripts/setup"
                           : "");
    return HS_OK;
}

/* gnuplot draws into a private folder of ours beside outfile
 * (hs_tmp_dir_create: mode 0700, an unpredictable name), and the figure is
 * moved over outfile once it is there: no other user can swap the file
 * gnuplot opens by name for a link, a planted link at outfile is replaced,
 * never written through, and a failed plot leaves no half file. */
int hs_gnuplot(const char *script, const char *assignments, const char *outfile)
{
    char path[PATH_MAX + 128], tmp[PATH_MAX + 80];
    const char *fmt = hs_plot_format(outfile);
    if (!fmt)
        return hs_fail(HS_EINVAL, "%s: unknown output format (name it .png, .svg or .pdf)",
                       outfile);
    snprintf(path, sizeof path, "%s/%s", hs_scripts_dir(), script);
    if (access(path, R_OK))
        return hs_fail(HS_EIO, "%s: gnuplot script not found (set HEADSCOPE_SCRIPTS)", path);
    for (const unsigned char *c = (const unsigned char *)outfile; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return hs_fail(HS_EINVAL, "--out: a file name with a control character is refused");
    char dir[PATH_MAX + 64];
    int rc = check_parent(outfile);
    if (!rc)
        rc = hs_tmp_dir_create(outfile, "figure", dir, sizeof dir, tmp, sizeof tmp);
    if (rc)
        return rc;
    size_t qn = 8 * strlen(tmp) + 12, n = strlen(assignments) + qn + 48;
    char *all = malloc(n), *q = malloc(qn);
    if (!all || !q)
        rc = hs_fail(HS_ENOMEM, "plot: out of memory");
    if (!rc) {
        hs_gp_quote(q, qn, tmp);
        snprintf(all, n, "fmt='%s'; outfile=%s; %s", fmt, q, assignments);
        rc = run_gnuplot(script, path, all);
    }
    free(all);
    free(q);
    return hs_tmp_dir_commit(rc, dir, tmp, outfile, "gnuplot");
}

int hs_plot_tmpdir(char *dir, size_t n)
{
    const char *base = getenv("TMPDIR");
    /* The data files' paths reach gnuplot inside quoted strings, some of them
     * passed to eval (plot_scores.gp): a folder that could end such a string is
     * not used. */
    if (!base || !*base || base[strcspn(base, "'\"\\`$@%")])
        base = "/tmp";
    for (const unsigned char *c = (const unsigned char *)base; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            base = "/tmp";
    snprintf(dir, n, "%s/headscope-plot-XXXXXX", base);
    return mkdtemp(dir) ? HS_OK : hs_fail(HS_EIO, "cannot create a temporary directory");
}

FILE *hs_plot_file(const char *path)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        hs_fail(HS_EIO, "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

void hs_plot_tmpdir_remove(const char *dir)
{
    hs_remove_flat_dir(dir);
}

/* A label as a gnuplot data field that reads back exactly as label: gnuplot
 * unescapes string fields (\\, \NNN octal) and ends one at a '"', so a
 * backslash is doubled and a quote written as \042 (a digit right after an
 * octal escape is escaped too, or it would extend it). label holds no tab
 * or control byte (cli_token_display). */
void hs_gp_data_label(FILE *f, const char *label)
{
    int after_octal = 0;
    for (const unsigned char *c = (const unsigned char *)label; *c; c++) {
        if (*c == '"' || (after_octal && *c >= '0' && *c <= '7')) {
            fprintf(f, "\\%03o", *c);
            after_octal = 1;
            continue;
        }
        if (*c == '\\')
            fputc('\\', f);
        fputc(*c, f);
        after_octal = 0;
    }
}

/* 0 when this gnuplot has no pdfcairo terminal (gnuplot-nox builds may
 * lack it); 1 otherwise, or when gnuplot cannot be run at all (then the
 * plot itself says so). */
int hs_plot_pdf_available(void)
{
    int st = system("gnuplot -e 'set terminal pdfcairo' >/dev/null 2>&1");
    return st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 127;
}
