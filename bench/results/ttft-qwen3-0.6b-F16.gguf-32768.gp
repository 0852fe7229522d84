set terminal pngcairo size 800,500
set output 'bench/results/ttft-qwen3-0.6b-F16.gguf-32768.png'
set title 'qwen3-0.6b-F16.gguf, 32768-token synthetic context, 8-token query'
set xlabel 'remaining memory (%)'
set ylabel 'TTFT (s)'
set key outside right
set grid
set xrange [-5:80]
set yrange [0:*]
plot for [i=2:4] 'bench/results/ttft-qwen3-0.6b-F16.gguf-32768.dat' using 1:i with linespoints lw 2 title columnheader(i)
