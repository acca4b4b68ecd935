/* The competing CPU-bound process of --contend (bench/lib.sh) and
 * bench/contention.sh: one thread in a busy loop, as `stress --cpu 1` runs.
 *
 *   bench_spin [SECONDS]
 *
 * Runs until killed, until its parent (the benchmark script) ends, or after
 * SECONDS (default 3600): a benchmark that dies leaves no spinner behind. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent ended before prctl */
        return 0;
    const double limit = argc > 1 ? atof(argv[1]) : 3600;
    const time_t end = time(NULL) + (time_t)limit;
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 100000000; i++)
            x = x * 6364136223846793005ul + 1442695040888963407ul;
        if (time(NULL) >= end || getppid() != parent)
            return 0;
    }
}
