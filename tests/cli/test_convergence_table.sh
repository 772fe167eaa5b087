# scripts/convergence_table.py on a study made by hand (no training): tokens to bf16's final
# validation loss and the effective speedup, checked against numbers worked out by hand.
# 2 seeds, 40 steps of 1000 tokens, an evaluation every 10 steps (10,000 tokens). bf16 ends at
# 2.4 and 2.6: the target is 2.5, bf16's tokens to it 40,000 (its final evaluation).
# - fp8-delayed reaches it in both seeds: s1 between 2.9 at 20,000 and 2.4 at 30,000:
#   20,000 + 0.4/0.5 x 10,000 = 28,000; s2 first between 3.0 at 10,000 and 2.0 at 20,000 = 15,000
#   (it rises above the target again and crosses later: the first crossing counts);
#   mean 21,500, sd 13,000/sqrt(2) = 9,192.39.
# - fp8-current never reaches it: "not reached", no mean, no speedup.
# - fp8-block: s1 ends exactly at the target (2.5 at 40,000: at or below counts), s2 never: "not
#   reached by every seed (1 of 2)", no mean, no speedup.
# - fp8-rowwise: s1 is below the target at its first evaluation (10,000, no earlier point), s2
#   crosses between 2.6 and 2.3: 13,333.33; no bench row: no speedup.
# - The seeds' mean curves: worked out where the JSON is checked (fp8-delayed's crosses at 19,375;
#   fp8-block's does not, though its seed 1 does).
# Bench, three rounds (files): bf16 1000, 1100, 1050 tokens/s (median 1050, range 1000-1100),
# fp8-delayed 1500, 1400, 1450 (median 1450, range 1400-1500). Effective speedup of fp8-delayed:
# (40000/1050) / (21500/1450) = 2.56921..., range (40000/1100)/(28000/1400) = 1.81818...
# to (40000/1000)/(15000/1500) = 4. One round (the first file alone): the range is the round's
# timed steps, bf16 1000 x 1000 tokens / 1250..800 ms = 800..1250 tokens/s, fp8-delayed
# 1000 x 1000 / 800..625 ms = 1250..1600: speedup (40000/1000)/(21500/1500) = 2.7907, range
# (40000/1250)/(28000/1250) = 1.42857 to (40000/800)/(15000/1600) = 5.33333.
# Then bad bench input (exit 2, the file and key named, nothing overwritten), and the same study
# through scripts/convergence.sh --no-train, which reads DIR/bench/*.json and puts the tables into
# the page of fp8train report.
source "$(dirname "$0")/lib.sh"
TABLE=$FP8T_SOURCE_DIR/scripts/convergence_table.py
run_rc() { set +e; "$@" > out.txt 2> err.txt; rc=$?; set -e; }

