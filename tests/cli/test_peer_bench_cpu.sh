# scripts/reference_bench.py's peer options on the CPU (tests/cli/peer_bench_check.py states each
# tolerance): --loss chunked gives the full head's loss and gradients (FP32 and BF16 autocast,
# chunks that do not divide the rows), --optimizer compiled the eager clip + AdamW's parameters,
# and a tiny run with --rounds writes one result per round with the versions it ran on.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: $PY cannot import torch (scripts/setup.sh installs it)"; exit 0; }
CHECK=$FP8T_SOURCE_DIR/tests/cli/peer_bench_check.py
"$PY" "$CHECK" loss || fail "--loss chunked differs from --loss full"
# The compiled optimizer needs a C++ compiler for Inductor's CPU kernels (about 35 s on 2 cores).
if command -v "${CXX:-g++}" >/dev/null 2>&1; then
  "$PY" "$CHECK" optimizer || fail "--optimizer compiled differs from eager"
else
  echo "SKIP (compiled optimizer): no C++ compiler for torch.compile's CPU kernels"
fi
"$PY" "$FP8T_SOURCE_DIR/scripts/reference_bench.py" --model llama3-3b --n-layer 1 --d-model 64 --n-head 4 \
  --n-kv-head 2 --d-ff 128 --vocab 300 --seq-len 16 --micro-batch 2 --mode eager --device cpu --steps 2 --warmup 1 \
  --rounds 2 --loss-chunk-mib 0.001 --commit abc1234 --json run.json > run.out 2>&1 || { cat run.out; fail "tiny run"; }
[ "$(json_get run.json 'len(d["rounds"]), d["loss"], d["loss_chunk_rows"], d["optimizer"]')" = "2 chunked 1 eager" ] \
  || { cat run.json; fail "rounds, loss or optimizer not recorded"; }
[ "$(json_get run.json 'd["versions"]["commit"], d["versions"]["device"], "torch" in d["versions"], "torchao" in d["versions"]')" = \
  "abc1234 cpu True True" ] || { cat run.json; fail "versions not recorded"; }
echo "peer bench (CPU): chunked loss = full, compiled optimizer = eager, rounds and versions recorded"
