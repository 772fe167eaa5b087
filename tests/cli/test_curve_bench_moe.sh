# scripts/curve-bench.sh on a mixture-of-experts config, without a GPU (stand-ins for fp8train bench
# and reference_bench.py, as in test_curve_bench.sh, on a copy of scripts/ with test configs):
# --n-layer reaches both sides, both route forced-balanced (or both by their routers with
# --force-balance off), fp8train keeps FP32 moments as the peers do, every FP8 recipe runs beside
# torchao's MoE rowwise peer (interleaved) and is compared with it in the table; a dense config gets
# no MoE setting; bad values of the new options are refused.
source "$(dirname "$0")/lib.sh"
export CALLS=$WORK/calls.txt
mkdir -p repo/configs fakebin
cp -r "$FP8T_SOURCE_DIR/scripts" repo/
printf 'model:\n  seq_len: 64\nmoe:\n  experts: 4\ntrain:\n  micro_batch_size: 2\n' > repo/configs/moe-test.yaml
printf 'model:\n  seq_len: 64\ntrain:\n  micro_batch_size: 2\n' > repo/configs/dense-test.yaml
CURVE=$WORK/repo/scripts/curve-bench.sh

# fp8train bench: one result per requested row, tokens/s = a base per row + the round - 1.
cat > fake_fp8train.sh <<'SH'
#!/usr/bin/env bash
[[ " $* " == *" --print-config "* ]] && exit 0  # a recipe check: every recipe is known
echo "fp8train $*" >> "$CALLS"
python3 - "$@" <<'PY'
import json, re, sys
args = sys.argv[1:]
val = lambda k: args[args.index(k) + 1] if k in args else ""
out = val("--json")
r = int(re.search(r"-r(\d+)\.json$", out).group(1))
base = {"bf16": 80.0, "fp8:delayed": 110.0, "fp8:current": 114.0, "fp8:rowwise": 100.0}
labels = (["bf16"] if "bf16" in val("--precisions").split(",") else []) + \
    (["fp8:" + x for x in val("--recipes").split(",")] if "fp8" in val("--precisions").split(",") else [])
rows = [{"precision": l.split(":")[0], "recipe": (l.split(":") + [None])[1], "tokens_per_step": 128,
         "median_step_ms": 1.0, "tokens_per_s": base[l] + r - 1, "model_tflops": 1.0, "peak_memory_bytes": 2**30,
         "cuda_graph": True} for l in labels]
json.dump({"versions": "LibTorch test", "results": rows}, open(out, "w"))
PY
SH
# reference_bench.py: the gate protocol; a MoE peer (curve-bench passes it a routing flag) says so
# in its JSON as the real one does (arch, moe.force_balance).
cat > fake_python.sh <<'SH'
#!/usr/bin/env bash
[[ "$1" == *reference_bench.py ]] || exec python3 "$@"
echo "peer $*" >> "$CALLS"
exec python3 - "$@" <<'PY'
import json, os, sys, time
args = sys.argv[1:]
val = lambda k: args[args.index(k) + 1] if k in args else ""
kind = val("--float8-recipe") if val("--mode") == "float8" else "bf16"
moe = "--force-balance" in args or "--no-force-balance" in args
res = {"framework": f"fake {kind}", "arch": "moe" if moe else "llama", "tokens_per_step": 128,
       "moe": {"force_balance": "--force-balance" in args} if moe else None, "peak_memory_gib": 2.0, "rounds": []}
