# Per-head score grid: one cell per (layer, head), value printed in the cell,
# on a colour scale fixed by what the metric means, not by the data.
#
#   gnuplot -e "datafile='scores.txt'; outfile='scores.png'; plottitle='induction'; lo=0; hi=1; diverging=0; cblab='attention probability, fixed scale 0 .. 1'" scripts/plot_scores.gp
#
# datafile: whitespace-separated rows "layer head value" (one per head).
# lo/hi: the colour range; diverging=1 draws it blue - white - red, white at
# (lo + hi) / 2 (the caller makes it 0), else white - blue from lo. cblab
# labels the colour box with the scale. nl/nh: the grid's shape (default:
# the data's). noheadfile (optional): rows "layer head" of cells that are no
# head of the model (a layer with fewer heads), drawn grey, saying "no head".
# absentfile (optional): rows "layer head" of other cells without a value
# (heads the run did not measure), drawn grey, saying "no value".
# controlfile/cnoheadfile/cabsentfile (optional): the same for the
# random-init control, drawn beside it on the same scale. fmt: png, svg or
# pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("cblab")) cblab = ""
if (!exists("diverging")) diverging = 0
width = exists("controlfile") ? 1300 : 720
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size width, 560 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size width / 96.0, 560 / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size width, 560 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel "head"
set ylabel "layer"
set xtics 1
set ytics 1
if (!exists("nl") || !exists("nh")) {
    stats datafile using 1:2 nooutput
    nl = STATS_max_x + 1
    nh = STATS_max_y + 1
}
if (!exists("lo") || !exists("hi")) {
    stats datafile using 3 nooutput
    lo = STATS_min < 0 ? STATS_min : 0
    hi = STATS_max > lo ? STATS_max : lo + 1
}
set cbrange [lo:hi]
set cblabel cblab noenhanced
if (diverging) {
    set palette defined (0 "#2166ac", 0.25 "#92c5de", 0.5 "#f7f7f7", 0.75 "#f4a582", 1 "#b2182b")
} else {
    set palette defined (0 "#f7fbff", 0.5 "#6baed6", 1 "#08306b")
}
# white text on the darkest cells only
dark(v) = diverging ? abs(v - (lo + hi) / 2) > 0.35 * (hi - lo) : v > lo + 0.6 * (hi - lo)
set xrange [-0.5 : nh - 0.5]
set yrange [nl - 0.5 : -0.5]
set style fill solid 1.0 noborder
set bmargin 5
# one panel: values, then grey cells for heads the layer lacks and cells without a value
panel(f, a, g) = sprintf('plot "%s" using 2:1:(0.5):(0.5):3 with boxxyerror lc palette notitle, '.\
    '"%s" using 2:1:(sprintf("%%.3g", $3)):(dark($3) ? 0xffffff : 0x000000) with labels '.\
    'font ",8" tc rgb variable notitle', f, f) .\
    (a eq "" ? "" : sprintf(', "%s" using 2:1:(0.5):(0.5) with boxxyerror fc rgb "#d9d9d9" notitle, '.\
    '"%s" using 2:1:("no value") with labels font ",8" tc rgb "#555555" notitle', a, a)) .\
    (g eq "" ? "" : sprintf(', "%s" using 2:1:(0.5):(0.5) with boxxyerror fc rgb "#ececec" notitle, '.\
    '"%s" using 2:1:("no head") with labels font ",8" tc rgb "#555555" notitle', g, g))
if (!exists("absentfile")) absentfile = ""
if (!exists("noheadfile")) noheadfile = ""
if (!exists("cabsentfile")) cabsentfile = ""
if (!exists("cnoheadfile")) cnoheadfile = ""
if (absentfile ne "" || cabsentfile ne "") {
    set label 1 "grey \"no value\": the run recorded none for that head" \
        at screen 0.01, screen 0.02 font ",8" tc rgb "#555555"
}
if (exists("controlfile")) {
    set multiplot layout 1, 2 title plottitle noenhanced
    set title "model" noenhanced
}
eval panel(datafile, absentfile, noheadfile)
if (exists("controlfile")) {
    set title "random-init control" noenhanced
    eval panel(controlfile, cabsentfile, cnoheadfile)
    unset multiplot
}
