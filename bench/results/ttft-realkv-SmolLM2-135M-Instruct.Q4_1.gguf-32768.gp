set terminal pngcairo size 800,500
set output 'bench/results/ttft-realkv-SmolLM2-135M-Instruct.Q4_1.gguf-32768.png'
set title 'SmolLM2-135M-Instruct.Q4_1.gguf, 32768-token synthetic context, 8-token query' noenhanced
set xlabel 'remaining memory reached (%)'
set ylabel 'TTFT (s)'
set key outside right
set grid
set xrange [-5:80]
set yrange [0:*]
plot for [i=1:3] 'bench/results/ttft-realkv-SmolLM2-135M-Instruct.Q4_1.gguf-32768.dat' using (column(2*i)):(column(2*i+1)) with linespoints lw 2 title columnheader(2*i+1) noenhanced
