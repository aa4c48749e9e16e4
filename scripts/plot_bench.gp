# Plots of `seqkv bench` (run by the command itself; by hand:
#   gnuplot -e "outdir='bench/results/report'; ncases=N" scripts/plot_bench.gp)
# Reads the plot data the command writes in outdir:
#   plot_bits.tsv     representation x (model/text) bits per position (columns 2..ncases+1)
#   plot_c5.tsv       one block per model/text: L, bucket mean, running mean, TQ-3.5/running, tq35, f16
#   plot_restore.tsv  one block per model/text: bits per position, restore tokens/s, representation
# Writes bits.png, corollary5.png, restore.png.
if (!exists("outdir")) outdir = "bench/results/report"
if (!exists("ncases")) ncases = 1
set terminal pngcairo size 1200,700 font ",10" noenhanced
set datafile separator "\t"
set datafile missing "nan"
set key outside right top

# 1. bits per position by representation, log scale, one bar per model/text
set output outdir."/bits.png"
set title "Bits per KV-cache position by representation (log scale; all metadata counted)"
set logscale y
set ylabel "bits per token position"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -40 scale 0
set grid ytics
plot for [i=2:ncases+1] outdir."/plot_bits.tsv" using i:xtic(1) title columnheader(i)
unset style data
set style data linespoints
set xtics norotate
unset grid

# 2. Corollary 5: bits per position vs context length, and the ratio over TQ-3.5
set output outdir."/corollary5.png"
set multiplot layout 1,2 title "Corollary 5, measured: model-coded bits per position vs context length"
unset logscale
set logscale x 2
set title "per-position cost (points: bucket mean; dashed: running mean)"
set xlabel "context length L (positions)"
set ylabel "bits per position (surprisal)"
set key inside top right
plot for [i=0:ncases-1] outdir."/plot_c5.tsv" index i using 1:2 with linespoints lc (i+1) pt 7 ps 0.6 title columnheader(1), \
     for [i=0:ncases-1] outdir."/plot_c5.tsv" index i using 1:3 with lines lc (i+1) dt 2 lw 2 notitle
set title "TQ-3.5 bits / model-coded bits (running mean); per-vector cost is constant"
set ylabel "ratio (x smaller than TurboQuant-3.5)"
set logscale y
plot for [i=0:ncases-1] outdir."/plot_c5.tsv" index i using 1:4 with linespoints pt 7 ps 0.6 title columnheader(1)
unset multiplot

# 3. restore speed vs size
set output outdir."/restore.png"
set title "Restore speed vs size (every representation of the same KV cache)"
set logscale xy
set xlabel "bits per token position (log)"
set ylabel "restore tokens/s (log)"
set key outside right top
plot for [i=0:ncases-1] outdir."/plot_restore.tsv" index i using 1:2 with points pt (i%6)+5 ps 1.3 title columnheader(1), \
     outdir."/plot_restore.tsv" index 0 using 1:2:3 with labels left offset 0.8,0.4 font ",8" notitle
