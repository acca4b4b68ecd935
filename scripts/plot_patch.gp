# Activation patching of the residual stream (headscope patch, SPEC §11): a
# layer x position heatmap of the patched fraction of the logit difference,
# the x axis labelled with the prompt's tokens.
#
#   gnuplot -e "datafile='cells.txt'; labelfile='labels.txt'; outfile='patch.png'; nl=4; np=9; hi=1; cblab='...'" scripts/plot_patch.gp
#
# datafile: tab-separated rows "layer position value" of the cells with a
# value; absentfile (optional): rows "layer position" of cells without one,
# drawn grey. labelfile: tab-separated rows "position label" (the label is
# data: a token's text, shown as it is, never read as a command). nl/np: the
# grid's shape. xlab: the x axis's label. hi: the colour range is -hi .. +hi, white at 0 (0: the
# corrupt run's logit difference, 1: the clean run's). fmt: png, svg or pdf
# (default: the suffix of outfile).
if (!exists("plottitle")) plottitle = ""
if (!exists("cblab")) cblab = ""
if (!exists("hi")) hi = 1
if (!exists("xlab")) xlab = "position"
if (!exists("absentfile")) absentfile = ""
width = 360 + 46 * np
width = width < 720 ? 720 : width
height = 260 + 34 * nl
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size width, height font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size width / 96.0, height / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size width, height font "sans,10"
    }
}
set output outfile
set datafile separator "\t"
set title plottitle noenhanced
set xlabel xlab noenhanced
set ylabel "layer"
set ytics 1
set xtics rotate by 45 right noenhanced font ",9"
set xrange [-0.5 : np - 0.5]
set yrange [nl - 0.5 : -0.5]
set cbrange [-hi : hi]
set cblabel cblab noenhanced
set palette defined (0 "#2166ac", 0.25 "#92c5de", 0.5 "#f7f7f7", 0.75 "#f4a582", 1 "#b2182b")
set style fill solid 1.0 noborder
set bmargin 7
dark(v) = abs(v) > 0.7 * hi
cmd = sprintf('plot "%s" using 2:1:(0.5):(0.5):3 with boxxyerror lc palette notitle, '.\
    '"%s" using 2:1:(sprintf("%%.2f", $3)):(dark($3) ? 0xffffff : 0x000000) with labels '.\
    'font ",8" tc rgb variable notitle, "%s" using 1:(NaN):xticlabels(2) notitle', \
    datafile, datafile, labelfile) . \
    (absentfile eq "" ? "" : sprintf(', "%s" using 2:1:(0.5):(0.5) with boxxyerror '.\
    'fc rgb "#d9d9d9" notitle', absentfile))
eval cmd
