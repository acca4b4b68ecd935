# Per-head score grid: one cell per (layer, head), value printed in the cell.
#
#   gnuplot -e "datafile='scores.txt'; outfile='scores.png'; plottitle='induction'; lo=0; hi=1" scripts/plot_scores.gp
#
# datafile: whitespace-separated rows "layer head value" (one per head); heads
# a layer lacks are simply absent. lo/hi fix the colour range (default: data).
if (!exists("plottitle")) plottitle = ""
if (strstrt(outfile, ".svg") == strlen(outfile) - 3) {
    set terminal svg size 720, 560 font "sans,10"
} else {
    set terminal pngcairo size 720, 560 font "sans,10"
}
set output outfile
set title plottitle noenhanced
set xlabel "head"
set ylabel "layer"
set yrange [] reverse
set xtics 1
set ytics 1
if (exists("lo") && exists("hi")) { set cbrange [lo:hi] }
set palette defined (0 "#f7fbff", 0.5 "#6baed6", 1 "#08306b")
plot datafile using 2:1:3 with image notitle, \
     datafile using 2:1:(sprintf("%.2f", $3)) with labels font ",8" notitle
