set terminal pngcairo size 800,500
set output 'bench/results/ttft-exaone4-1.2b-F16.gguf-8192.png'
set title 'exaone4-1.2b-F16.gguf, 8192-token synthetic context, 8-token query'
set xlabel 'remaining memory (%)'
set ylabel 'TTFT (s)'
set key outside right
set grid
set xrange [-5:80]
set yrange [0:*]
plot for [i=2:5] 'bench/results/ttft-exaone4-1.2b-F16.gguf-8192.dat' using 1:i with linespoints lw 2 title columnheader(i)
