# --dry-run --plan-*: the memory per rank on clusters this machine is not part of (Llama 3 8B and
# 70B shapes), the verdicts and the levers, bad --plan-* input, and that nothing is written.
# Dry runs only: the plan builds no model and reads no data (a few seconds in all).
source "$(dirname "$0")/lib.sh"
mkdir "$WORK/logs"
RUNS="$WORK/runs"  # the run folder a real run of these configs would write; a plan must not

# plan NAME CONFIG FLAGS...: a planning dry run; stdout in logs/NAME.out, stderr in logs/NAME.err,
# the exit code in RC[NAME].
declare -A RC
plan() {
  local name=$1 config=$2; shift 2
  set +e
  "$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/$config" --set data.train_path=no-such-file.bin \
    --out-dir "$RUNS" --dry-run "$@" >"logs/$name.out" 2>"logs/$name.err"
  RC[$name]=$?
  set -e
}
# verdict NAME RC "fits"|"does not fit": the exit code and the verdict line agree with the expectation.
verdict() {
  local name=$1 rc=$2 want=$3
  [ "${RC[$name]}" = "$rc" ] || { cat "logs/$name.out" "logs/$name.err"; fail "$name: exit ${RC[$name]}, expected $rc"; }
  grep -q "^verdict: $want:" "logs/$name.out" || { cat "logs/$name.out"; fail "$name: expected 'verdict: $want'"; }
}
# lever NAME SETTING VERDICT: the lever table has a row for SETTING with that verdict.
lever() {
  grep -E -q "^  $2 +[0-9.]+ +[0-9.]+  $3 " "logs/$1.out" || { cat "logs/$1.out"; fail "$1: no lever '$2' that says '$3'"; }
}

# Llama 3 8B at 8192 tokens on 8 x 80 GiB: DDP and ZeRO-1 (whose full gradient buckets persist
# over train.grad_accum_steps 256, so that more ranks do not help) do not fit, ZeRO-3 does.
for cluster in 8x80 2x141; do
  for zero in 0 1 3; do
    plan "8b-$cluster-zero$zero" llama3-8b.yaml --set model.seq_len=8192 --plan-world-size "${cluster%x*}" \
      --plan-device-memory "${cluster#*x}" --plan-zero "$zero"
  done
done
verdict 8b-8x80-zero0 2 "does not fit"
lever 8b-8x80-zero0 "dist.zero 3" "fits"
lever 8b-8x80-zero0 "train.recompute block" "does not fit"
grep -q "does not fit on 8 x 80 GiB" logs/8b-8x80-zero0.err || fail "the refusal does not name the cluster"
verdict 8b-8x80-zero1 2 "does not fit"
lever 8b-8x80-zero1 "dist.zero 3" "fits"
lever 8b-8x80-zero1 "16 ranks" "does not fit"
lever 8b-8x80-zero1 "train.grad_accum_steps 1" "fits"
verdict 8b-8x80-zero3 0 "fits"
grep -q "dist.zero 3 (ZeRO-3: weights, gradients and AdamW moments sharded over 8 ranks)" logs/8b-8x80-zero3.out \
  || fail "the zero-3 plan does not say how it shards"
grep -q "gathered weights of 2 units" logs/8b-8x80-zero3.out || fail "the zero-3 plan has no gathered units"

# ... on 2 x 141 GiB: DDP does not fit, ZeRO-1 and ZeRO-3 do.
verdict 8b-2x141-zero0 2 "does not fit"
lever 8b-2x141-zero0 "dist.zero 1" "fits"
verdict 8b-2x141-zero1 0 "fits"
verdict 8b-2x141-zero3 0 "fits"

