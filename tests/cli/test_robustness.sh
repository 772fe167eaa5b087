#!/usr/bin/env bash
# Nothing lost, nothing silent: non-finite steps, checkpoint integrity, run-folder locking,
# impossible sizes, token files read on demand, disk full, resume with changed hyperparameters,
# signals. Tiny models and few steps: the whole script takes seconds.
source "$(dirname "$0")/lib.sh"


# ---- non-finite steps: skipped, counted, diverged after train.max_skipped_steps in a row --------------
# lr 1e30: step 1 throws every weight out of range (finite), from step 2 on the loss is NaN.
expect_rc 3 "divergence" tiny nan --steps 20 --set train.lr=1e30 --set train.min_lr=1e30 \
  --set train.schedule=constant --set train.checkpoint_interval=1 --set train.max_skipped_steps=3
out_has "diverged at step 2"
[ "$(json_get runs/nan/summary.json 'd["status"]')" = diverged ] || fail "summary status is not diverged"
[ "$(json_get runs/nan/summary.json 'd["diverged_at_step"]')" = 2 ] || fail "summary lacks the divergence step"
[ "$(json_get runs/nan/summary.json 'd["skipped_steps"]')" = 3 ] || fail "summary: skipped_steps != 3"
python3 - runs/nan/metrics.jsonl <<'PY' || fail "metrics.jsonl does not count the skipped steps"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert [r["skipped_steps"] for r in rows] == [0, 1, 1, 1], rows
PY
# No checkpoint is written while steps are skipped: the one of step 1 (its weights finite, if
# ruined by lr 1e30) loads; a changed lr is allowed on resume and recorded.
[ ! -e runs/nan/checkpoint.step-1.pt ] && [ ! -e runs/nan/checkpoint.step-2.pt ] || fail "a checkpoint during the skips"
expect_rc 0 "resume after divergence" tiny nan --resume --steps 3 --set train.lr=1e-3 --set train.min_lr=1e-3 \
  --set train.schedule=constant --set train.checkpoint_interval=1 --set train.max_skipped_steps=3
[ -f runs/nan/config.resume-1.yaml ] || fail "the replaced config is not kept as config.resume-1.yaml"
grep -q "lr: 1e+30\|lr: 1.0e+30" runs/nan/config.resume-1.yaml || fail "config.resume-1.yaml is not the old config"
grep -q "train.lr changed: 1e+30 -> 0.001" runs/nan/train.log || fail "the log does not state the lr change"
# steps 2 and 3 again skipped (the weights of step 1 are out of range under any lr)
[ "$(json_get runs/nan/summary.json 'd["skipped_steps"]')" = 2 ] || fail "skipped_steps not counted after the resume"
# A model change on resume stays bad input.
expect_rc 2 "resume with another model" tiny nan --resume --steps 5 --set model.d_model=64
out_has "model.d_model"

# ---- checkpoint integrity ------------------------------------------------------------------------
[ -f runs/nan/checkpoint.step-1.pt ] || fail "the checkpoint before the last one is not kept (checkpoint.step-1.pt)"
cp -r runs/nan runs/flip
python3 - runs/flip/checkpoint.pt <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x01; open(p, 'wb').write(b)
PY
expect_rc 2 "flipped byte" tiny flip --resume --steps 6
out_has "corrupt checkpoint"; out_has "--resume-from 1"
touch runs/flip/.checkpoint.pt.tmp.999.0  # what a killed write leaves
expect_rc 0 "resume from the previous checkpoint" tiny flip --resume-from 1 --steps 4  # the fallback the message names
[ ! -e runs/flip/.checkpoint.pt.tmp.999.0 ] || fail "the temp file of a killed write was not removed"

# ---- one writer per run folder; SIGHUP stops like SIGTERM ----------------------------------------
# train.checkpoint_every_min: checkpoints by the clock (here every 0.06 s) with checkpoint_interval 0.
"$FP8TRAIN" --out-dir "$WORK/runs" --run-name busy "${TINY[@]}" --steps 100000 --set train.checkpoint_every_min=0.001 \
  >"$WORK/busy.txt" 2>&1 &
