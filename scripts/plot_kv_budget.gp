# Needle accuracy and the haystack's loss against KV-cache bytes (report's
# long-context section): one point per retrieval run, as KV plans keep fewer
# heads full.
#
#   gnuplot -e "datafile='kv.txt'; outfile='kv.png'" scripts/plot_kv_budget.gp
#
# datafile: rows 'kv_mib accuracy accuracy_stderr loss'. fmt: png,
# svg or pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size 640, 460 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size 640 / 96.0, 460 / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size 640, 460 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel "KV cache at the longest length (MiB)"
set ylabel "needle accuracy, ± 2 stderr"
set y2label "haystack loss (nats)"
set yrange [-0.05 : 1.05]
set ytics nomirror
set y2tics
set grid ytics
set key bottom right
set offsets graph 0.05, graph 0.05, 0, 0
plot datafile using 1:2:(2 * $3) with yerrorbars pt 7 ps 1.3 lc rgb "#08519c" title "needle accuracy", \
     datafile using 1:4 axes x1y2 with points pt 5 ps 1.1 lc rgb "#cb181d" title "haystack loss"
