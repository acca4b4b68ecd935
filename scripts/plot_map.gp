# One head's attention map with token labels on both axes.
#
#   gnuplot -e "datafile='map.txt'; xlabels='xlabels.txt'; ylabels='ylabels.txt'; \
#               keys=48; queries=48; qstart=0; outfile='map.png'; plottitle='layer 0, head 1'" \
#           scripts/plot_map.gp
#
# datafile: the map, one tab-separated row of attention probabilities per
# query (queries rows of keys values; the first row is query position
# qstart). xlabels / ylabels: "position<TAB>label" lines, the key and query
# positions to label (headscope writes at most 40 per axis, evenly spaced).
# Labels are data: gnuplot reads them as strings (a backslash written \\, a
# quote \042) and draws them without markup (noenhanced); they are never
# evaluated. fmt: png, svg or pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("size")) size = 800
if (!exists("qstart")) qstart = 0
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
set datafile separator "\t"
set datafile commentschars ""
set title plottitle noenhanced
set xlabel "key (attended position)"
set ylabel "query (attending position)"
set xrange [-0.5:keys - 0.5]
set yrange [qstart + queries - 0.5:qstart - 0.5]
set cbrange [0:1]
set cblabel "attention probability (fixed scale 0 .. 1)"
set palette defined (0 "white", 0.25 "#9ecae1", 0.6 "#3182bd", 1 "#08306b")
set xtics rotate by 90 right font ",8" noenhanced
set ytics font ",8" noenhanced
set size ratio -1
plot datafile matrix using 1:($2 + qstart):3 with image notitle, \
     xlabels using 1:(NaN):xticlabels(2) with lines notitle, \
     ylabels using (NaN):1:yticlabels(2) with lines notitle
