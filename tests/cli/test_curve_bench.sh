# scripts/curve-bench.sh and its table (scripts/peer_table.py --curve) without a GPU, with stand-ins
# for fp8train bench and reference_bench.py that follow their protocols (JSON schema, gate files):
# the rounds interleave (peer first in odd rounds, fp8train first in even ones), both sides get
# the config's micro-batch and sequence, fp8train runs with and without GEMM autotuning, the
# table prints median (range) and ratios to the digits their range allows; a peer that never
# finishes compiling is stopped at --deadline and named as not run. The peers are named by their
# framework (torchao-rowwise is torchao's recipe, --recipes rowwise fp8train's: both rows in the
# table, side by side; the old name rowwise is taken with a note), and an unknown fp8train
# recipe is refused with the registry's list before anything runs.
source "$(dirname "$0")/lib.sh"
export CALLS=$WORK/calls.txt
# fp8train bench: one result per requested row; tokens/s = a base per row + the round number - 1
# (round from the --json name ...-rN.json), 5 less without autotuning.
cat > fake_fp8train.sh <<'SH'
#!/usr/bin/env bash
if [ "$1" = --fp8-recipe ] && [ "$3" = --print-config ]; then  # the recipe check, as fp8train answers it
  case "$2" in delayed|current|block|rowwise) exit 0 ;; esac
  echo "[error] fp8.recipe (--fp8-recipe): expected one of delayed, current, block, rowwise, got '$2'" >&2; exit 2
fi
echo "fp8train $*" >> "$CALLS"
python3 - "$@" <<'PY'
import json, re, sys
args = sys.argv[1:]
val = lambda k: args[args.index(k) + 1] if k in args else ""
out = val("--json")
r = int(re.search(r"-r(\d+)\.json$", out).group(1))
off = "train.gemm_autotune=false" in args
mb = int([a for a in args if a.startswith("train.micro_batch_size=")][0].split("=")[1])
base = {"bf16": 80.0, "fp8:delayed": 110.0, "fp8:current": 114.0, "fp8:block": 105.0, "fp8:rowwise": 95.0}
precisions = val("--precisions").split(",")
labels = (["bf16"] if "bf16" in precisions else []) + \
    (["fp8:" + x for x in val("--recipes").split(",")] if "fp8" in precisions else [])
rows = []
for label in labels:
    prec, _, recipe = label.partition(":")
    row = {"precision": prec, "tokens_per_step": mb * 1024, "median_step_ms": 1.0,
           "tokens_per_s": base[label] + r - 1 - (5 if off else 0), "model_tflops": 1.0 + r,
           "peak_memory_bytes": 2**30, "cuda_graph": True}
    if recipe:
        row["recipe"] = recipe
    rows.append(row)
json.dump({"versions": "LibTorch test", "results": rows}, open(out, "w"))
PY
SH
# python3: reference_bench.py follows the gate protocol (FILE.ready, wait for FILE; round r > 1:
# FILE.r); HANG=1: the peer never gets past its compile. Anything else: the real python3.
cat > fake_python.sh <<'SH'
#!/usr/bin/env bash
[[ "$1" == *reference_bench.py ]] || exec python3 "$@"
echo "peer $*" >> "$CALLS"
[ "${HANG:-0}" = 1 ] && exec sleep 60
exec python3 - "$@" <<'PY'
import json, os, sys, time
args = sys.argv[1:]
val = lambda k: args[args.index(k) + 1] if k in args else ""
kind = val("--float8-recipe") if val("--mode") == "float8" else "bf16"
base = {"bf16": 70.0, "tensorwise": 100.0, "rowwise": 90.0}[kind]
res = {"framework": f"fake {kind}", "tokens_per_step": int(val("--micro-batch")) * int(val("--seq-len")),
       "peak_memory_gib": 2.0, "rounds": []}
