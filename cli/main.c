/* The headscope command: dispatch and help (SPEC §8). Exit 0 on success, 1 on
 * failure, 2 on a usage error; errors as "headscope: CONTEXT: MESSAGE". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "dist.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

HS_COMMAND(cmd_help_record) = {
    .name = "help",
    .order = 10,
    .summary = "Show the commands, or one command's options.",
    .usage = "headscope help [COMMAND]",
    .run = cmd_help,
};
HS_COMMAND(cmd_version_record) = {
    .name = "version",
    .order = 20,
    .summary = "Print the version and the numeric precision of this build.",
    .usage = "headscope version [--json]",
    .details = "example: headscope version --json\n",
    .run = cmd_version,
};
/* Every registered command (HS_COMMAND), in the order help lists them. */
extern const command *const __start_hs_commands[], *const __stop_hs_commands[];
static const command *COMMANDS[64];
static int NCOMMANDS;

static int by_order(const void *a, const void *b)
{
    const command *x = *(const command *const *)a, *y = *(const command *const *)b;
    return (x->order > y->order) - (x->order < y->order);
}

static void list_commands(void)
{
    for (const command *const *c = __start_hs_commands; c < __stop_hs_commands; c++)
        if (NCOMMANDS < (int)(sizeof COMMANDS / sizeof COMMANDS[0]))
            COMMANDS[NCOMMANDS++] = *c;
    qsort(COMMANDS, (size_t)NCOMMANDS, sizeof COMMANDS[0], by_order);
}

static const command *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(COMMANDS[i]->name, name))
            return COMMANDS[i];
    return NULL;
}

static void overview(FILE *f)
{
    fprintf(f, "usage: headscope COMMAND [options]\n\n"
               "headscope: attention-head interpretability on the CPU.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i]->name, COMMANDS[i]->summary);
    fprintf(f, "\nRun 'headscope help COMMAND' for a command's options and an example.\n"
               "An option's value follows it or an '=': --model DIR or --model=DIR.\n");
}

static int cmd_version(int argc, char **argv)
{
    int json = 0;
    opt o[] = { OPT_JSON(&json) };
    int rc = cli_opts_parse("version", o, 1, argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (json)
        printf("{\"version\":\"%s\",\"precision\":\"%s\"}\n", HS_VERSION, HS_REAL_NAME);
    else
        printf("headscope %s (%s)\n", HS_VERSION, HS_REAL_NAME);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        overview(stdout);
        return 0;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "headscope: help: unknown command '%s' (see 'headscope help')\n", argv[1]);
        return EXIT_USAGE;
    }
    if (c->run == cmd_help) {
        printf("usage: %s\n\n%s\n", c->usage, c->summary);
        return 0;
    }
    cli_current = c;
    char *help_argv[] = { argv[1], "--help", NULL };
    return c->run(2, help_argv);
}

/* "ablate, importance, ... and capture": the commands that shard. */
static void sharding_commands(char *out, size_t n)
{
    int count = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        count += !!(COMMANDS[i]->flags & CMD_SHARDS);
    *out = 0;
    size_t len = 0;
    for (int i = 0, k = 0; i < NCOMMANDS && len < n; i++) {
        if (!(COMMANDS[i]->flags & CMD_SHARDS))
            continue;
        const char *sep = !k ? "" : k + 1 == count ? " and " : ", ";
        len += (size_t)snprintf(out + len, n - len, "%s%s", sep, COMMANDS[i]->name);
        k++;
    }
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* passive OpenMP waits, threads from the affinity mask */
    list_commands();
    if (argc < 2) {
        overview(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(1, argv);
    if (!strcmp(argv[1], "--version"))
        return cmd_version(0, NULL);
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "headscope: unknown command '%s' (see 'headscope help')\n", argv[1]);
        return EXIT_USAGE;
    }
    cli_current = c;
    cli_install_fault_handler();
    /* under mpirun: one rank of N (dist.h); rank 0 alone prints results */
    if (hs_dist_init(&argc, &argv)) {
        fprintf(stderr, "headscope: %s: %s\n", c->name, hs_last_error());
        return EXIT_FAILURE_RUN;
    }
    hs_dist_set_stop(&cli_stop_requested);
    if (hs_dist_rank() > 0 && !freopen("/dev/null", "w", stdout))
        return EXIT_FAILURE_RUN;
    if (hs_dist_size() > 1 && !(c->flags & CMD_SHARDS) && c->run != cmd_help &&
        c->run != cmd_version) {
        char names[256];
        sharding_commands(names, sizeof names);
        if (hs_dist_rank() == 0)
            fprintf(stderr, "headscope: %s: not split across ranks: run it without mpirun (%s "
                            "are)\n", c->name, names);
        return EXIT_USAGE;
    }
    const int status = c->run(argc - 1, argv + 1);
    if (hs_dist_size() > 1 && getenv("HEADSCOPE_DIST_STATS")) /* bench/mpi.sh */
        fprintf(stderr, "headscope: rank %d of %d: %.3f s waiting, %llu bytes sent or received\n",
                hs_dist_rank(), hs_dist_size(), hs_dist_wait_seconds(), hs_dist_bytes());
    /* its run is recorded: end the ranks that may still wait for rank 0 (a
     * usage error is every rank's, before any of them waits) */
    if (status && status != EXIT_USAGE && hs_dist_rank() == 0 && !hs_dist_failed_together())
        hs_dist_abort(status);
    return status;
}
