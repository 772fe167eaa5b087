# shellcheck shell=bash
# Sourced by scripts/peer-bench.sh and scripts/curve-bench.sh: wait for an idle GPU before a
# timing. The caller defines log() and sets OUTDIR (gpu-busy.txt goes there) and IDLE_WAIT (s).

# The utilization (%) of the GPU the timings run on (the first of CUDA_VISIBLE_DEVICES), "" where
# nvidia-smi is missing or fails.
gpu_utilization() {
  local dev=${CUDA_VISIBLE_DEVICES:-0} out
  out=$(nvidia-smi -i "${dev%%,*}" --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null) || return 0
  echo "$out" | head -1 | tr -dc '0-9'
}

# Waits until the GPU has been idle for 3 s running (at most IDLE_WAIT s) before `what` is timed:
# a test run, a sanitizer or another job left on the GPU would slow whatever is timed beside it
# (seen: a torchao step 1.9x its time alone while the GPU tests were still running). Past the
# wait the timing goes ahead, named in the log and in gpu-busy.txt.
await_idle_gpu() {
  local what=$1 util quiet=0 start
  start=$(date +%s)
  while :; do
    util=$(gpu_utilization)
    [ -z "$util" ] && return 0  # no nvidia-smi: nothing to check
    if [ "$util" -le 5 ]; then quiet=$((quiet + 1)); else quiet=0; fi
    [ "$quiet" -ge 3 ] && return 0
    if [ $(( $(date +%s) - start )) -ge "$IDLE_WAIT" ]; then
      log "WARNING: $what is timed while the GPU is busy with other work (utilization ${util}% after ${IDLE_WAIT} s)"
      echo "$what: timed while the GPU was busy (utilization ${util}%)" >>"$OUTDIR/gpu-busy.txt"
      return 0
    fi
    sleep 1
  done
}
