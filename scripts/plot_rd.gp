# Rate-distortion plot of `seqkv kv-rd` (bench/results/rd.md) and of `seqkv bench` (rd.csv -> rd.png):
#   gnuplot -e "csv='bench/results/rd.csv'; out='bench/results/rd.png'" scripts/plot_rd.gp
# One panel per model: KL(p_exact || p_restored) against stored bits per position, both log
# scale; per-vector schemes as labelled points, each predictive variant and the top-k
# predictor as a curve over its steps.
if (!exists("csv")) csv = "bench/results/rd.csv"
if (!exists("out")) out = "bench/results/rd.png"
set terminal pngcairo size 1400,620 font ",10" noenhanced
set output out
set datafile separator ","
set logscale xy
set grid
set key top right font ",8"
set xlabel "stored bits per position (KV of the restored prefix, all side information)"
set ylabel "KL nats/token on the continuation"
is(m, pre) = strcol(1) eq m && strcol(2)[1:strlen(pre)] eq pre
pv(m) = strcol(1) eq m && strcol(3) eq "pervector"
set multiplot layout 1,2
do for [m in "kjv-4m stories260K"] {
    set title m." (held-out text; prefix restored, continuation scored)"
    plot csv using (pv(m) ? $4 : NaN):6 with points pt 7 ps 1.2 lc rgb "black" title "per-vector (q8_0 q4_0 tq2..4 TQ-3.5 tq3p +window)", \
         csv using (pv(m) ? $4 : NaN):6:2 with labels offset 0.8,0.5 left font ",7" notitle, \
         csv using (is(m, "none@") ? $4 : NaN):6 with linespoints lw 1.5 title "none (ECSQ + adaptive range coder)", \
         csv using (is(m, "lpc2@") ? $4 : NaN):6 with linespoints lw 1.5 title "lpc2", \
         csv using (is(m, "tok@") ? $4 : NaN):6 with linespoints lw 2 title "tok", \
         csv using (is(m, "tok+ramp@") ? $4 : NaN):6 with linespoints lw 2 title "tok+ramp", \
         csv using (is(m, "tok+ramp+rot@") ? $4 : NaN):6 with linespoints lw 1.5 dt 4 title "tok+ramp+rot (TurboQuant rotation)", \
         csv using (is(m, "tok+ramp+layer0@") ? $4 : NaN):6 with linespoints lw 2 dt 2 title "tok+ramp+layer0 (needs 1 layer of weights)", \
         csv using (is(m, "topk4@") ? $4 : NaN):6 with linespoints lw 2 dt 3 title "paper's top-4 predictor (needs the model)"
}
unset multiplot