# Llama 3 70B (recompute block in its file) on 16 x 80 GiB with ZeRO-3: 1 byte/parameter of
# state is 66 GiB; with the two units' gradients and the activations it does not fit, bf16
# moments or 32 ranks make it fit.
plan 70b-16x80 llama3-70b.yaml --plan-world-size 16 --plan-device-memory 80 --plan-zero 3
verdict 70b-16x80 2 "does not fit"
grep -q "train.recompute block" logs/70b-16x80.out || fail "the 70B plan does not say recompute block"
lever 70b-16x80 "train.moments_dtype bf16" "fits"
lever 70b-16x80 "32 ranks" "fits"
# The config's dist.zero (3) and torchrun's world size (1 here) when --plan-zero is not given.
plan 70b-1rank llama3-70b.yaml --plan-device-memory 80
verdict 70b-1rank 2 "does not fit"
grep -q "memory per rank on 1 x 80 GiB: dist.zero 3" logs/70b-1rank.out || fail "the config's zero level was not planned"
lever 70b-1rank "32 ranks" "fits"
# dist.prefetch 0 on the planned rank frees one gathered unit (under 2 GiB), not half the state.
lever 70b-1rank "dist.prefetch 0" "does not fit"
awk '/^  dist.prefetch 0 / { found = 1; if ($3 + 0 > 2.0) bad = 1 } END { exit !(found && !bad) }' logs/70b-1rank.out ||
  fail "70b-1rank: dist.prefetch 0 saves more than one gathered unit"

# A real run that cannot fit this machine (70B on the CPU) is refused, exit 2, with the planner's
# table: one line per category and lever, not one line of 1,700 characters.
set +e
"$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/llama3-70b.yaml" --set data.train_path=no-such-file.bin \
  --device cpu --out-dir "$RUNS" >logs/refused.out 2>logs/refused.err
rc=$?
set -e
[ "$rc" = 2 ] || { cat logs/refused.err; fail "70B on the CPU: exit $rc, expected 2"; }
for want in "cannot fit on cpu: it needs at least" "^  weights (FP32 master" "^verdict: does not fit:" \
            "^levers, each alone" "model.d_model=8192"; do
  grep -q -- "$want" logs/refused.err || { cat logs/refused.err; fail "the refusal lacks '$want'"; }
done
awk 'length > 600 { exit 1 }' logs/refused.err || { cat logs/refused.err; fail "the refusal has a line over 600 characters"; }

# Bad input: --plan-* without --dry-run, nonsensical values, a shard group that does not divide.
bad() {
  local name=$1 want=$2; shift 2
  set +e
  "$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/default.yaml" --out-dir "$RUNS" "$@" >"logs/$name.out" 2>"logs/$name.err"
  RC[$name]=$?
  set -e
  [ "${RC[$name]}" = 2 ] && grep -q -- "$want" "logs/$name.err" \
    || { cat "logs/$name.err"; fail "$name: exit ${RC[$name]}, expected 2 and '$want'"; }
}
bad no-dry-run "add --dry-run" --plan-world-size 16
bad zero-ranks "plan-world-size: Value 0 not in range 1 to 1048576" --dry-run --plan-world-size 0
bad million-ranks "plan-world-size: Value 2000000 not in range 1 to 1048576" --dry-run --plan-world-size 2000000
bad nan-memory "expected a positive number of GiB" --dry-run --plan-device-memory nan
bad negative-memory "expected a positive number of GiB" --dry-run --plan-device-memory=-80
bad zero-2 "plan-zero" --dry-run --plan-zero 2
bad shard-group "dist.shard_group_size 3 does not divide the 16 ranks" --dry-run --plan-world-size 16 --plan-zero 3 \
  --set dist.shard_group_size=3

# A plan reads no data, so it needs no data.train_path (issue 62): the README's command as written,
# a config whose data.source is tokens with no path, plans (exit 0 or 2 with a verdict). A dry run
# that builds the job still needs the path.
set +e
"$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/llama3-70b.yaml" --out-dir "$RUNS" --dry-run --plan-world-size 16 \
  --plan-device-memory 80 >logs/no-data.out 2>logs/no-data.err
RC[no-data]=$?
set -e
{ [ "${RC[no-data]}" = 0 ] || [ "${RC[no-data]}" = 2 ]; } && grep -q "^verdict: " logs/no-data.out \
  || { cat logs/no-data.out logs/no-data.err; fail "a plan without data.train_path: exit ${RC[no-data]}, no verdict"; }
! grep -q "data.train_path" logs/no-data.err || { cat logs/no-data.err; fail "a plan asked for data.train_path"; }
bad build-needs-data "data.train_path" --dry-run --set data.source=tokens

# Nothing was written: no run folder, no file in the working directory but this test's logs.
[ ! -e "$RUNS" ] || fail "a planning dry run created $RUNS"
[ "$(ls -A "$WORK")" = "logs" ] || fail "files appeared in the working directory: $(ls -A "$WORK")"
echo "ok"
