# Layer x head grid of attention maps (small multiples) with one fixed colour
# range [0, 1] (attention probability), so panels compare directly.
#
#   gnuplot -e "dir='maps'; nl=2; nh=4; outfile='grid.png'; labels='L0H0 L0H1 nohead nohead L1H0 L1H1 L1H2 L1H3'" scripts/plot_grid.gp
#
# dir/L_H.txt holds the map of grid row L (captured layer) and column H (head)
# as a plain matrix (rows = queries, columns = keys). labels: one word per
# panel, row by row: the panel's title ("L1H2"), or "nohead" (the layer has
# no such head) or "notcaptured" (the capture left it out), drawn as a grey
# panel saying so, without a data file. fmt: png, svg or pdf (default: the
# suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("panel")) panel = 160
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size nh * panel + 80, nl * panel + 80 font "sans,9"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size (nh * panel + 80) / 96.0, (nl * panel + 80) / 96.0 font "sans,9"
    } else {
        set terminal pngcairo size nh * panel + 80, nl * panel + 80 font "sans,9"
    }
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
        w = word(labels, l * nh + h + 1)
        if (w eq "nohead" || w eq "notcaptured") {
            set title ""
            set object 1 rect from graph 0, 0 to graph 1, 1 fc rgb "#e6e6e6" fillstyle solid noborder behind
            set label 1 (w eq "nohead" ? "no head" : "not captured") at graph 0.5, 0.5 center \
                tc rgb "#555555" font ",8"
            plot [-0.5:1.5] [1.5:-0.5] NaN notitle
            unset object 1
            unset label 1
        } else {
            set title w offset 0, -0.8 font ",8" noenhanced
            plot sprintf("%s/%d_%d.txt", dir, l, h) matrix with image notitle
        }
    }
}
unset multiplot