for r in range(1, int(val("--rounds")) + 1):
    gate = val("--wait-for") + ("" if r == 1 else f".{r}")
    open(gate + ".ready", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    with open(os.environ["CALLS"], "a") as f:
        f.write(f"timed {kind} round {r}\n")
    res["rounds"].append({"tokens_per_s": base + r - 1, "model_tflops": 1.0})
    json.dump(res, open(val("--json"), "w"))
PY
SH
mkdir -p fakebin
printf '#!/usr/bin/env bash\nexit 1\n' > fakebin/nvidia-smi  # no utilization to wait on
chmod +x fake_fp8train.sh fake_python.sh fakebin/nvidia-smi
export PATH="$WORK/fakebin:$PATH"
CURVE=$FP8T_SOURCE_DIR/scripts/curve-bench.sh

FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --models gpt2-124m \
  --parallel 1 --out "$WORK/curve" --commit abc1234 > curve.out 2>&1 || { cat curve.out; fail "curve-bench.sh exited non-zero"; }
# The order (--parallel 1): peer bf16 round 1, fp8train bf16 (autotune on), then every row with
# autotune off; fp8train before the peer in round 2, the peer first again in round 3; then the
# tensorwise peer with delayed,current.
grep -E "^(timed|fp8train)" "$CALLS" | sed -E 's/^fp8train .*--precisions ([a-z0-9,]+)( --recipes ([a-z,]+))?.*gemm_autotune=(true|false).*-r([0-9]).json$/fp8 \1 \3 \4 r\5/' \
  > order.txt
head -12 order.txt > got.txt
cat > want.txt <<'TXT'
timed bf16 round 1
fp8 bf16  true r1
fp8 bf16,fp8 delayed,current,block false r1
fp8 bf16  true r2
timed bf16 round 2
fp8 bf16,fp8 delayed,current,block false r2
timed bf16 round 3
fp8 bf16  true r3
fp8 bf16,fp8 delayed,current,block false r3
timed tensorwise round 1
fp8 fp8 delayed,current true r1
fp8 fp8 delayed,current true r2
TXT
diff want.txt got.txt || { cat curve.out; fail "the rounds do not interleave as documented"; }
[ "$(grep -c '^timed' "$CALLS")" = 9 ] && [ "$(grep -c '^fp8train' "$CALLS")" = 12 ] \
  || { cat "$CALLS"; fail "expected 3 peers x 3 rounds and (3 slots + 1 autotune-off) x 3 rounds"; }
# Both sides: gpt2-124m's micro-batch 16 and sequence 1024 (configs/gpt2-124m.yaml).
grep "^peer " "$CALLS" | grep -q -- "--micro-batch 16 --seq-len 1024" || fail "the peer's shape is not the config's"
! grep "^fp8train " "$CALLS" | grep -qv -- "train.micro_batch_size=16" || fail "fp8train's micro-batch is not the config's"
grep -q '"commit": "abc1234"' curve/environment.json || fail "the commit is not recorded"

# The table (ratios: medians, range from the extreme combinations, digits up to the first one
# where the range's ends differ): fp8train current 114..116 over tensorwise 100..102: 1.14x
# (1.12-1.16); over fp8train bf16 80..82: 1.42 (1.39-1.45), 1.4 would show both ends as 1.4;
# tensorwise 100..102 over PyTorch bf16 70..72: 1.4 (1.4-1.5), the ends differ in the first
# decimal; fp8train bf16 over PyTorch bf16: 1.14 (1.11-1.17); delayed 110..112 over 100..102:
# 1.10 (1.08-1.12), not 1.1 (1.1-1.1).
row() { grep -F "| gpt2-124m | $1 |" curve/curve.md || { cat curve/curve.md; fail "no row '$1'"; }; }
row "fp8train fp8:current" | grep -qF "| 3 | 115 (114–116) | 3.0 (2.0–4.0) | 1.00 | 1.42× (1.39–1.45) | 1.14× (1.12–1.16) torchao float8 tensorwise |" \
  || { cat curve/curve.md; fail "fp8:current's cells"; }
row "torchao float8 tensorwise" | grep -qF "| 101 (100–102) | 1.0 (1.0–1.0) | 2.00 | 1.4× (1.4–1.5) |" \
  || { cat curve/curve.md; fail "the tensorwise peer's cells"; }
row "fp8train bf16" | grep -qF "| 1.14× (1.11–1.17) PyTorch bf16 |" || { cat curve/curve.md; fail "bf16 against PyTorch"; }
row "fp8train fp8:delayed" | grep -qF "| 1.10× (1.08–1.12) torchao" || { cat curve/curve.md; fail "delayed's ratio digits"; }
row "fp8train fp8:current (GEMM autotune off)" | grep -qF "| 110 (109–111) |" || fail "the autotune-off row"
grep -q "commit abc1234" curve/curve.md || fail "the table does not name the commit"

# --parallel auto: gpt2-124m's three peers compile at once, then each round times them in turn,
# each beside its fp8train rows.
: > "$CALLS"
FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --models gpt2-124m \
  --repeats 1 --autotune on --out "$WORK/par" > par.out 2>&1 || { cat par.out; fail "curve-bench.sh (parallel)"; }
[ "$(grep -E '^(peer|timed|fp8train)' "$CALLS" | cut -d' ' -f1-2 | tr '\n' '|')" = \
  "peer scripts/reference_bench.py|peer scripts/reference_bench.py|peer scripts/reference_bench.py|timed bf16|fp8train bench|timed tensorwise|fp8train bench|timed rowwise|fp8train bench|" ] \
  || { cat "$CALLS"; fail "--parallel auto does not start gpt2-124m's peers together"; }

# A peer that never finishes its compile: stopped at --deadline, named as not run; the script ends.
: > "$CALLS"
start=$(date +%s)
HANG=1 FP8T_COMPILE_ESTIMATE=1 FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --models gpt2-124m \
  --peers bf16 --recipes current --autotune on --repeats 1 --out "$WORK/late" --deadline $(( start + 4 )) \
  > late.out 2>&1 || { cat late.out; fail "curve-bench.sh (deadline) exited non-zero"; }
[ $(( $(date +%s) - start )) -le 15 ] || fail "curve-bench.sh ran long past its deadline"
grep -F "| gpt2-124m | PyTorch bf16 (ended before its timed steps" late/curve.md \
  || { cat late.out; fail "the stopped peer is not named as not run"; }
# With the compile estimate over the time left, the peer is not even started.
FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --models gpt2-124m \
  --peers rowwise --recipes block --autotune on --repeats 1 --out "$WORK/short" --deadline $(( $(date +%s) + 20 )) \
  > short.out 2>&1 || { cat short.out; fail "curve-bench.sh (short deadline) exited non-zero"; }
grep -F "| gpt2-124m | torchao float8 rowwise (not started: " short/curve.md | grep -q "its compile takes about 45 s" \
  || { cat short/curve.md; fail "the skipped peer is not named with its reason"; }
grep -q "is torchao's float8 rowwise recipe, the peer torchao-rowwise; fp8train's own rowwise recipe is --recipes rowwise" \
  short.out || { cat short.out; fail "the old peer name rowwise is taken without the note"; }

# torchao's rowwise and fp8train's rowwise, beside each other: two rows that say whose they are.
FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$WORK/fake_fp8train.sh" --models gpt2-124m \
  --peers torchao-rowwise --recipes block,rowwise --autotune on --repeats 1 --out "$WORK/rw" > rw.out 2>&1 \
  || { cat rw.out; fail "curve-bench.sh --peers torchao-rowwise --recipes rowwise"; }
[ -s rw/gpt2-124m/peer-torchao-rowwise.json ] || { ls rw/gpt2-124m; fail "no peer-torchao-rowwise.json"; }
grep -F "| gpt2-124m | fp8train fp8:rowwise |" rw/curve.md | grep -qF "| 1.056× (one run each) torchao float8 rowwise |" \
  || { cat rw/curve.md; fail "fp8train's rowwise row is not beside torchao's"; }
grep -qF "| gpt2-124m | torchao float8 rowwise |" rw/curve.md || { cat rw/curve.md; fail "no torchao rowwise row"; }
# fp8train's recipes are its registry's: the real program refuses an unknown one, before any run.
: > "$CALLS"
set +e
FP8T_PYTHON=$WORK/fake_python.sh bash "$CURVE" --fp8train "$FP8TRAIN" --models gpt2-124m --recipes rowwise,nope \
  --out "$WORK/nope" > nope.out 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "curve-bench.sh: --recipes: fp8.recipe (--fp8-recipe): expected one of delayed, current, block, rowwise, got 'nope'" nope.out \
  || { cat nope.out; fail "an unknown recipe: exit $rc, expected 2 naming the registry's recipes"; }
[ ! -s "$CALLS" ] || { cat "$CALLS"; fail "something ran before the unknown recipe was refused"; }
echo "curve-bench: rounds interleaved, shapes shared, table medians/ranges/ratio digits, deadline honoured"
