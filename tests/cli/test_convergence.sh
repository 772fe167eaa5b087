# scripts/convergence.sh on a tiny character-level model, 2 seeds of bf16 and fp8 (delayed):
# - a passing study: exit 0, mean ± sd per label, the difference ± its standard error (checked
#   against the pooled formula), the markdown and JSON tables, every run's curves in the HTML page,
#   and the same training windows for bf16 and fp8 of one seed, other windows for another seed;
# - a study built to fail: fp8.margin 17 (the largest) scales every FP8 operand 2^17 below its
#   range, so the block's E4M3 inputs and weights keep only their elements above about a third of
#   the tensor's amax, as one or two subnormal steps, the rest flushed to zero: fp8 trains much
#   worse (here about +14%): exit 1 and the verdict names the target and the noise;
# - a study cut short (--skip-done keeps the runs above, --deadline in the past stops the third
#   seed): the table of what ran and the runs not run; bad usage: exit 2, nothing trained;
# - the bench rounds (--bench-rounds) of a study with 2 micro-batches a step: fp8train bench of
#   every label before the training, at the study's step (--micro-batches 2: the table refuses a
#   bench of another step size), bf16 first in odd rounds and last in even ones, from a config
#   file of data.order sequential (bench refuses that order: convergence.sh gives bench a random
#   one, as configs/llama-125m.yaml needs); their tokens/s in convergence.json; --skip-done keeps
#   them, --deadline stops the ones not started;
# - --stats-seed: fp8.stats in the FP8 runs of that seed alone.
#   (tests/cli/test_convergence_table.sh checks the arithmetic on a study made by hand.)
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1  # a tiny model: one thread per run is fastest (and kind to a shared machine)
# Text with structure beyond one character (letters inside words), so context helps.
python3 - <<'PY' > book.txt
import random
random.seed(3)
words = "the cat sat on a mat and dog ran to big red box".split()
print(" ".join(random.choice(words) + ("." if random.random() < 0.1 else "") for _ in range(12000)))
PY
tiny=(model.n_layer=1 model.d_model=32 model.n_head=2 model.seq_len=32 model.dropout=0
      train.micro_batch_size=8 train.eval_interval=10 train.eval_batches=4 train.warmup_steps=2
      train.lr=1e-2 train.min_lr=1e-3 train.log_interval=5)
conv() { bash "$FP8T_SOURCE_DIR/scripts/convergence.sh" --fp8train "$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/char-anna.yaml" \
           --set "data.train_path=$WORK/book.txt" "${tiny[@]}" --steps 40 --seeds 2 --recipes delayed "$@"; }
run_rc() { set +e; "$@" > out.txt 2>&1; rc=$?; set -e; }

# A passing study; the windows each run trained on are appended to windows.rank0, run after run.
FP8TRAIN_TEST_WINDOWS=$WORK/windows run_rc conv --out "$WORK/pass" --stats-seed 2
[ "$rc" = 0 ] || { cat out.txt; fail "the passing study: exit $rc, expected 0"; }
grep -q "^| fp8-delayed | 2/2 | [0-9.]* ± [0-9.]* | [0-9.]* ± [0-9.]* | [-+][0-9.]* ± [0-9.]* (.*%) | .* | pass: " out.txt \
  || { cat out.txt; fail "no 'mean ± sd' row with a passing verdict for fp8-delayed"; }
grep -q "^| bf16 | 2/2 | .* | reference |$" pass/convergence.md || { cat pass/convergence.md; fail "convergence.md: no bf16 row"; }
python3 - pass/convergence.json <<'PY' || fail "convergence.json"
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["verdict"] == "pass" and d["failed"] == [] and d["complete"] and d["target_percent"] == 0.5, d
runs = {r["run"]: r for r in d["runs"]}
assert sorted(runs) == ["bf16-s1", "bf16-s2", "fp8-delayed-s1", "fp8-delayed-s2"], sorted(runs)
stats = {}
for label in ("bf16", "fp8-delayed"):
    vals = [runs[f"{label}-s{s}"]["final_val_loss"] for s in (1, 2)]
    f = d["labels"][label]["final_val_loss"]
    assert vals[0] != vals[1], f"{label}: both seeds gave one loss {vals}"
    # mean and sample sd of two values, exact up to rounding (1e-12)
    assert abs(f["mean"] - sum(vals) / 2) < 1e-12 and abs(f["sd"] - abs(vals[0] - vals[1]) / math.sqrt(2)) < 1e-12, f
    stats[label] = f
