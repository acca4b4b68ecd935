# Composition scores (headscope composition, SPEC §11): one (heads x heads)
# matrix per kind, the earlier head A on the y axis and the later head B on
# the x axis, on the fixed scale 0 .. 1, beside the same scores of a
# randomly initialised model of the same configuration when there are any.
# Pairs that do not compose (B not in a later layer than A) are grey.
#
#   gnuplot -e "datafile='comp.txt'; labelfile='heads.txt'; outfile='q.png'; n=8" scripts/plot_composition.gp
#
# datafile: rows "i j value" (i: A's index, j: B's, heads numbered layer by
# layer); controlfile (optional): the same for the control; labelfile:
# tab-separated rows "index label" (LlHh); n: heads. ctitle: the control
# panel's title. fmt: png, svg or pdf (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("ctitle")) ctitle = "random-init control"
size = 320 + 18 * n
size = size > 1400 ? 1400 : size
width = exists("controlfile") ? 2 * size + 160 : size + 160
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size width, size font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size width / 96.0, size / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size width, size font "sans,10"
    }
}
set output outfile
set xrange [-0.5 : n - 0.5]
set yrange [n - 0.5 : -0.5]
set cbrange [0 : 1]
set cblabel "composition score, fixed scale 0 .. 1"
set palette defined (0 "#f7fbff", 0.5 "#6baed6", 1 "#08306b")
set object 1 rectangle from graph 0, graph 0 to graph 1, graph 1 behind fc rgb "#e5e5e5" fs solid
set xlabel "later head B (reads)"
set ylabel "earlier head A (writes)"
set xtics rotate by 90 right noenhanced font ",8"
set ytics noenhanced font ",8"
set style fill solid 1.0 noborder
set size ratio -1
panel(f) = sprintf('plot "%s" using 2:1:(0.5):(0.5):3 with boxxyerror lc palette notitle, '.\
    '"%s" using 1:(NaN):xticlabels(2) notitle, "%s" using (NaN):1:yticlabels(2) notitle', \
    f, labelfile, labelfile)
set datafile separator whitespace
if (exists("controlfile")) {
    set multiplot layout 1, 2 title plottitle noenhanced
    set title "model" noenhanced
} else {
    set title plottitle noenhanced
}
eval panel(datafile)
if (exists("controlfile")) {
    set title ctitle noenhanced
    eval panel(controlfile)
    unset multiplot
}
