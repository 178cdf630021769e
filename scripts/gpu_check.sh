#!/usr/bin/env bash
# The prepared check of a fresh GPU machine (make gpu-check; under 10 minutes on one H100-class card):
#   1. the gpu tests (tests/test_gpu.py),
#   2. the GPU bench: one job's target tokens/s, N packed jobs summed, the share of the card's bf16 peak,
#      the same job on this machine's CPU,
#   3. Table 3 row A (6 cells x 3 seeds) at the ablation budget as a sweep of its own, named for the card
#      (results/table3_a_<card>/), its jobs packed on the card,
#   4. its report (reports/table3_a_<card>.md).
# Each step's wall time goes to $LOG_DIR/times.txt; a failing step is reported and the next still runs.
# GPU_PY: the python that holds the machine's CUDA torch and headsweep (make install-offline installs it).
set -uo pipefail
PY=${GPU_PY:-python3}
LOG_DIR=${LOG_DIR:-gpu-check}
SEEDS=${SEEDS:-3}
# jobs packed on the card: row A's 18 in one wave where the cores allow (up to 2 per core; make sweep checks
# the card's free memory), else as many as make sweep allows
JOBS=${JOBS:-$(( $(nproc) * 2 < 18 ? $(nproc) * 2 : 18 ))}
mkdir -p "$LOG_DIR"
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_SILENT=true PYTHONUNBUFFERED=1
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: $PY sees no CUDA GPU: make gpu-check runs on a GPU machine (make test runs the CPU tests)" >&2
    exit 2
fi
CARD=$($PY -c "import torch; from headsweep.sweeps.packing import device_slug; print(device_slug(torch.cuda.get_device_name()))")
SWEEP=table3_a_$CARD
echo "card: $($PY -c 'import torch; print(torch.cuda.get_device_name(), torch.__version__)'); sweep: $SWEEP" | tee "$LOG_DIR/times.txt"
status=0
step() {  # step NAME COMMAND...: run it, log it, time it
    local name=$1; shift
    local t0=$SECONDS
    echo "== $name: $*"
    "$@" 2>&1 | tee "$LOG_DIR/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "$name: $((SECONDS - t0)) s, exit $rc" | tee -a "$LOG_DIR/times.txt"
    [ "$rc" -eq 0 ] || status=1
}
start=$SECONDS
step tests $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
step bench $PY -m headsweep.bench.gpu --packed 8 --json "$LOG_DIR/bench.json"
step sweep $PY -m headsweep.sweeps.sweep --sweep table3_a --name "$SWEEP" --seeds "$SEEDS" --budget ablation \
    --jobs "$JOBS"
step report $PY -m headsweep.reports.build --sweep "$SWEEP" --root results
echo "gpu-check: $((SECONDS - start)) s in all, exit $status" | tee -a "$LOG_DIR/times.txt"
exit $status