c = d["labels"]["fp8-delayed"]["final_val_loss_vs_reference"]
sp = math.sqrt((stats["bf16"]["sd"] ** 2 + stats["fp8-delayed"]["sd"] ** 2) / 2)  # pooled, n = 2 each
assert abs(c["diff"] - (stats["fp8-delayed"]["mean"] - stats["bf16"]["mean"])) < 1e-12, c
assert abs(c["se"] - sp) < 1e-12, (c, sp)  # sp * sqrt(1/2 + 1/2)
assert d["labels"]["fp8-delayed"]["best_val_loss_vs_reference"]["se"] > 0
PY
for run in bf16-s1 bf16-s2 fp8-delayed-s1 fp8-delayed-s2; do
  [ -f "pass/runs/$run/metrics.jsonl" ] && [ -f "pass/runs/$run.log" ] || fail "$run: no metrics.jsonl or log"
  [ ! -e "pass/runs/$run/checkpoint.pt" ] || fail "$run: the checkpoint was not deleted"
  grep -q "\"$run\"" pass/convergence.html || fail "the HTML page lacks $run"
done
# --stats-seed 2: the FP8 run of seed 2 alone logs per-slot FP8 statistics.
python3 - pass/runs <<'PY' || fail "--stats-seed 2: fp8.stats in fp8-delayed-s2 alone"
import json, sys
def fp8_rows(run):
    return sum("fp8" in r for r in map(json.loads, open(f"{sys.argv[1]}/{run}/metrics.jsonl")))
counts = {run: fp8_rows(run) for run in ("bf16-s2", "fp8-delayed-s1", "fp8-delayed-s2")}
assert counts["bf16-s2"] == 0 and counts["fp8-delayed-s1"] == 0 and counts["fp8-delayed-s2"] >= 8, counts  # 40 steps, a log row every 5
PY
# Seed-major order: bf16-s1, fp8-delayed-s1, bf16-s2, fp8-delayed-s2, 40 steps x 8 rows each.
python3 - windows.rank0 <<'PY' || fail "the training windows"
import sys
rows = open(sys.argv[1]).read().splitlines()
assert len(rows) == 4 * 40 * 8, len(rows)
b1, f1, b2, f2 = (rows[i * 320:(i + 1) * 320] for i in range(4))
assert b1 == f1 and b2 == f2, "bf16 and fp8 of one seed trained on different windows"
assert b1 != b2, "seeds 1 and 2 trained on the same windows"
PY

# Built to fail: the largest FP8 margin flushes most FP8 operands to zero (bf16 ignores fp8.*).
run_rc conv --out "$WORK/fail" --set fp8.margin=17
[ "$rc" = 1 ] || { cat out.txt; fail "the degraded fp8 study: exit $rc, expected 1"; }
grep -q "^| fp8-delayed | 2/2 | .* | FAIL: +[0-9.]*%: beyond the target (0.5%) and the noise (2 se = " out.txt \
  || { cat out.txt; fail "no FAIL verdict naming the target and the noise"; }
grep -q "verdict FAIL: fp8-delayed" out.txt || { cat out.txt; fail "stderr does not name the failed label"; }
[ "$(json_get fail/convergence.json 'd["verdict"], d["failed"]')" = "FAIL ['fp8-delayed']" ] || fail "fail/convergence.json"

# Cut short: seeds 1-2 kept, seed 3 past the deadline; the table of what ran, exit 0.
run_rc conv --out "$WORK/pass" --seeds 3 --skip-done --deadline "$(date +%s)"
[ "$rc" = 0 ] || { cat out.txt; fail "the partial study: exit $rc, expected 0"; }
grep -q "^| fp8-delayed | 2/3 | .* | pass: " out.txt && grep -q "^| bf16-s3 | 3 | not run |" out.txt \
  && grep -q "^Not run or cut short: bf16-s3, fp8-delayed-s3 (the study is incomplete)." out.txt \
  || { cat out.txt; fail "the partial table"; }
[ "$(json_get pass/convergence.json 'd["complete"], d["not_run"]')" = "False ['bf16-s3', 'fp8-delayed-s3']" ] \
  || fail "pass/convergence.json of the partial study"

