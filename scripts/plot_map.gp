# One head's attention map with token labels.
#
#   gnuplot -e "datafile='map.txt'; outfile='map.png'; plottitle='layer 0, head 1'" scripts/plot_map.gp
#
# datafile: a matrix whose first row holds the key labels and whose first
# column holds the query labels (gnuplot's "matrix rowheaders columnheaders"),
# then one row of attention probabilities per query. Labels contain no spaces.
# fmt: png, svg or pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("size")) size = 800
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size size, size dynamic font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size (size) / 96.0, (size) / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size size, size font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
set xlabel "key (attended position)"
set ylabel "query (attending position)"
set yrange [] reverse
set cbrange [0:1]
set cblabel "attention probability (fixed scale 0 .. 1)"
set palette defined (0 "white", 0.25 "#9ecae1", 0.6 "#3182bd", 1 "#08306b")
set xtics rotate by 90 font ",7" noenhanced
set ytics font ",7" noenhanced
set size ratio -1
plot datafile matrix rowheaders columnheaders with image notitle
