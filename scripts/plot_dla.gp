# Direct logit attribution (headscope dla, SPEC §11): each head's, each MLP's
# and each model-wide part's mean contribution to the logit difference, one
# bar each, sorted, with +- 2 standard errors over prompts.
#
#   gnuplot -e "datafile='dla.txt'; outfile='dla.png'; n=24; ld=2.1" scripts/plot_dla.gp
#
# datafile: tab-separated rows "rank label value stderr kind" in bar order
# (kind 0: a head, 1: an MLP, 2: a model-wide part); the label is data, never
# read as a command. n: the number of bars. ld: the mean clean logit
# difference the parts sum to. fmt: png, svg or pdf (default: the suffix of
# outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("ld")) ld = NaN
width = 420 + 26 * n
width = width < 720 ? 720 : width
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size width, 520 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size width / 96.0, 520 / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size width, 520 font "sans,10"
    }
}
set output outfile
set datafile separator "\t"
set title plottitle noenhanced
set ylabel "contribution to logit[answer] − logit[wrong]"
set xtics rotate by 60 right noenhanced font ",9"
set xrange [-0.7 : n - 0.3]
set grid ytics
set key top right noenhanced
set style fill solid 0.85 noborder
set boxwidth 0.7
set arrow from -0.7, 0 to n - 0.3, 0 nohead lc rgb "#555555"
set bmargin 8
colour(v, k) = k == 2 ? 0x999999 : (v >= 0 ? 0xb2182b : 0x2166ac)
plot datafile using 1:3:(colour($3, $5)):xticlabels(2) with boxes lc rgb variable \
        title sprintf("parts (sum: the logit difference %.3f)", ld), \
     datafile using 1:3:(2 * $4) with yerrorbars pt 0 ps 0 lc rgb "#222222" title "± 2 standard errors"
