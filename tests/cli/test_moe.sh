#!/usr/bin/env bash
# The mixture-of-experts family from the command line (configs/moe-tiny.yaml, README "Mixture of
# experts"):
#   (a) it trains in FP8 on the CPU: the rewrite report lists the experts' grouped layers, every log
#       row of metrics.jsonl has each MoE layer's routing (tokens per expert min/mean/max, CV,
#       padding, dropped 0) and the console line the least balanced layer;
#   (b) under fp8.recipe block the experts stay in BF16/FP32 with the reason, naming the recipes
#       with FP8 experts;
#   (c) --dry-run's plan counts all and active parameters and one block's transient buffers;
#   (d) a resumed run (balance bias: the router's selection bias is checkpoint state) repeats the
#       uninterrupted run's losses exactly;
#   (e) expert parallelism on 2 CPU ranks (dist.expert_parallel 2) gives data parallelism's losses,
#       its checkpoint holds whole experts and resumes on one process;
#   (f) a rank killed during expert parallelism makes the other exit 3;
#   (g) bad moe keys are exit 2 naming the key, with nothing written.
source "$(dirname "$0")/lib.sh"
MOE="$FP8T_SOURCE_DIR/configs/moe-tiny.yaml"
run() { "$FP8TRAIN" --config "$MOE" --out-dir "$WORK/runs" "$@"; }

# (a)
run --run-name a --steps 20 --set train.eval_interval=0 --set train.eval_batches=1 > a.log 2>&1 ||
  { cat a.log; fail "(a) the tiny MoE did not train"; }
grep -q "h0.mlp.experts_fc .*Grouped .*8x64x128 .*fp8" a.log || { cat a.log; fail "(a) no grouped layer in the rewrite report"; }
grep -q "experts max/mean" a.log || { cat a.log; fail "(a) the console shows no expert balance"; }
python3 - runs/a/metrics.jsonl <<'PY' || fail "(a) routing statistics"
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert rows, "no log rows"
for r in rows:
    moe = r["moe"]
    assert set(moe) == {"h0.mlp", "h1.mlp"}, moe.keys()
    for name, s in moe.items():
        assert 0 <= s["tokens_min"] <= s["tokens_mean"] <= s["tokens_max"], s
        assert s["dropped"] == 0 and 0 < s["padded_frac"] < 1 and s["tokens_cv"] >= 0, s
        assert s["aux_loss"] > 0, s  # moe.balance aux_loss
# 8 sequences x 32 tokens x top-2 per micro-batch, over 8 experts: a mean of 64 per step.
first = rows[0]["moe"]["h0.mlp"]
assert abs(first["tokens_mean"] - 64.0) < 1e-9, first
PY

# (b)
run --run-name b --steps 2 --set train.warmup_steps=0 --fp8-recipe block > b.log 2>&1 || { cat b.log; fail "(b) block did not run"; }
grep -q "h0.mlp.experts_fc .*kept: the block recipe has no grouped FP8 GEMM" b.log || { cat b.log; fail "(b) no reason"; }
grep -q "delayed, current, rowwise" b.log || { cat b.log; fail "(b) the recipes with FP8 experts are not named"; }

# (c)
run --dry-run > c.log 2>&1 || { cat c.log; fail "(c) --dry-run"; }
grep -q "active per token: top-2 of 8 experts" c.log && grep -q "MoE block's transient buffers" c.log ||
  { cat c.log; fail "(c) the plan has no MoE terms"; }

# (d)
bias=(--set moe.balance=bias --set moe.bias_update_rate=0.01 --set train.eval_interval=0 --set train.log_interval=1
      --set train.checkpoint_interval=5 --quiet)
