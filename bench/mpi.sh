#!/usr/bin/env bash
# Scale-out benchmark (SPEC §12): the all-heads ablation sweep and capture of
# a GELU model (6 layers, d 256, 8 heads, T 128; 32 sequences) on
#   1 process, 1 thread | 1 process, 2 threads | mpirun -np 1 | mpirun -np 2
# (ranks 1 thread each, bound to a core), medians of --reps runs; every MPI
# result is checked equal to the one-process result (rows, map file). For the
# 2-rank runs each rank's time waiting for the others and its bytes sent or
# received (HEADSCOPE_DIST_STATS); the index writer's rate (rows/s into
# head_metrics in one transaction) and capture's bytes per batch; from these
# the model of N-rank scaling in bench/out/mpi.md.
#
#   bench/mpi.sh [--reps N] [--tiny] [--contend]
# Results: bench/out/mpi.jsonl and bench/out/mpi.md. --tiny: a 2-layer d 64
# model on 8 sequences, one run each (a few seconds; scripts/test --slow),
# results in bench/out/tiny/. Skipped (exit 0) without mpirun.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "tiny contend"
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
command -v mpirun >/dev/null || { echo "mpi.sh: skipped: mpirun is not installed"; exit 0; }
bench_build bench_ablate headscope_cli
ldd build/float/headscope | grep -q libmpi || { echo "mpi.sh: skipped: built without MPI"; exit 0; }
config=6,256,8,128 seqs=32 batch=4 stack=8 outdir=bench/out
if [ "$tiny" = 1 ]; then
  config=2,64,4,32 seqs=8 batch=2 stack=4 reps=1 outdir=bench/out/tiny
fi
mkdir -p "$outdir"
bench_tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
build/float/bench/bench_ablate --write "$tmp/m" --config "$config"
/usr/bin/python3 -c 'import sys; sys.stdout.write(("The quick brown fox jumps over the lazy dog, again and again, 0123456789. " * 3000)[:200000])' >"$tmp/t.txt"
build/float/headscope tokens --in "$tmp/t.txt" --out "$tmp/t.bin" >/dev/null
T=${config##*,}
bench_contend_start
/usr/bin/python3 - "$tmp" "$reps" "$T" "$seqs" "$batch" "$stack" "$outdir" "$config" <<'PY'
import json, os, re, sqlite3, statistics, subprocess, sys, time
tmp, reps, T, seqs, B, stack, outdir, config = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8]
HS = os.path.abspath("build/float/headscope")
nb = seqs // B
common = ["--model", tmp + "/m", "--data", tmp + "/t.bin", "--batch", str(B), "--seq-len", str(T),
          "--max-batches", str(nb)]
work = {
    "ablate": lambda out: ["ablate"] + common + ["--method", "zero,mean", "--stack", str(stack),
                                                 "--db", out + ".db"],
    "capture": lambda out: ["capture"] + common + ["--out", out + ".h5", "--force"],
}
modes = [("1 process, 1 thread", None, 1), ("1 process, 2 threads", None, 2),
         ("mpirun -np 1", 1, 1), ("mpirun -np 2", 2, 1)]
MPI = ["mpirun", "--oversubscribe", "--bind-to", "core", "-np"]

def rows(db):
    c = sqlite3.connect(db)
    r = c.execute("select layer, head, metric, value, stderr, n from head_metrics order by 1,2,3").fetchall()
    c.close()
    return r

def maps(path):
    import h5py, numpy as np
    with h5py.File(path, "r") as f:
        names = []
        f.visit(names.append)
        return {n: f[n][()].tobytes() for n in names if isinstance(f[n], h5py.Dataset)}

def run(what, label, np_, threads, i):
    out = "%s/%s_%d_%d_%d" % (tmp, what, np_ or 0, threads, i)
    for ext in (".db", ".db-wal", ".db-shm", ".h5"):
        if os.path.exists(out + ext):
            os.remove(out + ext)
    cmd = work[what](out) + ["--threads", str(threads)]
    cmd = ([*MPI, str(np_), HS] if np_ else [HS]) + cmd
    env = dict(os.environ, HEADSCOPE_DIST_STATS="1")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit("mpi.sh: %s failed: %s" % (" ".join(cmd), p.stderr[-600:]))
    stats = [(int(a), float(w), int(b)) for a, w, b in
             re.findall(r"rank (\d+) of \d+: ([\d.]+) s waiting, (\d+) bytes", p.stderr)]
    return wall, out, sorted(stats)

results, lines = [], []
for what in ("ablate", "capture"):
    ref = None
    for label, np_, threads in modes:
        walls, stats = [], []
        for i in range(reps):
            wall, out, st = run(what, label, np_, threads, i)
            walls.append(wall)
            stats = st or stats
            got = rows(out + ".db") if what == "ablate" else maps(out + ".h5")
            if ref is None:
                ref = got
            elif got != ref:
                sys.exit("mpi.sh: %s on %s differs from one process" % (what, label))
        rec = {"work": what, "mode": label, "ranks": np_ or 0, "threads": threads,
               "median_s": statistics.median(walls), "runs": walls,
               "ranks_stats": [{"rank": a, "wait_s": w, "bytes": b} for a, w, b in stats]}
        if what == "capture":
            rec["file_bytes"] = os.path.getsize(out + ".h5")
        results.append(rec)