# Bench rounds before the training, at the training's step: 1 seed, 20 steps of 2 micro-batches.
sed 's/^  order: random /  order: sequential /' "$FP8T_SOURCE_DIR/configs/char-anna.yaml" > sequential.yaml
grep -q "^  order: sequential " sequential.yaml || fail "sequential.yaml: no data.order line to change"
bench_study=(--config "$WORK/sequential.yaml" --seeds 1 --steps 20 --set train.grad_accum_steps=2 --bench-steps 2 --bench-warmup 1)
run_rc conv --out "$WORK/bench" "${bench_study[@]}" --bench-rounds 2
[ "$rc" = 0 ] || { cat out.txt; fail "the study with bench rounds: exit $rc, expected 0"; }
grep -q "^== bench round 2: .* bench .* --precisions fp8,bf16 --micro-batches 2 " out.txt \
  && [ "$(grep -n "^== bench round 2:" out.txt | cut -d: -f1)" -lt "$(grep -n "^== bf16-s1: training" out.txt | cut -d: -f1)" ] \
  || { cat out.txt; fail "bench round 2 did not run before the training, fp8 first, with --micro-batches 2"; }
python3 - "$WORK/bench" <<'PY' || fail "the bench rounds in convergence.json"
import json, statistics, sys
out = sys.argv[1]
d = json.load(open(f"{out}/convergence.json"))
rounds = [json.load(open(f"{out}/bench/bench-r{r}.json")) for r in (1, 2)]
assert [[x["precision"] for x in b["results"]] for b in rounds] == [["bf16", "fp8"], ["fp8", "bf16"]], rounds
assert all(b["micro_batches_per_step"] == 2 and b["timed_steps"] == 2 for b in rounds)
assert d["time_to_loss"]["reference_tokens"] == 20 * 2 * 8 * 32, d["time_to_loss"]  # steps x micro-batches x rows x seq
assert d["time_to_loss"]["bench_files"] == [f"{out}/bench/bench-r1.json", f"{out}/bench/bench-r2.json"]
for label, precision in (("bf16", "bf16"), ("fp8-delayed", "fp8")):
    tps = [next(x["tokens_per_s"] for x in b["results"] if x["precision"] == precision) for b in rounds]
    b = d["labels"][label]["bench"]
    assert b["values"] == tps and b["tokens_per_s"] == statistics.median(tps) and (b["low"], b["high"]) == (min(tps), max(tps)), (b, tps)
e = d["labels"]["fp8-delayed"]
assert (e["effective_speedup"] is None) == (e["tokens_to_target"]["mean"] is None), e
print("bench rounds ok")
PY
grep -q "<th>effective speedup (range)</th>" bench/convergence.html && grep -q '"fp8-delayed-s1"' bench/convergence.html \
  || fail "bench/convergence.html: the time-to-loss table and the runs' curves"
run_rc conv --out "$WORK/bench" "${bench_study[@]}" --bench-rounds 3 --skip-done --deadline "$(date +%s)"
[ "$rc" = 0 ] && grep -q "^== bench round 2: kept (done earlier)" out.txt && grep -q "^== bench round 3: not run: past the deadline" out.txt \
  && [ ! -e bench/bench/bench-r3.json ] || { cat out.txt; fail "bench rounds with --skip-done and --deadline: exit $rc"; }

# Bad usage: exit 2 and nothing trained.
run_rc conv --out "$WORK/bad" --set model.n_layers=2
[ "$rc" = 2 ] && grep -q "model.n_layers" out.txt && [ ! -e bad/runs ] || { cat out.txt; fail "a bad --set key: exit $rc"; }
run_rc conv --out "$WORK/bad" --recipes delayed,fast
[ "$rc" = 2 ] && grep -q "unknown recipe 'fast'" out.txt || { cat out.txt; fail "a bad recipe: exit $rc"; }
run_rc conv --out "$WORK/bad" --deadline soon
[ "$rc" = 2 ] && grep -q "deadline expects" out.txt || { cat out.txt; fail "a bad deadline: exit $rc"; }
run_rc conv --out "$WORK/bad" --bench-rounds two
[ "$rc" = 2 ] && grep -q "bench-rounds expects a whole number" out.txt || { cat out.txt; fail "a bad --bench-rounds: exit $rc"; }
run_rc conv --out "$WORK/bad" --stats-seed 3
[ "$rc" = 2 ] && grep -q "stats-seed 3: the study has seeds 1..2" out.txt || { cat out.txt; fail "--stats-seed beyond --seeds: exit $rc"; }
echo "test_convergence: ok"
