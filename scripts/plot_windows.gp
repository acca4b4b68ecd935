# The local/global experiment (headscope experiment windows): the validation
# loss of the same heads all global, half local and all local, +- 2 standard
# errors over seeds; each arm's label carries its KV-cache bytes per token
# and forward latency.
#
#   gnuplot -e "datafile='w.txt'; outfile='w.png'" scripts/plot_windows.gp
#
# datafile: rows 'arm_index loss loss_stderr "label"'. fmt: png, svg or pdf
# (default: the suffix of outfile).
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
set ylabel "validation loss (nats), ± 2 stderr over seeds"
set grid ytics
set key off
set xrange [-0.6 : 2.6]
set offsets 0, 0, graph 0.1, graph 0.1
set bmargin 5
plot datafile using 1:2:(2 * $3):xticlabels(4) with yerrorbars pt 7 ps 1.5 lc rgb "#08519c"
