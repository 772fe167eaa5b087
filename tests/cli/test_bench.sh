# `fp8train bench` on the CPU: a table and JSON for each precision asked for (fp16 with its
# skipped-step count), the ratio to bf16,
# and bad options rejected (exit 2) before anything is measured or written.
source "$(dirname "$0")/lib.sh"
"$FP8TRAIN" bench --config "$CONFIG" --precisions bf16,fp16,fp8 --bench-steps 2 --bench-warmup 1 --breakdown \
  --set model.n_layer=1 --json bench.json > table.txt 2> log.txt || { cat log.txt; fail "bench failed"; }
grep -q "^bf16 " table.txt && grep -q "^fp16 " table.txt && grep -q "^fp8 " table.txt || { cat table.txt; fail "table rows missing"; }
grep -q "skipped$" table.txt || { cat table.txt; fail "no skipped-steps column"; }
grep -q "1 x 16 x 64 = 1024 tokens" table.txt && grep -q "^fp8 phases (median ms" table.txt || { cat table.txt; fail "table header"; }
python3 - bench.json <<'PY' || fail "bench.json content"
import json, math, sys
d = json.load(open(sys.argv[1]))
rows = {r["precision"]: r for r in d["results"]}
assert list(rows) == ["bf16", "fp16", "fp8"], list(rows)
for r in rows.values():
    assert r["tokens_per_step"] == 16 * 64 and r["median_step_ms"] > 0, r
    assert abs(r["tokens_per_s"] - r["tokens_per_step"] / (r["median_step_ms"] / 1e3)) < 1e-6 * r["tokens_per_s"]
    assert math.isfinite(r["final_loss"]), r
    # CPU: the row's own rise of the resident set (seen: 16-50 MiB): at least the model state the
    # row holds, and far below the ~480 MiB of the whole LibTorch process, which a process-lifetime
    # maximum (what every row reported before) would give.
    assert r["memory_estimate"]["state_bytes"] <= r["peak_memory_bytes"] < 256 << 20, r["peak_memory_bytes"]
    assert isinstance(r["skipped_steps"], int) and 0 <= r["skipped_steps"] <= 3, r  # warm-up + timed
assert d["model"]["n_layer"] == 1 and d["timed_steps"] == 2 and d["world_size"] == 1
assert abs(d["fp8_over_bf16"] - rows["fp8"]["tokens_per_s"] / rows["bf16"]["tokens_per_s"]) < 1e-9
assert abs(d["fp16_over_bf16"] - rows["fp16"]["tokens_per_s"] / rows["bf16"]["tokens_per_s"]) < 1e-9
assert rows["bf16"]["skipped_steps"] == 0 and rows["fp8"]["skipped_steps"] == 0
assert "fp8_rewrite" in rows["fp8"] and "fp8_rewrite" not in rows["bf16"] and "fp8_rewrite" not in rows["fp16"]
for r in rows.values():  # --breakdown: every phase timed
    assert set(r["phase_ms"]) == {"forward", "loss", "backward", "grad_sync", "fp8_update", "clip", "optimizer"}, r
    assert all(v >= 0 for v in r["phase_ms"].values()) and r["phase_ms"]["backward"] > 0
    # and each phase's memory peak, within the row's (the largest of them is the row's peak or below)
    assert list(r["phase_peak_bytes"]) == list(r["phase_ms"]), r
    assert 0 < max(r["phase_peak_bytes"].values()) <= r["peak_memory_bytes"], r
print("bench.json ok")
PY
# A study config reads token shards in sequential order; bench draws random tokens instead and
# must not refuse the config for it (configs/moe-140m.yaml: data.order sequential; a tiny MoE).
"$FP8TRAIN" bench --config "$FP8T_SOURCE_DIR/configs/moe-140m.yaml" --precisions fp32,fp8 --bench-steps 1 \
  --bench-warmup 0 --micro-batches 1 --set model.n_layer=1 --set model.d_model=64 --set model.n_head=2 \
  --set model.n_kv_head=0 --set model.d_ff=64 --set model.vocab_size=256 --set model.seq_len=32 \
  --set train.micro_batch_size=2 --json moe.json > moe.txt 2> moe.log || { cat moe.log; fail "bench of a sequential-order MoE config"; }
