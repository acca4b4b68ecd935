# Per-head score grid: one cell per (layer, head), value printed in the cell.
#
#   gnuplot -e "datafile='scores.txt'; outfile='scores.png'; plottitle='induction'; lo=0; hi=1" scripts/plot_scores.gp
#
# datafile: whitespace-separated rows "layer head value" (one per head); heads
# a layer lacks are simply absent. lo/hi fix the colour range (default: data).
# controlfile (optional): the same for the random-init control, drawn beside
# the score with the same colour range.
if (!exists("plottitle")) plottitle = ""
width = exists("controlfile") ? 1300 : 720
if (strstrt(outfile, ".svg") == strlen(outfile) - 3) {
    set terminal svg size width, 560 font "sans,10"
} else {
    set terminal pngcairo size width, 560 font "sans,10"
}
set output outfile
set title plottitle noenhanced
set xlabel "head"
set ylabel "layer"
set xtics 1
set ytics 1
stats datafile using 1:2 nooutput
l0 = STATS_min_x; l1 = STATS_max_x; h0 = STATS_min_y; h1 = STATS_max_y
stats datafile using 3 nooutput
mid = exists("lo") && exists("hi") ? (lo + hi) / 2 : (STATS_min + STATS_max) / 2
if (exists("lo") && exists("hi")) { set cbrange [lo:hi] }
set palette defined (0 "#f7fbff", 0.5 "#6baed6", 1 "#08306b")
if (exists("controlfile")) {
    # one colour range for both panels
    stats datafile using 3 nooutput
    lo0 = STATS_min; hi0 = STATS_max
    stats controlfile using 3 nooutput
    if (!exists("lo")) { lo = (STATS_min < lo0 ? STATS_min : lo0) }
    if (!exists("hi")) { hi = (STATS_max > hi0 ? STATS_max : hi0) }
    set cbrange [lo:hi]
    mid = (lo + hi) / 2
    set xrange [h0 - 0.5 : h1 + 0.5]
    set yrange [l1 + 0.5 : l0 - 0.5]
    set multiplot layout 1, 2 title plottitle noenhanced
    set title "model" noenhanced
}
set xrange [h0 - 0.5 : h1 + 0.5]
set yrange [l1 + 0.5 : l0 - 0.5]
# one filled box per head: layers may hold different numbers of heads
set style fill solid 1.0 noborder
plot datafile using 2:1:(0.5):(0.5):3 with boxxyerror lc palette notitle, \
     datafile using 2:1:(sprintf("%.2f", $3)):($3 > mid ? 0xffffff : 0x000000) with labels \
        font ",8" tc rgb variable notitle
if (exists("controlfile")) {
    set title "random-init control" noenhanced
    plot controlfile using 2:1:(0.5):(0.5):3 with boxxyerror lc palette notitle, \
         controlfile using 2:1:(sprintf("%.2f", $3)):($3 > mid ? 0xffffff : 0x000000) \
            with labels font ",8" tc rgb variable notitle
    unset multiplot
}
