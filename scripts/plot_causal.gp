# The causal check of `headscope induction`: the increase of the second-half
# loss on r ++ r with the top-k induction heads gated off, beside each draw of
# k random other heads.
#
#   gnuplot -e "datafile='draws.txt'; outfile='causal.png'; targeted=1.2; targeted_se=0.05; toplabel='L1H0'" scripts/plot_causal.gp
#
# datafile: rows "draw increase", one per random draw. targeted/targeted_se:
# the targeted increase and its standard error over sequences; toplabel names
# the targeted heads. The random draws are drawn with their mean ± std. The
# y range holds every draw, mean ± std and targeted ± 2 stderr.
if (!exists("plottitle")) plottitle = ""
if (!exists("toplabel")) toplabel = "top-k"
if (!exists("fmt")) fmt = outfile[strlen(outfile) - 2:] eq "svg" ? "svg" : \
                          outfile[strlen(outfile) - 2:] eq "pdf" ? "pdf" : "png"
set encoding utf8
if (fmt eq "svg") {
    set terminal svg size 720, 500 font "sans,10"
} else {
    if (fmt eq "pdf") {
        set terminal pdfcairo size (720) / 96.0, (500) / 96.0 font "sans,10"
    } else {
        set terminal pngcairo size 720, 500 font "sans,10"
    }
}
set output outfile
set title plottitle noenhanced
stats datafile using 2 nooutput
mean = STATS_mean
sd = STATS_stddev * sqrt(STATS_records / (STATS_records - 1.0))  # n-1, as recorded
ndraws = STATS_records
lo = STATS_min < 0 ? STATS_min : 0
hi = STATS_max > 0 ? STATS_max : 0
lo = mean - sd < lo ? mean - sd : lo
hi = mean + sd > hi ? mean + sd : hi
lo = targeted - 2 * targeted_se < lo ? targeted - 2 * targeted_se : lo
hi = targeted + 2 * targeted_se > hi ? targeted + 2 * targeted_se : hi
set yrange [lo - 0.05 * (hi - lo + 1e-9) : hi + 0.12 * (hi - lo + 1e-9)]
set xrange [0.4 : 2.6]
set xtics (sprintf("%d random draws of other heads", ndraws) 1, \
           "top induction heads: " . toplabel 2) noenhanced
set ylabel "increase of second-half loss (nats)"
set grid ytics
set key below horizontal noenhanced
set arrow from 0.4, 0 to 2.6, 0 nohead lc rgb "#888888"
set label sprintf("%+.3f", targeted) at 2.12, targeted left
set label sprintf("%+.3f ± %.3f", mean, sd) at 1.25, mean left
plot datafile using (1 + 0.16 * (($1 / (ndraws > 1 ? ndraws - 1 : 1)) - 0.5)):2 with points \
        pt 7 ps 0.7 lc rgb "#9ecae1" title "one random draw", \
     '+' using (1):(mean):(sd) every ::0::0 with yerrorbars pt 5 ps 1.2 lw 2 lc rgb "#3182bd" \
        title "random: mean ± std", \
     '+' using (2):(targeted):(2 * targeted_se) every ::0::0 with yerrorbars pt 5 ps 1.4 lw 2 \
        lc rgb "#de2d26" title "targeted ± 2 stderr"