# The study: DIR/plan.tsv, runs/<run>/{summary.json,metrics.jsonl}, bench/bench-r{1,2,3}.json.
python3 - study <<'PY'
import json, os, sys
out = sys.argv[1]
curves = {  # val loss at steps 10, 20, 30, 40
    "bf16": ([4.0, 3.0, 2.6, 2.4], [4.0, 3.1, 2.7, 2.6]),
    "fp8-delayed": ([3.5, 2.9, 2.4, 2.3], [3.0, 2.0, 2.6, 2.45]),
    "fp8-current": ([4.0, 3.2, 2.8, 2.7], [4.1, 3.3, 2.9, 2.8]),
    "fp8-block": ([3.5, 2.8, 2.6, 2.5], [3.6, 3.0, 2.7, 2.55]),
    "fp8-rowwise": ([2.4, 2.2, 2.1, 2.0], [2.6, 2.3, 2.2, 2.1]),
}
plan = []
for seed in (1, 2):
    for label, per_seed in curves.items():
        run = f"{label}-s{seed}"
        vals = per_seed[seed - 1]
        os.makedirs(f"{out}/runs/{run}")
        with open(f"{out}/runs/{run}/metrics.jsonl", "w") as f:
            for step in range(1, 41):
                f.write(json.dumps({"step": step, "loss": 5.0 - step / 20, "tokens_seen": step * 1000}) + "\n")
                if step % 10 == 0:
                    f.write(json.dumps({"step": step, "val_loss": vals[step // 10 - 1], "elapsed_s": step}) + "\n")
        json.dump({"status": "completed", "run": run, "precision": label.split("-")[0], "steps": 40, "tokens": 40000,
                   "final_loss": 3.0, "final_val_loss": vals[-1], "best_val_loss": min(vals), "tokens_per_s": 99.0},
                  open(f"{out}/runs/{run}/summary.json", "w"))
        plan.append(f"{run}\t{label}\t{seed}\texisting\t\t\n")
open(f"{out}/plan.tsv", "w").write("".join(plan))
os.makedirs(f"{out}/bench")
rounds = {"bf16": [1000, 1100, 1050], "fp8-delayed": [1500, 1400, 1450], "fp8-current": [1600, 1600, 1600],
          "fp8-block": [1550, 1500, 1600]}
steps = {"bf16": (800, 1250), "fp8-delayed": (625, 800), "fp8-current": (600, 650), "fp8-block": (600, 700)}
for r in range(3):
    rows = []
    for label, tps in rounds.items():
        row = {"precision": label.split("-")[0], "tokens_per_step": 1000, "tokens_per_s": tps[r],
               "median_step_ms": 1e6 / tps[r], "min_step_ms": steps[label][0], "max_step_ms": steps[label][1]}
        if "-" in label:
            row["recipe"] = label.split("-")[1]
        rows.append(row)
    json.dump({"results": rows, "timed_steps": 20}, open(f"{out}/bench/bench-r{r + 1}.json", "w"))
PY

# Three rounds. fp8-current's final loss is 10% above bf16's: its verdict fails (exit 1).
run_rc python3 "$TABLE" study 0.5 --bench study/bench/bench-r1.json study/bench/bench-r2.json study/bench/bench-r3.json
[ "$rc" = 1 ] || { cat out.txt err.txt; fail "the constructed study: exit $rc, expected 1 (fp8-current's verdict)"; }
python3 - study/convergence.json <<'PY' || fail "convergence.json: tokens to target or the speedup"
import json, math, sys
d = json.load(open(sys.argv[1]))
L = d["labels"]
# Tolerance: a relative 1e-12, the rounding of a few float operations on decimal inputs (28,000
# comes out as 27999.999999999996); a wrong formula is off by far more.
def close(x, want):
    assert x is not None and abs(x - want) <= 1e-12 * abs(want), (x, want)
ttl = d["time_to_loss"]
assert ttl["target_val_loss"] == 2.5, ttl  # (2.4 + 2.6) / 2 is 2.5 in binary too: fp8-block-s1 ends on it
close(ttl["reference_tokens"], 40000)
assert ttl["bench_files"] == [f"study/bench/bench-r{r}.json" for r in (1, 2, 3)], ttl["bench_files"]
b = L["bf16"]["tokens_to_target"]
assert b["status"] == "reference" and b["per_seed"] == {"1": 40000, "2": 40000}, b
close(L["bf16"]["time_to_target_s"], 40000 / 1050)
assert L["bf16"]["effective_speedup"] is None
t = L["fp8-delayed"]["tokens_to_target"]
assert t["status"] == "reached" and t["n"] == 2 and t["reached"] == 2, t
close(t["per_seed"]["1"], 28000)
close(t["per_seed"]["2"], 15000)  # the first crossing; the later one would be 36,667
close(t["mean"], 21500)
close(t["sd"], 13000 / math.sqrt(2))
close(t["min"], 15000)
close(t["max"], 28000)
bench = L["fp8-delayed"]["bench"]
assert bench["rounds"] == 3 and bench["range_over"] == "rounds" and bench["values"] == [1500, 1400, 1450], bench
close(bench["tokens_per_s"], 1450)
close(bench["low"], 1400)
close(bench["high"], 1500)
assert (L["bf16"]["bench"]["tokens_per_s"], L["bf16"]["bench"]["low"], L["bf16"]["bench"]["high"]) == (1050, 1000, 1100)
s = L["fp8-delayed"]["effective_speedup"]
close(s["value"], (40000 / 1050) / (21500 / 1450))  # 2.569...
close(s["value"], 2.5692137320044297)
close(s["low"], (40000 / 1100) / (28000 / 1400))     # 1.818...
close(s["high"], 4.0)                                # (40000 / 1000) / (15000 / 1500)
close(s["tokens_ratio"], 40000 / 21500)
close(s["throughput_ratio"], 1450 / 1050)
close(L["fp8-delayed"]["time_to_target_s"], 21500 / 1450)
c = L["fp8-current"]
assert c["tokens_to_target"]["status"] == "not reached" and c["tokens_to_target"]["reached"] == 0, c
assert c["tokens_to_target"]["per_seed"] == {"1": None, "2": None} and c["tokens_to_target"]["mean"] is None
assert c["effective_speedup"] is None and c["time_to_target_s"] is None and c["bench"]["tokens_per_s"] == 1600
assert c["verdict"] == "FAIL", c["verdict"]
k = L["fp8-block"]["tokens_to_target"]
assert k["status"] == "not reached by every seed" and (k["n"], k["reached"]) == (2, 1), k
close(k["per_seed"]["1"], 40000)  # exactly at the target at its final evaluation
assert k["per_seed"]["2"] is None and k["mean"] is None and L["fp8-block"]["effective_speedup"] is None
r = L["fp8-rowwise"]["tokens_to_target"]
assert r["status"] == "reached", r
close(r["per_seed"]["1"], 10000)  # below the target at the first evaluation
close(r["per_seed"]["2"], 10000 + 0.1 / 0.3 * 10000)
assert L["fp8-rowwise"]["bench"] is None and L["fp8-rowwise"]["effective_speedup"] is None
assert L["fp8-rowwise"]["time_to_target_s"] is None
# The seeds' mean curves (steps 10..40): bf16 4.0, 3.05, 2.65, 2.5 (the target at 40,000);
# fp8-delayed 3.25, 2.45, 2.5, 2.375: first at or below 2.5 at 20,000, from 3.25 at 10,000:
# 10,000 + 0.75/0.8 x 10,000 = 19,375 (not the seeds' mean 21,500); fp8-current ends at 2.75 and
# fp8-block at 2.525 (though its seed 1 reaches the target): not reached; fp8-rowwise starts at
# 2.5: 10,000, no bench row.
m = {k: L[k]["mean_curve"] for k in L}
close(m["bf16"]["final_val_loss"], 2.5)
close(m["bf16"]["tokens_to_target"], 40000)
assert m["bf16"]["effective_speedup"] is None
close(m["fp8-delayed"]["final_val_loss"], 2.375)
close(m["fp8-delayed"]["tokens_to_target"], 19375)
sm = m["fp8-delayed"]["effective_speedup"]
close(sm["value"], (40000 / 1050) / (19375 / 1450))  # 2.851
close(sm["low"], (40000 / 1100) / (19375 / 1400))    # the tokens/s ranges' ends alone
close(sm["high"], (40000 / 1000) / (19375 / 1500))
close(sm["tokens_ratio"], 40000 / 19375)
assert m["fp8-current"]["tokens_to_target"] is None and m["fp8-current"]["effective_speedup"] is None
close(m["fp8-block"]["final_val_loss"], 2.525)
assert m["fp8-block"]["tokens_to_target"] is None and m["fp8-block"]["effective_speedup"] is None
close(m["fp8-rowwise"]["tokens_to_target"], 10000)
assert m["fp8-rowwise"]["effective_speedup"] is None
print("convergence.json: tokens to target and the effective speedup ok")
PY
expect_line() {  # expect_line FILE LINE: the exact line is in FILE
  grep -qxF -- "$2" "$1" || { cat "$1"; fail "$1 lacks the line: $2"; }
}
expect_line study/convergence.md "| bf16 | s1 40,000, s2 40,000 | 40,000 (the target's run length) | 1,050 (1,000–1,100; 3 rounds) | 38.1 | reference |"
expect_line study/convergence.md "| fp8-delayed | s1 28,000, s2 15,000 | 21,500 ± 9,192 | 1,450 (1,400–1,500; 3 rounds) | 14.8 | 2.57× (1.82–4.00) |"
expect_line study/convergence.md "| fp8-current | s1 not reached, s2 not reached | not reached | 1,600 (1,600–1,600; 3 rounds) | - | - (not reached) |"
expect_line study/convergence.md "| fp8-block | s1 40,000, s2 not reached | not reached by every seed (1 of 2) | 1,550 (1,500–1,600; 3 rounds) | - | - (not reached) |"
expect_line study/convergence.md "| fp8-rowwise | s1 10,000, s2 13,333 | 11,667 ± 2,357 | - (not benched) | - | - (not benched) |"
expect_line study/convergence.md "| fp8-delayed | 2.3750 | 19,375 | 2.85× (2.63–3.10) |"
expect_line study/convergence.md "| fp8-block | 2.5250 | not reached | - (not reached) |"
expect_line study/convergence.md "| fp8-rowwise | 2.0500 | 10,000 | - (not benched) |"
expect_line study/convergence.md "| bf16 | 2.5000 | 40,000 (the target's run length) | reference |"
grep -q "^Tokens to bf16's final validation loss (the target: the mean of bf16's final val losses, 2.5000, reached by bf16 at 40,000 tokens)" study/convergence.md \
  || { cat study/convergence.md; fail "convergence.md: the target line"; }
# The page of the tables alone (no report page given): the same rows as HTML.
grep -qF "<td>fp8-delayed</td><td>s1 28,000, s2 15,000</td><td>21,500 ± 9,192</td>" study/convergence.html \
  && grep -qF "<td>2.57× (1.82–4.00)</td>" study/convergence.html || { cat study/convergence.html; fail "convergence.html"; }

# One round: the range of its timed steps.
mkdir one && cp -r study/plan.tsv study/runs one/
run_rc python3 "$TABLE" one 0.5 --bench study/bench/bench-r1.json
[ "$rc" = 1 ] || { cat out.txt err.txt; fail "one bench round: exit $rc, expected 1"; }
python3 - one/convergence.json <<'PY' || fail "one bench round: the range of its timed steps"
import json, sys
L = json.load(open(sys.argv[1]))["labels"]
def close(x, want):
    assert abs(x - want) <= 1e-12 * abs(want), (x, want)
b, f = L["bf16"]["bench"], L["fp8-delayed"]["bench"]
assert b["rounds"] == 1 and b["range_over"] == "timed steps", b
close(b["low"], 800); close(b["high"], 1250); close(f["low"], 1250); close(f["high"], 1600)
s = L["fp8-delayed"]["effective_speedup"]
close(s["value"], (40000 / 1000) / (21500 / 1500))  # 2.7907
close(s["low"], (40000 / 1250) / (28000 / 1250))    # 1.42857
close(s["high"], (40000 / 800) / (15000 / 1600))    # 5.33333
print("one round ok")
PY
expect_line one/convergence.md "| fp8-delayed | s1 28,000, s2 15,000 | 21,500 ± 9,192 | 1,500 (1,250–1,600; 1 round: its timed steps) | 14.3 | 2.79× (1.43–5.33) |"

# Bad bench input: exit 2, the file and the key named, the tables of the last call untouched.
sums() { md5sum study/convergence.md study/convergence.json study/convergence.html; }
before=$(sums)
python3 -c "import json; d = json.load(open('study/bench/bench-r2.json')); del d['results'][1]['tokens_per_step']; json.dump(d, open('nokey.json', 'w'))"
run_rc python3 "$TABLE" study 0.5 --bench study/bench/bench-r1.json nokey.json
[ "$rc" = 2 ] && grep -qF "convergence_table.py: --bench nokey.json: results[1] lacks 'tokens_per_step'" err.txt \
  || { cat out.txt err.txt; fail "a bench row without tokens_per_step: exit $rc"; }
sed 's/"tokens_per_step": 1000/"tokens_per_step": 2000/' study/bench/bench-r3.json > other.json
run_rc python3 "$TABLE" study 0.5 --bench other.json
[ "$rc" = 2 ] && grep -qF -- "--bench other.json: results[0] (bf16) tokens_per_step 2000, the runs' 1000: not the step the study trained" err.txt \
  || { cat out.txt err.txt; fail "a bench of another step: exit $rc"; }
echo '{"results": [' > torn.json
run_rc python3 "$TABLE" study 0.5 --bench torn.json
[ "$rc" = 2 ] && grep -q "^convergence_table.py: --bench torn.json: " err.txt || { cat out.txt err.txt; fail "bench JSON cut short: exit $rc"; }
mv study/runs/fp8-block-s2/metrics.jsonl block-metrics.jsonl
run_rc python3 "$TABLE" study 0.5
[ "$rc" = 2 ] && grep -qF "study/runs/fp8-block-s2/metrics.jsonl: missing" err.txt || { cat out.txt err.txt; fail "a run without metrics.jsonl: exit $rc"; }
mv block-metrics.jsonl study/runs/fp8-block-s2/metrics.jsonl
[ "$(sums)" = "$before" ] || fail "bad input overwrote the tables"

# Through convergence.sh --no-train: DIR/bench/*.json read, the tables inside the report's page.
run_rc bash "$FP8T_SOURCE_DIR/scripts/convergence.sh" --fp8train "$FP8TRAIN" --config "$FP8T_SOURCE_DIR/configs/char-anna.yaml" \
  --no-train --seeds 2 --recipes delayed,current,block,rowwise --out study
[ "$rc" = 1 ] || { cat out.txt err.txt; fail "convergence.sh --no-train on the constructed study: exit $rc, expected 1"; }
expect_line study/convergence.md "| fp8-delayed | s1 28,000, s2 15,000 | 21,500 ± 9,192 | 1,450 (1,400–1,500; 3 rounds) | 14.8 | 2.57× (1.82–4.00) |"
grep -qF "<td>2.57× (1.82–4.00)</td>" study/convergence.html && grep -q '"fp8-delayed-s2"' study/convergence.html \
  || fail "convergence.html: the tables and the runs' curves in one page"
[ ! -e study/report.html ] || fail "convergence.sh left the report's page beside convergence.html"
echo "test_convergence_table: ok"