busy=$!
trap 'kill "$busy" 2>/dev/null || true; rm -rf "$WORK"' EXIT  # never leave it running when a check fails
for _ in $(seq 100); do [ -s runs/busy/metrics.jsonl ] && break; sleep 0.1; done
[ -s runs/busy/metrics.jsonl ] || fail "the first run did not start"
pid=$(cat runs/busy/.fp8train.lock)
[ "$pid" = "$busy" ] || fail "the lock file names pid '$pid', the run is $busy"
for _ in $(seq 100); do [ -s runs/busy/checkpoint.pt ] && break; sleep 0.1; done
[ -s runs/busy/checkpoint.pt ] || fail "no time-based checkpoint (train.checkpoint_every_min)"
expect_rc 2 "second writer" tiny busy --resume --steps 100000
out_has "in use by pid $pid"
expect_rc 2 "second fresh run" tiny busy --overwrite --steps 3
out_has "in use by pid $pid"
kill -HUP "$pid"
set +e; wait "$busy"; rc=$?; set -e
[ "$rc" = 130 ] || { cat "$WORK/busy.txt" >&2; fail "SIGHUP: exit $rc, expected 130"; }
[ "$(json_get runs/busy/summary.json 'd["status"]')" = interrupted ] || fail "SIGHUP: not interrupted"

# ---- flags: a swallowed flag and contradictory flags are exit 2, nothing written ---------------------
expect_rc 2 "--run-name --overwrite" "$FP8TRAIN" --out-dir "$WORK/flags" --run-name --overwrite --steps 2
out_has "--run-name needs a value"
expect_rc 2 "--resume --overwrite" "$FP8TRAIN" --out-dir "$WORK/flags" --resume --overwrite
out_has "--resume and --overwrite"
[ ! -e flags ] || fail "a refused command line wrote $(ls flags)"

# ---- sizes that cannot fit: exit 2, nothing written ----------------------------------------------
expect_rc 2 "micro_batch_size 1e12" tiny huge1 --set train.micro_batch_size=1000000000000
out_has "train.micro_batch_size"
expect_rc 2 "d_model 1e6" tiny huge2 --set model.d_model=1000000 --set model.n_head=1
out_has "model.d_model"
[ ! -e runs/huge1 ] && [ ! -e runs/huge2 ] || fail "an impossible config wrote a run folder"

# ---- a 10 GB token file is opened, not read ------------------------------------------------------
truncate -s 10G big.bin  # sparse: no disk space used; headerless nanoGPT .bin of 5e9 zero tokens
# measure ARGS...: "seconds max_rss_mb" of one dry run (a fresh python per run: ru_maxrss is a maximum).
measure() {
  python3 - "$FP8TRAIN" "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time()
r = subprocess.run([sys.argv[1], "--dry-run", "--quiet"] + sys.argv[2:], capture_output=True, text=True)
assert r.returncode == 0, r.stderr
print(f"{time.time() - t:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f}")
PY
}
read -r base_s base_mb < <(measure)  # LibTorch alone is a few hundred MB resident
read -r big_s big_mb < <(measure --set data.source=tokens --set data.train_path=big.bin)
echo "10 GB token file: ${big_s} s, max RSS ${big_mb} MB (a dry run without it: ${base_s} s, ${base_mb} MB)"
python3 -c "import sys; s, b, m, bm = map(float, sys.argv[1:]); sys.exit(0 if s - b < 2.0 and m - bm < 200 else 1)" \
  "$big_s" "$base_s" "$big_mb" "$base_mb" || fail "the 10 GB token file did not open fast with low memory"
rm -f big.bin

# ---- disk full: exit 3, summary failed, the previous checkpoint intact (needs root for a tmpfs) ---
# Room for one checkpoint of the tiny model (~230 kB) and the logs, not for the second one.
if [ "$(id -u)" = 0 ] && mkdir -p full && mount -t tmpfs -o size=420k tmpfs full 2>/dev/null; then
  set +e
  "$FP8TRAIN" --out-dir "$WORK/full" --run-name f "${TINY[@]}" --steps 40 --set train.checkpoint_interval=1 \
    >"$WORK/out.txt" 2>&1
  rc=$?
  set -e
  status=$(json_get full/f/summary.json 'd["status"]' 2>/dev/null || echo none)
  err=$(json_get full/f/summary.json 'd["error"]' 2>/dev/null || echo none)
  cp -r full/f runs/after-full
  umount full
  expect_rc 0 "resume from the checkpoint kept through the disk-full failure" tiny after-full --resume --steps 3
  [ "$rc" = 3 ] || { cat "$WORK/out.txt" >&2; fail "disk full: exit $rc, expected 3"; }
  [ "$status" = failed ] || fail "disk full: summary status '$status'"
  echo "$err" | grep -q "No space left" || fail "disk full: the summary does not say why: $err"
  [ "$(grep -c "cannot write the log file" "$WORK/out.txt")" -le 1 ] || fail "disk full: log-file errors repeated"
else
  echo "skipped: disk full (needs root and tmpfs mounts)"
fi
echo "test_robustness: ok"
