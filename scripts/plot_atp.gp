# Attribution patching against exact patching (headscope atp --verify, SPEC
# §15): each verified head as a point (exact value, first-order estimate)
# with its label, and the diagonal where the estimate is exact.
#
#   gnuplot -e "datafile='atp.txt'; outfile='atp.png'; xlab='patch_z'; ylab='atp_z'" scripts/plot_atp.gp
#
# datafile: rows "exact estimate label" (the label quoted, data, never read
# as a command). fmt: png, svg or pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("xlab")) xlab = "exact"
if (!exists("ylab")) ylab = "estimate"
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size 720, 640 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size 720 / 96.0, 640 / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size 720, 640 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel xlab noenhanced
set ylabel ylab noenhanced
set grid
set key top left noenhanced
stats datafile using 1:2 nooutput
lo = STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y
hi = STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y
pad = (hi - lo) * 0.08 + 1e-9
set xrange [lo - pad : hi + pad]
set yrange [lo - pad : hi + pad]
set size ratio -1
plot x with lines lc rgb "#999999" dt 2 title "estimate = exact", \
     datafile using 1:2 with points pt 7 ps 0.9 lc rgb "#2166ac" title "heads", \
     datafile using 1:2:3 with labels offset 0.8, 0.5 font ",8" noenhanced notitle
