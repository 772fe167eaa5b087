# ZeRO-3 (--zero 3) end to end on the CPU (c10d + Gloo), ranks launched by hand, 8 steps of the
# default config in fp32 with a global batch of 8 rows:
#   (a) 2 ranks: the losses and validation losses of 2-rank DDP within 1e-6 relative (the
#       gradients summed in another order); train.log's precision chart names the ZeRO-3
#       collectives; one shard file per rank;
#   (b) stop after 3 steps and resume on the same 2 ranks: the unbroken run's losses bit for bit;
#   (c) resharding 4 -> 2 -> 1 ranks continues with the unbroken 4-rank run's losses (1e-6);
#   (d) ZeRO-3 -> ZeRO-1 -> DDP on 2 ranks continues with the unbroken ZeRO-3 run's losses (1e-6);
#   (e) `fp8train export` of a ZeRO-3 checkpoint (its weights are only in the shard files) gives
#       the weights of the DDP run at the same step within 1e-5 (the gradients summed in another
#       order; AdamW's m / sqrt(v) turns a last-bit difference of a tiny gradient into up to lr);
#   (f) `fp8train bench` under a 2-rank launch with --zero 3.
source "$(dirname "$0")/lib.sh"

# In fp32 (configs/default.yaml trains in fp8): the tolerances below are those of FP32 sums in another order.
common=(--config "$CONFIG" --precision fp32 --out-dir "$WORK/runs" --quiet --steps 8 --set train.warmup_steps=2
        --set train.log_interval=1 --set train.eval_interval=4 --set train.eval_batches=2)
rows() { echo "--set train.micro_batch_size=$((8 / $1))"; }  # rows per rank for a global batch of 8
one() { OMP_NUM_THREADS=1 "$FP8TRAIN" "$@" > one.log 2>&1 || { cat one.log; fail "single process: $*"; }; }

# (a) 2 ranks against DDP.
launch_by_hand 2 "${common[@]}" --run-name ddp2 $(rows 2) || { cat rank*.log; fail "2-rank DDP failed"; }
launch_by_hand 2 "${common[@]}" --run-name z2 $(rows 2) --zero 3 || { cat rank*.log; fail "2-rank ZeRO-3 failed"; }
relclose runs/z2/metrics.jsonl runs/ddp2/metrics.jsonl 1e-6 || fail "ZeRO-3: losses differ from DDP"
grep -q "ZeRO-3: gradient reduce-scatter of each unit" runs/z2/train.log || fail "the precision chart lacks ZeRO-3"
ls runs/z2/checkpoint.shard-0-of-2.step-8.pt runs/z2/checkpoint.shard-1-of-2.step-8.pt > /dev/null \
  || fail "ZeRO-3: no shard files: $(ls runs/z2)"

# (b) stop and resume on the same ranks: bit for bit.
launch_by_hand 2 "${common[@]}" --run-name zs $(rows 2) --zero 3 --stop-after 3 || { cat rank*.log; fail "stop-after"; }
cp -r runs/zs runs/zs3  # the step-3 checkpoint, for (d) and (e)
launch_by_hand 2 "${common[@]}" --run-name zs $(rows 2) --zero 3 --resume || { cat rank*.log; fail "resume"; }
diff <(losses runs/z2/metrics.jsonl) <(losses runs/zs/metrics.jsonl) || fail "the resumed ZeRO-3 losses differ"

# (c) 4 -> 2 -> 1 ranks, ZeRO-3 throughout, against the unbroken 4-rank run.
launch_by_hand 4 "${common[@]}" --run-name z4 $(rows 4) --zero 3 || { cat rank*.log; fail "4-rank ZeRO-3 failed"; }
launch_by_hand 4 "${common[@]}" --run-name r421 $(rows 4) --zero 3 --stop-after 3 || { cat rank*.log; fail "4 ranks"; }
launch_by_hand 2 "${common[@]}" --run-name r421 $(rows 2) --zero 3 --resume --stop-after 3 \
  || { cat rank*.log; fail "resharding 4 -> 2"; }
grep -q "resharding the checkpoint of 4 rank(s) (ZeRO-3) onto 2 rank(s) (ZeRO-3)" runs/r421/train.log \
  || fail "no 4 -> 2 resharding line"
one "${common[@]}" --run-name r421 $(rows 1) --zero 3 --resume
grep -q "resharding the checkpoint of 2 rank(s) (ZeRO-3) onto 1 rank(s)" runs/r421/train.log || fail "no 2 -> 1 line"
relclose runs/r421/metrics.jsonl runs/z4/metrics.jsonl 1e-6 || fail "4 -> 2 -> 1: losses differ"

# (d) ZeRO-3 -> ZeRO-1 -> DDP on 2 ranks, against the unbroken ZeRO-3 run.
cp -r runs/zs3 runs/z310
launch_by_hand 2 "${common[@]}" --run-name z310 $(rows 2) --zero 1 --resume --stop-after 3 \
  || { cat rank*.log; fail "resharding ZeRO-3 -> ZeRO-1"; }
launch_by_hand 2 "${common[@]}" --run-name z310 $(rows 2) --zero 0 --resume || { cat rank*.log; fail "ZeRO-1 -> DDP"; }
relclose runs/z310/metrics.jsonl runs/z2/metrics.jsonl 1e-6 || fail "3 -> 1 -> 0: losses differ"

# (e) export of the step-3 ZeRO-3 checkpoint against the DDP run stopped at step 3.
launch_by_hand 2 "${common[@]}" --run-name d3 $(rows 2) --stop-after 3 || { cat rank*.log; fail "DDP stop-after"; }
"$FP8TRAIN" export --run runs/zs3 --out z.safetensors > export.log 2>&1 || { cat export.log; fail "export of ZeRO-3"; }
"$FP8TRAIN" export --run runs/d3 --out d.safetensors > export.log 2>&1 || { cat export.log; fail "export of DDP"; }
python3 - z.safetensors d.safetensors <<'PY' || fail "the ZeRO-3 export differs from DDP's"
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        assert h["dtype"] == "F32", h
        a, b = h["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", data[8 + n + a:8 + n + b])
    return out
z, d = read(sys.argv[1]), read(sys.argv[2])
assert sorted(z) == sorted(d) and z, (sorted(z), sorted(d))
worst = max(abs(p - q) for k in d for p, q in zip(z[k], d[k]))
print(f"{len(z)} tensors, largest difference {worst:.2e}")
assert worst <= 1e-5, worst
PY

# (f) bench under a 2-rank launch.
launch_by_hand 2 bench --config "$CONFIG" --precisions fp32 --bench-steps 2 --bench-warmup 1 --set model.n_layer=1 \
  --zero 3 --json bench.json || { cat rank*.log; fail "bench with --zero 3 failed"; }
[ "$(json_get bench.json '(d["world_size"], d["zero"], len(d["results"]))')" = "(2, 3, 1)" ] || { cat bench.json; fail "bench.json"; }
echo "ok"
