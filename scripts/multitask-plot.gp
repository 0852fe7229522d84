# multitask-plot.gp — the multitasking scenario's memory traces (paper Fig. 15):
# one panel per daemon, from scripts/pressure-scenario.sh --multitask.
# usage: gnuplot -e "dir='OUT'; out='file.png'; tags='mzcache os-paging-zram os-paging'" scripts/multitask-plot.gp
if (!exists("dir")) dir = "build/multitask"
if (!exists("out")) out = dir."/multitask.png"
if (!exists("tags")) tags = "mzcache os-paging-zram os-paging"
n = words(tags)
set terminal pngcairo size 1400, 330 * n font "sans,10"
set output out
set datafile separator ","
set key outside right top vertical
set grid
set ylabel "MiB"
set yrange [0:*]
set multiplot layout n, 1
do for [i = 1:n] {
  t = word(tags, i)
  f = dir."/".t."-trace.csv"
  r = dir."/".t."-rounds.csv"
  set title sprintf("%s: rounds of a hog growing and releasing in a memory cgroup; a question after each", t) noenhanced
  if (i == n) { set xlabel "time since round 1 (s)" } else { unset xlabel }
  plot f every ::1 using ($8 >= 0 ? $8 : 1/0):2 with lines lw 2 lc rgb "#1f77b4" title "daemon RSS", \
       f every ::1 using ($8 >= 0 ? $8 : 1/0):4 with lines lw 1.5 lc rgb "#d62728" title "hog RSS", \
       f every ::1 using ($8 >= 0 ? $8 : 1/0):3 with lines lw 1 lc rgb "#000000" title "cgroup usage", \
       f every ::1 using ($8 >= 0 ? $8 : 1/0):5 with lines dt 2 lw 1.5 lc rgb "#7f7f7f" title "limit", \
       r every ::1 using 2:($3 == 1 ? 10 : 1/0) with points pt 7 ps 1.4 lc rgb "#2ca02c" title "question: survived", \
       r every ::1 using 2:($3 == 0 ? 10 : 1/0) with points pt 2 ps 2 lw 3 lc rgb "#d62728" title "question: killed before it (OOM or stall), cold start"
}
unset multiplot