for r in range(1, int(val("--rounds")) + 1):
    gate = val("--wait-for") + ("" if r == 1 else f".{r}")
    open(gate + ".ready", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    with open(os.environ["CALLS"], "a") as f:
        f.write(f"timed {kind} round {r}\n")
    res["rounds"].append({"tokens_per_s": {"bf16": 70.0, "rowwise": 90.0}[kind] + r - 1, "model_tflops": 1.0})
    json.dump(res, open(val("--json"), "w"))
PY
SH
printf '#!/usr/bin/env bash\nexit 1\n' > fakebin/nvidia-smi  # no utilization to wait on
chmod +x fake_fp8train.sh fake_python.sh fakebin/nvidia-smi
export PATH="$WORK/fakebin:$PATH"
curve() { FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --autotune on --commit abc "$@"; }

curve --models moe-test --peers bf16,rowwise --recipes delayed,current,rowwise --n-layer 3 --repeats 2 \
  --out "$WORK/moe" > moe.out 2>&1 || { cat moe.out; fail "curve-bench.sh on a MoE config exited non-zero"; }
# Both sides: 3 blocks and forced-balanced routing; fp8train FP32 moments.
[ "$(grep -c '^fp8train ' "$CALLS")" = 4 ] || { cat "$CALLS"; fail "expected 4 fp8train runs (2 slots x 2 rounds), no lone one"; }
! grep '^fp8train ' "$CALLS" | grep -qv -- "--set train.moments_dtype=fp32 --set model.n_layer=3 --set moe.force_balance=true" \
  || { cat "$CALLS"; fail "an fp8train run without FP32 moments, 3 blocks and forced-balanced routing"; }
[ "$(grep '^peer ' "$CALLS" | grep -c -- "--n-layer 3 --force-balance")" = 2 ] \
  || { cat "$CALLS"; fail "a peer without --n-layer 3 --force-balance"; }
# Every FP8 recipe beside torchao's MoE rowwise peer, interleaved (peer first in odd rounds).
grep -E "^(timed|fp8train)" "$CALLS" | sed -E 's/^fp8train .*--precisions ([a-z0-9,]+)( --recipes ([a-z,]+))?.*-r([0-9]).json$/fp8 \1 \3 r\4/' > got.txt
cat > want.txt <<'TXT'
timed bf16 round 1
fp8 bf16  r1
fp8 bf16  r2
timed bf16 round 2
timed rowwise round 1
fp8 fp8 delayed,current,rowwise r1
fp8 fp8 delayed,current,rowwise r2
timed rowwise round 2
TXT
diff want.txt got.txt || { cat moe.out; fail "the MoE rounds do not interleave as documented"; }
# The table: fp8train delayed 110..111 over the rowwise peer 90..91: 1.22x (1.21-1.23), named as
# torchao's MoE peer with its routing; bf16 against PyTorch bf16 MoE; the depth in the environment line.
row() { grep -F "| moe-test | $1 |" moe/curve.md || { cat moe/curve.md; fail "no row '$1'"; }; }
row "fp8train fp8:delayed" | grep -qF "| 1.22× (1.21–1.23) torchao float8 rowwise MoE (forced-balanced routing) |" \
  || { cat moe/curve.md; fail "fp8:delayed is not compared with torchao's MoE rowwise peer"; }
row "fp8train fp8:current" | grep -qF "torchao float8 rowwise MoE (forced-balanced routing) |" || fail "fp8:current's peer"
row "fp8train bf16" | grep -qF "PyTorch bf16 MoE (forced-balanced routing) |" || fail "bf16's peer"
grep -q "every model at 3 blocks (--n-layer)" moe/curve.md || { cat moe/curve.md; fail "the depth is not in the table"; }
grep -q '"n_layer": 3' moe/environment.json || fail "environment.json lacks n_layer"

# --force-balance off: both sides by their routers.
: > "$CALLS"
curve --models moe-test --peers bf16 --recipes delayed --repeats 1 --force-balance off --out "$WORK/learned" \
  > learned.out 2>&1 || { cat learned.out; fail "curve-bench.sh --force-balance off"; }
grep '^peer ' "$CALLS" | grep -q -- "--no-force-balance" && ! grep '^fp8train ' "$CALLS" | grep -qv "moe.force_balance=false" \
  || { cat "$CALLS"; fail "--force-balance off does not reach both sides"; }
grep -F "| moe-test | fp8train bf16 |" learned/curve.md | grep -qF "MoE (learned routing)" || fail "learned routing not named"

# A dense config: FP32 moments, no MoE setting on either side.
: > "$CALLS"
curve --models dense-test --peers bf16 --recipes delayed --repeats 1 --out "$WORK/dense" > dense.out 2>&1 \
  || { cat dense.out; fail "curve-bench.sh on a dense config"; }
! grep -q "force.balance\|n_layer\|n-layer" "$CALLS" && grep '^fp8train ' "$CALLS" | grep -q "train.moments_dtype=fp32" \
  || { cat "$CALLS"; fail "a dense config got MoE or depth settings, or fp8train lacks FP32 moments"; }

# Bad values: exit 2 naming the option, before anything runs.
: > "$CALLS"
for bad in "--n-layer 0" "--n-layer x" "--force-balance maybe"; do
  set +e
  # shellcheck disable=SC2086  # the option and its value
  curve --models moe-test $bad --out "$WORK/bad" > bad.out 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "curve-bench.sh: ${bad%% *}" bad.out || { cat bad.out; fail "'$bad': exit $rc, expected 2 naming it"; }
done
[ ! -s "$CALLS" ] || { cat "$CALLS"; fail "something ran before a bad option was refused"; }
echo "curve-bench (MoE): depth and routing on both sides, FP32 moments, every FP8 row against torchao's MoE peer"
