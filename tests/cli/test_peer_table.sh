# scripts/peer-bench.sh and scripts/peer_table.py without a GPU: a peer that is still compiling at
# --deadline, and one that fails, each leave a "not run" record that the table names (beside the
# peer recipe's measured mode, which alone sets the ratio), instead of vanishing from it; a
# timing that starts while the GPU is busy waits for it to go idle, and is named when it never does.
source "$(dirname "$0")/lib.sh"
# A stand-in for python3 running reference_bench.py: a gated (--early) peer compiles "forever",
# any other peer fails at once without writing its JSON.
cat > fake_python.sh <<'SH'
#!/usr/bin/env bash
case " $* " in *" --wait-for "*) sleep 60 ;; *) echo "reference_bench: failed" >&2; exit 1 ;; esac
SH
chmod +x fake_python.sh
FP8T_PYTHON=$WORK/fake_python.sh bash "$FP8T_SOURCE_DIR/scripts/peer-bench.sh" --out "$WORK/peers" \
  --early "float8:max-autotune" --peers "compile:max-autotune" --deadline $(( $(date +%s) + 2 )) > bench.out 2>&1 \
  || { cat bench.out; fail "peer-bench.sh without fp8train exited non-zero"; }
grep -q "float8:max-autotune not ready by the deadline" bench.out || { cat bench.out; fail "the deadline is not reported"; }
[ "$(json_get peers/peer-float8_max-autotune.json 'd["not_run"]')" = "still compiling at the deadline" ] \
  || fail "the stopped peer has no not-run record"
[ "$(json_get peers/peer-float8_max-autotune.json 'd["float8_recipe"], d["cuda_graphs"]')" = "tensorwise True" ] \
  || fail "the stopped peer's recipe or CUDA graphs are wrong"
[ "$(json_get peers/peer-compile_max-autotune.json 'd["not_run"], d["float8_recipe"]')" = \
  "failed (see peer-compile_max-autotune.log) None" ] || fail "the failed peer has no not-run record"

# The table: fp8:current against the measured torchao run (100 tokens/s against its 80), the
# max-autotune records named, not used; bf16 has no measured peer.
python3 - <<'PY'
import json
bench = {"results": [
    {"precision": "bf16", "median_step_ms": 2.0, "tokens_per_s": 50.0, "peak_memory_bytes": 2**31, "cuda_graph": True},
    {"precision": "fp8", "recipe": "current", "median_step_ms": 1.0, "tokens_per_s": 100.0,
     "peak_memory_bytes": 2**30, "cuda_graph": True}]}
peer = {"mode": "float8", "float8_recipe": "tensorwise", "compile_mode": "reduce-overhead", "cuda_graphs": True,
        "step_ms": 1.25, "tokens_per_s": 80.0, "peak_memory_gib": 2.0}
json.dump(bench, open("bench.json", "w"))
json.dump(peer, open("peers/peer-float8_reduce-overhead.json", "w"))
PY
python3 "$FP8T_SOURCE_DIR/scripts/peer_table.py" --bench bench.json --peers peers/peer-*.json --json table.json \
  > table.txt || { cat table.txt; fail "peer_table.py failed"; }
python3 - table.json <<'PY' || { cat table.txt; fail "the table"; }
import json, sys
t = {r["row"]: r for r in json.load(open(sys.argv[1]))}
cur = t["fp8train fp8:current (CUDA graphs on)"]
assert abs(cur["speed_ratio"] - 1.25) < 1e-12 and abs(cur["memory_ratio"] - 0.5) < 1e-12, cur
assert cur["peer"].startswith("torchao float8 tensorwise + torch.compile reduce-overhead"), cur
assert "max-autotune not run: still compiling at the deadline" in cur["peer"], cur
bf16 = t["fp8train bf16 (CUDA graphs on)"]
assert bf16["speed_ratio"] is None and bf16["peer"].startswith("none measured; max-autotune not run: failed"), bf16
stopped = t["torchao float8 tensorwise + torch.compile max-autotune (CUDA graphs on)"]
assert stopped["tokens_per_s"] is None and stopped["peer"].startswith("not run: still compiling"), stopped
PY

# The idle-GPU wait, with a stand-in nvidia-smi that reads the utilization from a file: busy (90%)
# for the whole --idle-wait, the fp8train timing goes ahead and is named; idle (0%), nothing is.
mkdir -p fakebin
cat > fakebin/nvidia-smi <<SH
#!/usr/bin/env bash
cat "$WORK/util"
SH
chmod +x fakebin/nvidia-smi
cat > fake_fp8train.sh <<'SH'
#!/usr/bin/env bash
exit 0
SH
chmod +x fake_fp8train.sh
echo 90 > util
PATH="$WORK/fakebin:$PATH" bash "$FP8T_SOURCE_DIR/scripts/peer-bench.sh" --out "$WORK/busy" --peers "" \
  --fp8train "$WORK/fake_fp8train.sh" --idle-wait 2 > busy.out 2>&1 || { cat busy.out; fail "peer-bench.sh (busy GPU)"; }
grep -q "WARNING: fp8train bench is timed while the GPU is busy with other work (utilization 90%" busy.out \
  || { cat busy.out; fail "a timing beside other GPU work is not named in the log"; }
grep -q "fp8train bench: timed while the GPU was busy" busy/gpu-busy.txt || fail "no gpu-busy.txt record"
echo 0 > util  # idle: 3 quiet seconds end the wait (--idle-wait 10: whole-second clock reads made 2 flaky)
PATH="$WORK/fakebin:$PATH" bash "$FP8T_SOURCE_DIR/scripts/peer-bench.sh" --out "$WORK/busy" --peers "" \
  --fp8train "$WORK/fake_fp8train.sh" --idle-wait 10 > idle.out 2>&1 || { cat idle.out; fail "peer-bench.sh (idle GPU)"; }
! grep -q "WARNING" idle.out || { cat idle.out; fail "an idle GPU is reported busy"; }
[ ! -e busy/gpu-busy.txt ] || fail "the earlier run's gpu-busy.txt was kept"
echo "peer table: not-run peers named, ratios from measured ones; timings beside other GPU work named"
