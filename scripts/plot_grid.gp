# Layer x head grid of attention maps (small multiples) with one fixed colour
# range [0, 1], so panels compare directly.
#
#   gnuplot -e "dir='maps'; nl=2; nh=4; outfile='grid.png'; plottitle='seq 0'" scripts/plot_grid.gp
#
# dir/L_H.txt holds the map of grid row L (layer) and column H (head) as a plain
# matrix (rows = queries, columns = keys); dir/labels.txt has one line per row:
# the panel titles "layer L" and dir/heads.txt one line per column "head H".
if (!exists("plottitle")) plottitle = ""
if (!exists("panel")) panel = 160
if (strstrt(outfile, ".svg") == strlen(outfile) - 3) {
    set terminal svg size nh * panel + 80, nl * panel + 80 font "sans,9"
} else {
    set terminal pngcairo size nh * panel + 80, nl * panel + 80 font "sans,9"
}
set output outfile
set cbrange [0:1]
set palette defined (0 "white", 0.25 "#9ecae1", 0.6 "#3182bd", 1 "#08306b")
unset colorbox
unset xtics
unset ytics
set yrange [] reverse
set size ratio -1
set multiplot layout nl, nh title plottitle noenhanced margins 0.04, 0.98, 0.02, 0.92 spacing 0.01
do for [l = 0:nl - 1] {
    do for [h = 0:nh - 1] {
        set title sprintf("L%d H%d", l, h) offset 0, -0.8 font ",8"
        plot sprintf("%s/%d_%d.txt", dir, l, h) matrix with image notitle
    }
}
unset multiplot
