# The logit lens (headscope logit-lens, SPEC §11): the residual stream
# entering each layer decoded through the final norm and the unembedding;
# the loss (left axis) and, on prompts, the logit difference (right axis)
# against the layer, with +- 2 standard errors. The last point is the final
# residual, i.e. the model's own output.
#
#   gnuplot -e "datafile='lens.txt'; outfile='lens.png'; nl=3; withld=1" scripts/plot_lens.gp
#
# datafile: rows "layer loss loss_stderr ld ld_stderr" (ld columns NaN on a
# token shard); nl: entries (layers + 1); withld: draw the logit difference;
# ylab: the loss axis's label. fmt: png, svg or pdf (default: the suffix of
# outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("withld")) withld = 0
if (!exists("ylab")) ylab = "loss (nats)"
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size 800, 500 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size 800 / 96.0, 500 / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size 800, 500 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel "residual stream entering layer (last: after the final layer)"
set ylabel ylab noenhanced
set grid
set key below noenhanced
set xrange [-0.5 : nl - 0.5]
set xtics ()
do for [i = 0:nl - 2] { set xtics add (sprintf("%d", i) i) }
set xtics add ("final" nl - 1)
if (withld) {
    set y2label "logit[answer] − logit[wrong]"
    set y2tics
    set ytics nomirror
    plot datafile using 1:2:(2 * $3) with yerrorlines pt 7 lc rgb "#08519c" title "loss", \
         datafile using 1:4:(2 * $5) axes x1y2 with yerrorlines pt 5 lc rgb "#b2182b" \
            title "logit difference"
} else {
    plot datafile using 1:2:(2 * $3) with yerrorlines pt 7 lc rgb "#08519c" title "loss ± 2 stderr"
}