# the index writer: head_metrics rows per second, one transaction
db = tmp + "/w.db"
c = sqlite3.connect(db)
c.execute("PRAGMA journal_mode=WAL")
c.execute("create table head_metrics(run_id, layer, head, metric TEXT, value REAL, stderr REAL, n INTEGER, primary key(run_id, layer, head, metric))")
t0 = time.perf_counter()
with c:
    c.executemany("insert into head_metrics values(1,?,?,?,?,?,?)",
                  ((i // 64, i % 64, "loss_delta_zero", 0.1, 0.01, 4) for i in range(20000)))
rows_per_s = 20000 / (time.perf_counter() - t0)
c.close()

with open(outdir + "/mpi.jsonl", "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
    f.write(json.dumps({"index_rows_per_s": rows_per_s}) + "\n")

L, d, H, _ = (int(x) for x in config.split(","))
md = ["# Scale-out (bench/mpi.sh%s)" % (" --tiny" if outdir.endswith("tiny") else ""), "",
      "Model %d layers, d %d, %d heads, T %d; %d sequences (batch %d); ablate zero+mean, --stack %d; "
      "capture f32, every head. %s; median of %d run(s). Every MPI result equals the one-process "
      "result (rows, map datasets)." % (L, d, H, T, seqs, B, stack, os.uname().nodename, reps), "",
      "| work | run | median s | speed-up vs 1 thread | rank waits (s) | bytes per rank |",
      "|---|---|---|---|---|---|"]
base = {}
for r in results:
    if r["mode"] == "1 process, 1 thread":
        base[r["work"]] = r["median_s"]
    waits = ", ".join("%.2f" % s["wait_s"] for s in r["ranks_stats"]) or "-"
    byts = ", ".join("%d" % s["bytes"] for s in r["ranks_stats"]) or "-"
    md.append("| %s | %s | %.2f | %.2fx | %s | %s |" % (r["work"], r["mode"], r["median_s"],
              base[r["work"]] / r["median_s"], waits, byts))
# the model of N ranks
ab = {r["mode"]: r for r in results if r["work"] == "ablate"}
cp = {r["mode"]: r for r in results if r["work"] == "capture"}
t1 = ab["1 process, 1 thread"]["median_s"]
items = L * -(-2 * H // stack)
ab_rows = L * H * 2 + 1
cap_bytes = cp["mpirun -np 2"]["ranks_stats"][0]["bytes"] if cp["mpirun -np 2"]["ranks_stats"] else 0
cap_t1 = cp["1 process, 1 thread"]["median_s"]
file_bytes = cp["1 process, 1 thread"]["file_bytes"]
per_batch_bytes = file_bytes / nb
# rank 0 writes the whole file: its rate in one process (compute + write) bounds the write side;
# a rank computes a batch in cap_t1/nb seconds (an upper bound: that time includes the write)
write_rate = file_bytes / cap_t1
md += ["", "Index writer: %.0f head_metrics rows/s in one transaction (sqlite3, WAL)." % rows_per_s,
       "", "## Model of N ranks", "",
       "* ablate: %d items (layers x stacks of --stack %d) of ~%.3f s each on one core; the sweep "
       "records %d rows in all, %.4f s of index writing at the rate above, and rank 1 sends %d bytes "
       "in all (rank 0 receives N-1 times that). Neither bounds it: at 1 GB/s and 10 us per "
       "message a round's gather costs microseconds against seconds of compute, and the whole "
       "sweep's rows are written in milliseconds. What bounds it: items (N <= %d ranks do work) "
       "and the clean pass every rank repeats (one forward per batch, before the sweep)." %
       (items, stack, t1 / items, ab_rows, ab_rows / rows_per_s,
        (ab["mpirun -np 2"]["ranks_stats"][1]["bytes"] if len(ab["mpirun -np 2"]["ranks_stats"]) > 1 else 0),
        items),
       "* capture: every map passes through rank 0, which receives (N-1)/N of %.1f MB and writes all "
       "of it: %.1f MB per batch. One process captures and writes %.1f MB/s; the write side alone is "
       "faster than that (it overlaps the forward in one process), so with N ranks producing N x "
       "%.1f MB/s, rank 0 saturates when N x per-rank rate exceeds its receive-and-write rate W: "
       "N* = W / %.1f MB/s. With W = 1 GB/s (a local disk or 10 GbE) N* = %.0f; on this machine the "
       "2-rank run shows where it stands (table)." %
       (file_bytes / 1e6, per_batch_bytes / 1e6, write_rate / 1e6, write_rate / 1e6,
        write_rate / 1e6, 1e9 / write_rate)]
with open(outdir + "/mpi.md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
PY
bench_mark "$outdir/mpi.jsonl"
bench_md_note "$outdir/mpi.md"
