/* Output files' temporaries (base/common.h: hs_tmp_create, hs_tmp_fopen,
 * hs_tmp_commit, hs_tmp_stale): an unpredictable name beside the output,
 * created O_EXCL with fopen's mode; moved over the output (a symlink there
 * is replaced, never followed) or, without replace, only where nothing is;
 * a dead writer's leftover told from a live one's and from names that only
 * look alike. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "common.h"
#include "runner.h"

static char DIR_[64];

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", DIR_, name);
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static int holds(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return !strcmp(buf, text);
}

/* Entries of DIR_ (but . and ..). */
static int entries(void)
{
    DIR *d = opendir(DIR_);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void test_temporaries_are_unpredictable_exclusive_and_beside_the_output(void)
{
    char out[128], a[1100], b[1100], prefix[200];
    path_in(out, sizeof out, "o.bin");
    snprintf(prefix, sizeof prefix, "%s.tmp.%d.", out, (int)getpid());
    const int fa = hs_tmp_create(out, a, sizeof a), fb = hs_tmp_create(out, b, sizeof b);
    CU_ASSERT_FATAL(fa >= 0 && fb >= 0);
    CU_ASSERT_NOT_EQUAL(strcmp(a, b), 0); /* two writers of one output never share a name */
    CU_ASSERT_EQUAL(strncmp(a, prefix, strlen(prefix)), 0);
    CU_ASSERT_EQUAL(strlen(a), strlen(prefix) + 6);
    struct stat sb;
    CU_ASSERT_EQUAL(fstat(fa, &sb), 0);
    const mode_t mask = umask(022);
    umask(mask);
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0666 & ~mask); /* fopen's mode, not mkstemp's 0600 */
    CU_ASSERT(fcntl(fa, F_GETFD) & FD_CLOEXEC);
    close(fa), close(fb);
    unlink(a), unlink(b);
    /* a path with no room for the suffix is refused, naming it */
    char small[16];
    CU_ASSERT_EQUAL(hs_tmp_create(out, small, sizeof small), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), out));
    /* a missing directory: -1 naming the output, nothing created */
    char missing[160];
    path_in(missing, sizeof missing, "no/such/o.bin");
    CU_ASSERT_PTR_NULL(hs_tmp_fopen(missing, a, sizeof a));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), missing));
    CU_ASSERT_EQUAL(entries(), 0);
}

static void test_a_symlink_at_the_output_is_replaced_not_followed(void)
{
    char out[128], victim[128], tmp[1100];
    path_in(out, sizeof out, "o.txt");
    path_in(victim, sizeof victim, "victim");
    spit(victim, "keep");
    CU_ASSERT_EQUAL_FATAL(symlink(victim, out), 0);
    FILE *f = hs_tmp_fopen(out, tmp, sizeof tmp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("new", f);
    CU_ASSERT_EQUAL(fclose(f), 0);
    CU_ASSERT_EQUAL(hs_tmp_commit(tmp, out, 1), HS_OK);
    struct stat sb;
    CU_ASSERT(lstat(out, &sb) == 0 && S_ISREG(sb.st_mode));
    CU_ASSERT(holds(out, "new"));
    CU_ASSERT(holds(victim, "keep"));
    CU_ASSERT_NOT_EQUAL(access(tmp, F_OK), 0);
    unlink(out), unlink(victim);
    CU_ASSERT_EQUAL(entries(), 0);
}

static void test_without_replace_an_existing_output_is_kept_and_the_commit_fails(void)
{
    char out[128], tmp[1100], victim[128];
    path_in(out, sizeof out, "o.txt");
    path_in(victim, sizeof victim, "victim");
    /* a file, a dangling symlink and a symlink to a file: each is "there" */
    for (int kind = 0; kind < 3; kind++) {
        if (kind == 2)
            spit(victim, "keep");
        if (kind == 0)
            spit(out, "first");
        else
            CU_ASSERT_EQUAL_FATAL(symlink(kind == 1 ? "nowhere" : victim, out), 0);
        FILE *f = hs_tmp_fopen(out, tmp, sizeof tmp);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs("second", f);
        fclose(f);
        CU_ASSERT_EQUAL(hs_tmp_commit(tmp, out, 0), HS_EIO);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), out));
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "exists"));
        CU_ASSERT_NOT_EQUAL(access(tmp, F_OK), 0); /* removed on failure */
        struct stat sb;
        CU_ASSERT_EQUAL(lstat(out, &sb), 0);
        CU_ASSERT(kind ? S_ISLNK(sb.st_mode) : holds(out, "first"));
        CU_ASSERT(kind != 2 || holds(victim, "keep"));
        unlink(out), unlink(victim);
    }
    /* where nothing is, it is moved there */
    FILE *f = hs_tmp_fopen(out, tmp, sizeof tmp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("only", f);
    fclose(f);
    CU_ASSERT_EQUAL(hs_tmp_commit(tmp, out, 0), HS_OK);
    CU_ASSERT(holds(out, "only"));
    unlink(out);
    CU_ASSERT_EQUAL(entries(), 0);
}

