# Curves from the index: x against y, one line per curve file.
#
#   gnuplot -e "datafile='curve.txt'; outfile='curve.png'; names='train_loss'; xlab='step'; ylab='loss'" scripts/plot_curve.gp
#
# datafile: one block per curve, blocks separated by two blank lines, rows
# "x y"; names: the curves' key entries, space-separated (quote one with
# spaces), in block order. minspan (optional): the y axis spans at least this
# much, centred on the data, so a change far smaller than it looks as small
# as it is (loss curves: 0.5 nats).
if (!exists("plottitle")) plottitle = ""
if (!exists("xlab")) xlab = "x"
if (!exists("ylab")) ylab = "y"
if (!exists("names")) names = ""
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size 800, 500 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size (800) / 96.0, (500) / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size 800, 500 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel xlab noenhanced
set ylabel ylab noenhanced
set grid
set key outside right noenhanced
stats datafile nooutput
if (exists("minspan")) {
    stats datafile using 2 name "Y" nooutput
    if (Y_max - Y_min < minspan) {
        set yrange [(Y_max + Y_min - minspan) / 2 : (Y_max + Y_min + minspan) / 2]
    }
}
# points only where they can be told apart (a few hundred per curve at most)
dense = STATS_records > 300 * STATS_blocks
plot for [i = 0:STATS_blocks - 1] datafile index i using 1:2 \
     with linespoints pt 7 ps (dense ? 0 : 0.4) lw (dense ? 0.6 : 1) title word(names, i + 1)
