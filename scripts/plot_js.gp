# The head-to-head Jensen-Shannon distance matrix of `headscope patterns
# --js-out` as a heatmap with head labels, on the fixed scale 0 .. sqrt(ln 2)
# (0: identical attention distributions; sqrt(ln 2) ~ 0.83: disjoint ones).
#
#   gnuplot -e "datafile='js.txt'; outfile='js.png'; n=12" scripts/plot_js.gp
#
# datafile: a matrix whose first row holds the head labels (after a corner word)
# and whose first column holds them again (gnuplot's "matrix rowheaders
# columnheaders"). n: the number of heads. fmt: png, svg or pdf (default:
# the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("n")) n = 8
size = 360 + 22 * n
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size size + 120, size font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size (size + 120) / 96.0, size / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size size + 120, size font "sans,10"
    }
}
set output outfile
set title "Jensen-Shannon distance between heads' attention\n" . plottitle noenhanced
set yrange [] reverse
set cbrange [0:sqrt(log(2))]
set cblabel "Jensen-Shannon distance (fixed scale 0 .. √ln 2 ≈ 0.83)"
set palette defined (0 "white", 0.25 "#c7e9c0", 0.6 "#41ab5d", 1 "#00441b")
set xtics rotate by 90 right font ",8" noenhanced
set bmargin 6
set ytics font ",8" noenhanced
set size ratio -1
plot datafile matrix rowheaders columnheaders with image notitle
