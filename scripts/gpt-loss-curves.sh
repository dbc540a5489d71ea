#!/usr/bin/env bash
# Trains the GPT example (examples/gpt) eight ways for STEPS steps and plots
# the losses into docs/images/gpt-loss.png:
#   Muon through libdmuon on 4 ranks (HSDP 2x2) and its single-process
#   libtorch reference, AdamW (every param) through libdmuon on 4 ranks and
#   torch::optim::AdamW alone; and through libdmuon on 2x2 the other matrix
#   rules (NorMuon, SOAP, Shampoo) and Muon with q, k and v orthogonalized
#   per head (--ns-split). All see the same global batches.
# Each run leaves RUNS/<name>/loss.csv (step,train_loss,val_loss,seconds).
#
#   scripts/gpt-loss-curves.sh            # after cmake --build build --target dmuon-gpt
#   STEPS=100 RUNS=/tmp/runs PLOT=/tmp/gpt-loss.png scripts/gpt-loss-curves.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
STEPS=${STEPS:-300}
RUNS=${RUNS:-$BUILD/gpt-runs}
PLOT=${PLOT:-docs/images/gpt-loss.png}
bin=$BUILD/bin/dmuon-gpt
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build $BUILD --target dmuon-gpt)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "error: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
common=(--steps "$STEPS" --eval-every 25)

run() { # name ranks flags...
  local name=$1 ranks=$2
  shift 2
  echo "== $name"
  mpirun --oversubscribe -n "$ranks" "$bin" "${common[@]}" --work "$RUNS/$name-work" \
    --out "$RUNS/$name" "$@" | tail -n 2
}
run muon-dmuon-2x2 4 --mesh 2x2 --optimizer muon
run muon-reference 1 --backend reference --optimizer muon
run adamw-dmuon-2x2 4 --mesh 2x2 --optimizer adamw
run adamw-reference 1 --backend reference --optimizer adamw
run normuon-dmuon-2x2 4 --mesh 2x2 --optimizer normuon
run soap-dmuon-2x2 4 --mesh 2x2 --optimizer soap
run shampoo-dmuon-2x2 4 --mesh 2x2 --optimizer shampoo
run muon-heads-dmuon-2x2 4 --mesh 2x2 --optimizer muon '--dmuonc-arg=--ns-split=\.(q|k|v)\.weight$=4'

mkdir -p "$(dirname "$PLOT")"
# For the plot: the train loss as a 10-step running mean (one batch is only
# 1024 tokens, so single steps are noisy), and the validation rows alone.
names="muon-dmuon-2x2 muon-reference adamw-dmuon-2x2 adamw-reference normuon-dmuon-2x2
       soap-dmuon-2x2 shampoo-dmuon-2x2 muon-heads-dmuon-2x2"
for name in $names; do
  awk -F, 'NR > 1 && $2 != "" { w[NR % 10] = $2; n = n < 10 ? n + 1 : 10; s = 0
                                for (k in w) s += w[k]; print $1, s / n }' \
    "$RUNS/$name/loss.csv" > "$RUNS/$name/train-mean10.dat"
  awk -F, 'NR > 1 && $3 != "" { print $1, $3 }' "$RUNS/$name/loss.csv" > "$RUNS/$name/val.dat"
done
gnuplot <<EOF
set terminal pngcairo size 1400,640 font "DejaVu Sans,11"
set output "$PLOT"
set key top right font ",9"
set grid
set xlabel "step"
set ylabel "cross-entropy (nats/byte)"
set yrange [*:4]
set multiplot layout 1,2 title "examples/gpt: byte-level GPT (4 blocks, d=128) on the fortunes text, global batch 16 x 64 tokens"
set title "training loss (10-step running mean)"
plot "$RUNS/muon-dmuon-2x2/train-mean10.dat" with lines lw 4 lc rgb "#1f77b4" title "Muon, libdmuon (4 ranks, 2x2)", \
     "$RUNS/muon-reference/train-mean10.dat" with lines lw 1.5 dt 2 lc rgb "black" title "Muon, single-process libtorch", \
     "$RUNS/adamw-dmuon-2x2/train-mean10.dat" with lines lw 4 lc rgb "#ff7f0e" title "AdamW, libdmuon (4 ranks, 2x2)", \
     "$RUNS/adamw-reference/train-mean10.dat" with lines lw 1.5 dt 2 lc rgb "#444444" title "torch::optim::AdamW, single process", \
     "$RUNS/normuon-dmuon-2x2/train-mean10.dat" with lines lw 2 lc rgb "#2ca02c" title "NorMuon, libdmuon (2x2)", \
     "$RUNS/soap-dmuon-2x2/train-mean10.dat" with lines lw 2 lc rgb "#d62728" title "SOAP, libdmuon (2x2)", \
     "$RUNS/shampoo-dmuon-2x2/train-mean10.dat" with lines lw 2 lc rgb "#9467bd" title "Shampoo, libdmuon (2x2)", \
     "$RUNS/muon-heads-dmuon-2x2/train-mean10.dat" with lines lw 2 dt 3 lc rgb "#17becf" title "Muon per head (q, k, v), libdmuon (2x2)"
set title "validation loss (last 10% of every file)"
plot "$RUNS/muon-dmuon-2x2/val.dat" with linespoints lw 4 pt 7 lc rgb "#1f77b4" title "Muon, libdmuon (4 ranks, 2x2)", \
     "$RUNS/muon-reference/val.dat" with linespoints lw 1.5 dt 2 pt 6 lc rgb "black" title "Muon, single-process libtorch", \
     "$RUNS/adamw-dmuon-2x2/val.dat" with linespoints lw 4 pt 7 lc rgb "#ff7f0e" title "AdamW, libdmuon (4 ranks, 2x2)", \
     "$RUNS/adamw-reference/val.dat" with linespoints lw 1.5 dt 2 pt 6 lc rgb "#444444" title "torch::optim::AdamW, single process", \
     "$RUNS/normuon-dmuon-2x2/val.dat" with linespoints lw 2 pt 5 lc rgb "#2ca02c" title "NorMuon, libdmuon (2x2)", \
     "$RUNS/soap-dmuon-2x2/val.dat" with linespoints lw 2 pt 9 lc rgb "#d62728" title "SOAP, libdmuon (2x2)", \
     "$RUNS/shampoo-dmuon-2x2/val.dat" with linespoints lw 2 pt 11 lc rgb "#9467bd" title "Shampoo, libdmuon (2x2)", \
     "$RUNS/muon-heads-dmuon-2x2/val.dat" with linespoints lw 2 dt 3 pt 13 lc rgb "#17becf" title "Muon per head (q, k, v), libdmuon (2x2)"
unset multiplot
EOF
echo "wrote $PLOT"
echo "final validation losses (step $STEPS):"
for name in $names; do
  printf '  %-22s %s\n' "$name" "$(tail -n 1 "$RUNS/$name/val.dat" | cut -d' ' -f2)"
done