grep -q "^fp8 " moe.txt || { cat moe.txt; fail "bench of the MoE config: no fp8 row"; }
# --profile: the operators of a profiled step, longest first, in the table and the JSON.
"$FP8TRAIN" bench --config "$CONFIG" --precisions fp8 --bench-steps 1 --bench-warmup 0 --profile 2 \
  --set model.n_layer=1 --json prof.json > prof.txt 2> prof.log || { cat prof.log; fail "bench --profile failed"; }
grep -q "^fp8 CPU operators (inclusive" prof.txt || { cat prof.txt; fail "profile table missing"; }
python3 - prof.json <<'PY' || fail "prof.json content"
import json, sys
p = json.load(open(sys.argv[1]))["results"][0]["profile"]
k = p["kernels"]
assert p["steps"] == 2 and len(k) > 10, p
assert all(a["ms_per_step"] >= b["ms_per_step"] for a, b in zip(k, k[1:])), "not sorted"
names = {e["name"] for e in k}
# The step's own operators: the FP8 rewrite's emulated GEMMs and fp8train's AdamW step.
assert any("mm" in n for n in names) and "fp8t::adamw_step" in names, sorted(names)[:40]
assert abs(p["device_ms_per_step"] - sum(e["ms_per_step"] for e in k)) < 1e-6 * p["device_ms_per_step"]
print("prof.json ok")
PY
set +e
"$FP8TRAIN" bench --config "$CONFIG" --precisions bf16,fp4 --json bad.json > bad.txt 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "unknown precision 'fp4'" bad.txt || { cat bad.txt; fail "bad --precisions: rc $rc"; }
[ ! -e bad.json ] || fail "a rejected bench wrote its JSON file"
set +e
"$FP8TRAIN" bench --config "$CONFIG" --bench-steps 1 --json no/such/dir/b.json > nodir.txt 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "does not exist or is not writable" nodir.txt || { cat nodir.txt; fail "bad --json folder: rc $rc"; }
# --recipes validates the recipe keys per recipe: a key that applies to one listed recipe runs
# (the others warn), one that applies to none is exit 2, and --fp8-recipe next to it is exit 2.
"$FP8TRAIN" bench --config "$CONFIG" --precisions fp8 --recipes delayed,block --set fp8.block_power_of_2_scales=false \
  --bench-steps 1 --bench-warmup 0 --set model.n_layer=1 --json rec.json > rec.txt 2> rec.log || { cat rec.log; fail "bench --recipes with a block-only key failed"; }
grep -q "the delayed row runs without it: fp8.block_power_of_2_scales" rec.log || { cat rec.log; fail "no warning for the delayed row"; }
grep -q "^fp8:block " rec.txt || { cat rec.txt; fail "block row missing"; }
set +e
"$FP8TRAIN" bench --config "$CONFIG" --recipes current,block --fp8-amax-history-len 16 --json none.json > none.txt 2>&1
rc1=$?
"$FP8TRAIN" bench --config "$CONFIG" --recipes delayed --fp8-recipe block --json both.json > both.txt 2>&1
rc2=$?
set -e
[ "$rc1" = 2 ] && grep -q "fp8.amax_history_len.*has no effect under" none.txt || { cat none.txt; fail "a key of no listed recipe: rc $rc1"; }
[ "$rc2" = 2 ] && grep -q "both choose the FP8 recipe" both.txt || { cat both.txt; fail "--recipes with --fp8-recipe: rc $rc2"; }
[ ! -e none.json ] && [ ! -e both.json ] || fail "a rejected bench wrote its JSON file"
# A size that cannot fit is refused by the memory estimate before any model is built, as in training.
set +e
timeout 60 "$FP8TRAIN" bench --config "$CONFIG" --set model.d_model=1000000 --json big.json > big.txt 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "cannot fit on cpu" big.txt && grep -q "model.d_model=1000000" big.txt || { head -c 2000 big.txt; fail "oversized bench: rc $rc"; }
[ ! -e big.json ] || fail "a refused bench wrote its JSON file"
echo "ok"
