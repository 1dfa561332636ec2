# Convergence plot: run from the data directory (run.sh does): gnuplot plot.gp
set terminal pngcairo size 1400,1000 font ",11"
set output "convergence.png"
set multiplot layout 2,2 title "cliffguard tune: best GFLOP/s found vs trials (median over seeds)"
set xlabel "trials measured"
set ylabel "best GFLOP/s so far"
set key bottom right
set grid
files = system("ls curves_*.dat")
do for [f in files] {
  t = system("head -1 ".f." | sed 's/^# //; s/:.*//'")
  set title t
  plot f using 1:2 with lines lw 2 title "xgb", \
       f using 1:3 with lines lw 2 title "random", \
       f using 1:4 with lines lw 2 title "ga", \
       f using 1:5 with lines lw 2 title "grid"
}
unset multiplot
