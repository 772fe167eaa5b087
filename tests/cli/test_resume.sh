# Stopping and resuming gives the same loss sequence as an uninterrupted run, bit for bit
# (CPU; fp32 and fp8 emulation, with dropout so the RNG state matters; the fp8 runs keep their
# AdamW moments in bf16, whose beta^t products are rebuilt from the step count on resume).
# With rows every 10 steps, a run stopped at step 17 and resumed writes the uninterrupted run's
# rows (issue 62): the checkpoint carries the log window, so row 20 averages steps 11 to 20 as the
# uninterrupted row does, bit for bit, and the resumed step 18 writes no row of its own; on 2
# ranks too (each rank's part of the window comes back to it).
source "$(dirname "$0")/lib.sh"
for prec in fp32 fp8; do
  common=(--precision "$prec" --steps 30 --set train.log_interval=1 --set model.dropout=0.1)
  [ "$prec" = fp8 ] && common+=(--moments-dtype bf16)
  fp8train_short "straight-$prec" "${common[@]}"
  fp8train_short "split-$prec" "${common[@]}" --stop-after 12
  [ "$(json_get runs/split-$prec/summary.json 'd["status"]')" = stopped ] || fail "stop-after status"
  fp8train_short "split-$prec" "${common[@]}" --resume
  diff <(losses "runs/straight-$prec/metrics.jsonl") <(losses "runs/split-$prec/metrics.jsonl") \
    || fail "$prec: resumed loss sequence differs"
  [ "$(losses "runs/split-$prec/metrics.jsonl" | wc -l)" = 30 ] || fail "$prec: expected 30 loss rows"
done
WINDOW=(--steps 40 --set train.log_interval=10 --set train.checkpoint_interval=0)
tiny window-straight "${WINDOW[@]}" || fail "the uninterrupted 40 steps"
tiny window-split "${WINDOW[@]}" --stop-after 17 || fail "the first 17 steps"
tiny window-split "${WINDOW[@]}" --resume || fail "the resumed steps 18 to 40"
python3 - runs/window-straight/metrics.jsonl runs/window-split/metrics.jsonl <<'PY' || fail "the resumed rows differ"
import json, sys
KEYS = ("step", "loss", "grad_norm", "lr", "skipped_steps", "tokens_seen")
def rows(path):
    return [{k: r.get(k) for k in KEYS} for r in map(json.loads, open(path)) if "loss" in r]
straight, split = rows(sys.argv[1]), rows(sys.argv[2])
assert [r["step"] for r in straight] == [1, 10, 20, 30, 40], straight
assert split == straight, "\n".join(f"{a}\n{b}" for a, b in zip(straight, split) if a != b) or (straight, split)
print(f"{len(split)} rows equal the uninterrupted run's (step 20: loss {split[2]['loss']!r})")
PY
# The same on 2 ranks (DDP, Gloo): each rank's part of the window comes back to it.
two() { launch_by_hand 2 --out-dir "$WORK/runs" "${TINY[@]}" --steps 20 --set train.log_interval=10 \
          --set train.checkpoint_interval=0 "$@" || { cat rank*.log; fail "2 ranks: $*"; }; }
two --run-name window2-straight
two --run-name window2-split --stop-after 7
two --run-name window2-split --resume
python3 - runs/window2-straight/metrics.jsonl runs/window2-split/metrics.jsonl <<'PY' || fail "2 ranks: the resumed rows differ"
import json, sys
KEYS = ("step", "loss", "grad_norm", "skipped_steps", "tokens_seen")
rows = lambda path: [{k: r.get(k) for k in KEYS} for r in map(json.loads, open(path)) if "loss" in r]
straight, split = rows(sys.argv[1]), rows(sys.argv[2])
assert [r["step"] for r in straight] == [1, 10, 20] and split == straight, (straight, split)
PY
echo "ok"
