# pressure-plot.gp — plots scripts/pressure-scenario.sh's traces.
# usage: gnuplot -e "dir='OUT'; out='file.png'; control=1" scripts/pressure-plot.gp
if (!exists("dir")) dir = "build/pressure-scenario"
if (!exists("out")) out = dir."/pressure-scenario.png"
if (!exists("control")) control = 0
set terminal pngcairo size 1100, (control ? 900 : 480) font "sans,10"
set output out
set datafile separator ","
set key top left opaque box
set grid
set xlabel "time (s)"
set ylabel "MiB"
set y2label "mzcache remaining memory (%)"
set y2range [0:105]
set ytics nomirror
set y2tics 0, 20, 100
set yrange [0:*]
if (control) { set multiplot layout 2, 1 }
set title "mzcache serve in a memory cgroup while a hog grows (usage thresholds -> evict what the cgroup needs)"
plot dir."/mzcache-trace.csv" every ::1 using 1:3 with lines lw 2 lc rgb "#000000" title "cgroup usage", \
     "" every ::1 using 1:2 with lines lw 2 lc rgb "#1f77b4" title "mzcache RSS", \
     "" every ::1 using 1:4 with lines lw 2 lc rgb "#d62728" title "hog RSS", \
     "" every ::1 using 1:($5 < 4000 ? $5 : 1/0) with lines dt 2 lw 1.5 lc rgb "#7f7f7f" title "cgroup limit", \
     "" every ::1 using 1:($6 >= 0 ? $6 : 1/0) axes x1y2 with steps lw 1.5 lc rgb "#2ca02c" title "remaining % (right)", \
     dir."/mzcache-events.csv" every ::1 using 1:5 axes x1y2 with points pt 7 ps 1.2 lc rgb "#ff7f0e" title "eviction (pressure)"
if (control) {
  set title "control: the same server with --no-pressure (keeps everything)"
  unset y2label
  unset y2tics
  plot dir."/control-trace.csv" every ::1 using 1:3 with lines lw 2 lc rgb "#000000" title "cgroup usage", \
       "" every ::1 using 1:2 with lines lw 2 lc rgb "#1f77b4" title "server RSS", \
       "" every ::1 using 1:4 with lines lw 2 lc rgb "#d62728" title "hog RSS", \
       "" every ::1 using 1:($5 < 4000 ? $5 : 1/0) with lines dt 2 lw 1.5 lc rgb "#7f7f7f" title "cgroup limit"
  unset multiplot
}