run --run-name whole --steps 12 "${bias[@]}" > d1.log 2>&1 || { cat d1.log; fail "(d) uninterrupted run"; }
run --run-name parts --steps 12 "${bias[@]}" --stop-after 5 > d2.log 2>&1 || { cat d2.log; fail "(d) first part"; }
run --run-name parts --steps 12 "${bias[@]}" --resume > d3.log 2>&1 || { cat d3.log; fail "(d) resume"; }
diff <(losses runs/whole/metrics.jsonl) <(losses runs/parts/metrics.jsonl) > /dev/null ||
  { diff <(losses runs/whole/metrics.jsonl) <(losses runs/parts/metrics.jsonl); fail "(d) the resumed losses differ"; }

# (e) 2 ranks, fp32 (the comparison with data parallelism is exact up to summation order)
ep=(--config "$MOE" --out-dir "$WORK/runs" --quiet --steps 6 --set train.warmup_steps=0 --precision fp32 --set train.eval_interval=3
    --set train.eval_batches=1 --set train.log_interval=1 --set train.micro_batch_size=4)
launch_by_hand 2 "${ep[@]}" --run-name dp > /dev/null || { cat rank0.log rank1.log; fail "(e) data-parallel run"; }
launch_by_hand 2 "${ep[@]}" --run-name ep --set dist.expert_parallel=2 > /dev/null ||
  { cat rank0.log rank1.log; fail "(e) expert-parallel run"; }
relclose runs/ep/metrics.jsonl runs/dp/metrics.jsonl 1e-5 || fail "(e) expert parallelism differs from DDP"
# The checkpoint holds whole experts: one process (all 8 experts) resumes it (shapes are checked).
"$FP8TRAIN" --config "$MOE" --out-dir "$WORK/runs" --quiet --run-name ep --steps 8 --set train.warmup_steps=0 --precision fp32 \
  --set train.eval_interval=3 --set train.eval_batches=1 --set train.log_interval=1 --set train.micro_batch_size=4 \
  --resume > e3.log 2>&1 || { cat e3.log; fail "(e) the expert-parallel checkpoint did not resume on one process"; }

# (f)
port=$(free_port)
dead=(--config "$MOE" --out-dir "$WORK/runs" --quiet --steps 100000 --precision fp32 --set train.eval_interval=0
      --set dist.expert_parallel=2 --set dist.timeout_s=30 --run-name killed)
RANK=0 WORLD_SIZE=2 MASTER_PORT=$port OMP_NUM_THREADS=1 "$FP8TRAIN" "${dead[@]}" > killed0.log 2>&1 &
p0=$!
RANK=1 WORLD_SIZE=2 MASTER_PORT=$port OMP_NUM_THREADS=1 "$FP8TRAIN" "${dead[@]}" > killed1.log 2>&1 &
p1=$!
for _ in $(seq 600); do [ -s runs/killed/metrics.jsonl ] && break; sleep 0.1; done
[ -s runs/killed/metrics.jsonl ] || { cat killed0.log killed1.log; fail "(f) the two-rank run did not start"; }
kill -9 "$p1"
rc=0
wait "$p0" || rc=$?
[ "$rc" = 3 ] || { cat killed0.log; fail "(f) surviving rank: expected exit 3, got $rc"; }
grep -q "another rank died, stopped or timed out" killed0.log || { cat killed0.log; fail "(f) no clear error"; }

# (g)
expect_moe_error() {
  local key=$1; shift
  rc=0
  run --run-name bad "$@" > g.log 2>&1 || rc=$?
  [ "$rc" = 2 ] || { cat g.log; fail "(g) $*: expected exit 2, got $rc"; }
  grep -q "$key" g.log || { cat g.log; fail "(g) $*: the message does not name $key"; }
  [ ! -e runs/bad ] || fail "(g) $*: a run folder was written"
}
expect_moe_error moe.top_k --set moe.top_k=9
expect_moe_error moe.first_k_dense --set moe.first_k_dense=2
expect_moe_error "moe.d_ff (.*) has no effect while moe.experts is 0" --set moe.experts=0
expect_moe_error dist.expert_parallel --set dist.expert_parallel=3
echo "PASS"