/* Of several writers racing to one output without replace, exactly one
 * wins and the file is the winner's, whole. */
static void test_racing_writers_without_replace_leave_one_winner(void)
{
    enum { WRITERS = 6 };
    char out[128];
    path_in(out, sizeof out, "race.txt");
    int go[2];
    CU_ASSERT_EQUAL_FATAL(pipe(go), 0);
    pid_t pid[WRITERS];
    fflush(NULL);
    for (int i = 0; i < WRITERS; i++) {
        CU_ASSERT_FATAL((pid[i] = fork()) >= 0);
        if (pid[i] == 0) {
            close(go[1]);
            char tmp[1100], text[32];
            FILE *f = hs_tmp_fopen(out, tmp, sizeof tmp);
            snprintf(text, sizeof text, "writer %d", i);
            if (!f)
                _exit(2);
            fputs(text, f);
            fclose(f);
            char c;
            if (read(go[0], &c, 1) < 0) /* all start the commit at once */
                _exit(2);
            _exit(hs_tmp_commit(tmp, out, 0) == HS_OK ? 0 : 1);
        }
    }
    close(go[0]);
    close(go[1]); /* EOF: go */
    int won = -1, winners = 0, losers = 0;
    for (int i = 0; i < WRITERS; i++) {
        int st = 0;
        waitpid(pid[i], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            winners++, won = i;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 1)
            losers++;
    }
    CU_ASSERT_EQUAL(winners, 1);
    CU_ASSERT_EQUAL(losers, WRITERS - 1);
    char want[32];
    snprintf(want, sizeof want, "writer %d", won);
    CU_ASSERT(holds(out, want));
    unlink(out);
    CU_ASSERT_EQUAL(entries(), 0); /* no loser's temporary left */
}

static pid_t dead_pid(void)
{
    const pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

static void test_stale_tells_a_dead_writers_temporary(void)
{
    char out[128], tmp[1100];
    path_in(out, sizeof out, "o.h5");
    const int fd = hs_tmp_create(out, tmp, sizeof tmp);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    const char *mine = strrchr(tmp, '/') + 1;
    CU_ASSERT_EQUAL(hs_tmp_stale(out, mine), 0); /* this process is alive */
    unlink(tmp);
    const int dead = (int)dead_pid(), alive = (int)getppid();
    /* pid: 1 a dead one, 0 a live one, 2 zero */
    static const struct { const char *fmt; int pid, stale; } names[] = {
        { "o.h5.tmp.%d.Ab3xYz", 1, 1 },   { "o.h5.tmp.%d.Ab3xYz", 0, 0 },
        { "o.h5.tmp.%d", 1, 0 },          /* an older spelling, not hs_tmp_create's */
        { "o.h5.tmp.%d.Ab3", 1, 0 },      { "o.h5.tmp.%d.Ab3xYzQ", 1, 0 },
        { "other.h5.tmp.%d.Ab3xYz", 1, 0 }, { "o.h5x.tmp.%d.Ab3xYz", 1, 0 },
        { "o.h5.tmp.x%d.Ab3xYz", 1, 0 },  { "o.h5.tmp.-%d.Ab3xYz", 1, 0 },
        { "o.h5.tmp.%d.Ab3xYz", 2, 0 },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char name[200];
        const int pid = names[i].pid == 1 ? dead : names[i].pid == 0 ? alive : 0;
        snprintf(name, sizeof name, names[i].fmt, pid);
        const int got = hs_tmp_stale(out, name);
        if (got != names[i].stale)
            printf("\n    hs_tmp_stale(%s) = %d", name, got);
        CU_ASSERT_EQUAL(got, names[i].stale);
    }
    /* the output given with or without its directory */
    char name[200];
    snprintf(name, sizeof name, "o.h5.tmp.%d.Ab3xYz", dead);
    CU_ASSERT_EQUAL(hs_tmp_stale("o.h5", name), 1);
}

int main(void)
{
    snprintf(DIR_, sizeof DIR_, "/tmp/hs_tmpf_XXXXXX");
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 2;
    }
    static const hs_test tests[] = {
        { "test_temporaries_are_unpredictable_exclusive_and_beside_the_output",
          test_temporaries_are_unpredictable_exclusive_and_beside_the_output },
        { "test_a_symlink_at_the_output_is_replaced_not_followed",
          test_a_symlink_at_the_output_is_replaced_not_followed },
        { "test_without_replace_an_existing_output_is_kept_and_the_commit_fails",
          test_without_replace_an_existing_output_is_kept_and_the_commit_fails },
        { "test_racing_writers_without_replace_leave_one_winner",
          test_racing_writers_without_replace_leave_one_winner },
        { "test_stale_tells_a_dead_writers_temporary", test_stale_tells_a_dead_writers_temporary },
    };
    const int rc = hs_run_tests("tmpfiles", tests, HS_NTESTS(tests));
    rmdir(DIR_);
    return rc;
}
