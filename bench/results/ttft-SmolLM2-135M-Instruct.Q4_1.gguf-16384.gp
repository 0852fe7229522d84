set terminal pngcairo size 800,500
set output 'bench/results/ttft-SmolLM2-135M-Instruct.Q4_1.gguf-16384.png'
set title 'SmolLM2-135M-Instruct.Q4_1.gguf, 16384-token synthetic context, 8-token query'
set xlabel 'remaining memory (%)'
set ylabel 'TTFT (s)'
set key outside right
set grid
set xrange [-5:80]
set yrange [0:*]
plot for [i=2:4] 'bench/results/ttft-SmolLM2-135M-Instruct.Q4_1.gguf-16384.dat' using 1:i with linespoints lw 2 title columnheader(i)
