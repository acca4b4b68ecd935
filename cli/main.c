/* The headscope command: argument parsing, dispatch and error printing only.
 * Errors are printed as "headscope: CONTEXT: MESSAGE"; exit 0 on success,
 * 1 on failure, 2 on a usage error (SPEC §8). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { EXIT_USAGE = 2 };

typedef struct {
    const char *name;
    const char *summary;
    const char *usage; /* full help text */
    int (*run)(int argc, char **argv);
} command;

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "headscope: %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see 'headscope help %s')\n", cmd);
    return EXIT_USAGE;
}

/* Parses a positive integer option value; returns 0 on success. */
static int parse_long(const char *s, long min, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

static const char KV_BYTES_HELP[] =
    "usage: headscope kv-bytes --layers N --kv-heads G --head-dim DH --seq-len T\n"
    "                          [--batch B] [--bytes E] [--mla-latent C --mla-rope R] [--json]\n"
    "\n"
    "KV-cache size of a decoder: 2 * B * N * G * T * DH * E bytes (keys and values\n"
    "of G key/value heads in N layers). With --mla-latent, also the per-token cache\n"
    "of multi-head latent attention: N * (C + R) * E bytes per token (latent width C\n"
    "plus the decoupled rotary key width R), times B * T.\n"
    "\n"
    "  --batch B       sequences (default 1)\n"
    "  --bytes E       bytes per element (default 2)\n"
    "  --json          print one JSON object\n"
    "\n"
    "example: headscope kv-bytes --layers 80 --kv-heads 8 --head-dim 128 --seq-len 2048\n";

static int cmd_kv_bytes(int argc, char **argv)
{
    long B = 1, N = 0, G = 0, T = 0, dh = 0, E = 2, latent = 0, rope = 0;
    int json = 0;
    struct { const char *flag; long *dst; long min; } opts[] = {
        { "--batch", &B, 1 },      { "--layers", &N, 1 },     { "--kv-heads", &G, 1 },
        { "--seq-len", &T, 1 },    { "--head-dim", &dh, 1 },  { "--bytes", &E, 1 },
        { "--mla-latent", &latent, 1 }, { "--mla-rope", &rope, 0 },
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[k].flag))
            k++;
        if (k == sizeof opts / sizeof opts[0])
            return usage_error("kv-bytes", "unknown option '%s'", argv[i]);
        if (i + 1 >= argc)
            return usage_error("kv-bytes", "option %s needs a value", argv[i]);
        if (parse_long(argv[++i], opts[k].min, opts[k].dst))
            return usage_error("kv-bytes", "bad value '%s' (expected a positive integer)",
                               argv[i]);
    }
    if (!N || !G || !T || !dh)
        return usage_error("kv-bytes", "%s", "--layers, --kv-heads, --head-dim and --seq-len are required");
    double bytes = 2.0 * B * N * G * T * dh * E;
    double mla = latent ? (double)B * T * N * (latent + rope) * E : 0;
    if (json) {
        printf("{\"kv_bytes\":%.0f,\"kv_gib\":%.6f", bytes, bytes / (1 << 30));
        if (latent)
            printf(",\"mla_bytes\":%.0f,\"mla_bytes_per_token\":%.0f", mla,
                   (double)N * (latent + rope) * E);
        printf("}\n");
    } else {
        printf("kv cache: %.0f bytes (%.4f GiB)\n", bytes, bytes / (1 << 30));
        if (latent)
            printf("mla cache: %.0f bytes (%.0f per token)\n", mla, (double)N * (latent + rope) * E);
    }
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    (void)argc, (void)argv;
    printf("headscope %s (%s)\n", HS_VERSION, HS_REAL_NAME);
    return 0;
}

static int cmd_help(int argc, char **argv);

static const command commands[] = {
    { "help", "show help for a command", "usage: headscope help [COMMAND]\n", cmd_help },
    { "version", "print the version and numeric precision", "usage: headscope version\n",
      cmd_version },
    { "kv-bytes", "KV-cache bytes of a decoder configuration (and MLA's)", KV_BYTES_HELP,
      cmd_kv_bytes },
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static const command *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static void print_overview(FILE *f)
{
    fprintf(f, "usage: headscope COMMAND [options]\n\nheadscope: attention-head "
               "interpretability on the CPU.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'headscope help COMMAND' for a command's options.\n");
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stdout);
        return 0;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "headscope: help: unknown command '%s'\n", argv[1]);
        return EXIT_USAGE;
    }
    fputs(c->usage, stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stderr);
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
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(c->usage, stdout);
            return 0;
        }
    return c->run(argc - 1, argv + 1);
}
