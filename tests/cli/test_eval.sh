# fp8train eval (README "Evaluating a checkpoint"):
#  - a tiny FP8 (delayed scaling) run on token files with a validation file: `eval --run` gives the
#    final val_loss of its metrics.jsonl bit for bit (the trainer's batches, arithmetic and FP8
#    scales, on the same machine);
#  - the same weights exported as safetensors (fp8train names with --config, HF names with the
#    config.json beside them) give the run folder's loss bit for bit in fp32 (the FP32 weights
#    are the same; a safetensors file holds no FP8 scales, so the comparison is in fp32);
#  - --batches all: every window once (sequences = windows), the same mean for two batch sizes
#    within 1e-6 relative (only the order of float32 sums differs);
#  - errors are exit 2 naming the thing: a token id beyond the vocabulary, a manifest.json of a
#    larger vocabulary or of another tokenizer than the training tokens', no checkpoint, no run
#    folder, a missing data file, a --step the folder does not keep, --weights without a config,
#    --json onto a run folder file;
#  - a run folder that another process holds is read all the same, with a note (and one for a
#    checkpoint being written);
#  - the run folder is byte for byte (names, sizes, times, contents) as before every eval;
#  - --json - prints the JSON instead of the line.
source "$(dirname "$0")/lib.sh"

# Tokens < 64 (the model's vocabulary): a fixed pseudo-random sequence, nanoGPT .bin (uint16).
python3 - <<'PY' || fail "could not write the token files"
import random, struct
r = random.Random(7)
def write(name, n, top=64):
    with open(name, "wb") as f:
        f.write(struct.pack(f"<{n}H", *[r.randrange(top) for _ in range(n)]))
write("train.bin", 6000)
write("val.bin", 1201)          # (1201 - 1) / 16 = 75 windows
write("bad.bin", 600, top=100)  # ids up to 99: another tokenizer's
PY
DATA=(--set data.source=tokens --set data.train_path="$WORK/train.bin" --set data.val_path="$WORK/val.bin")
tiny a "${DATA[@]}" --steps 12 --precision fp8 --set train.eval_batches=3 --set train.micro_batch_size=4 \
  || fail "training the tiny run"
[ -f runs/a/checkpoint.pt ] || fail "the run wrote no checkpoint"

snapshot() {  # every file of the run folder (hidden ones too): name, size, mtime, checksum
  (cd runs/a && find . -type f -printf '%p %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}
snapshot > before.txt

# ---- the run folder: the trainer's final val_loss, bit for bit --------------------------------
"$FP8TRAIN" eval --run runs/a --json a.json > a.txt || fail "eval --run"
grep -q "^eval: loss" a.txt || fail "eval printed no result line: $(cat a.txt)"
python3 - runs/a/metrics.jsonl a.json <<'PY' || fail "eval's loss is not the trainer's final val_loss"
import json, sys
logged = [r for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r][-1]
d = json.load(open(sys.argv[2]))
print(f"trainer val_loss {logged['val_loss']!r} (step {logged['step']}), eval {d['loss']!r} (step {d['step']})")
assert d["loss"] == logged["val_loss"], (d["loss"], logged["val_loss"])
assert d["step"] == logged["step"] == 12
assert d["precision"] == "fp8" and d["fp8_recipe"] == "delayed" and d["device"] == "cpu", d
assert d["sequences"] == 3 * 4 and d["tokens"] == 3 * 4 * 16 and d["batches"] == 3, d
assert abs(d["perplexity"] - 2.718281828459045 ** d["loss"]) < 1e-9 * d["perplexity"], d
PY

# ---- safetensors: fp8train names (--config) and HF names (config.json beside) ------------------
"$FP8TRAIN" eval --run runs/a --precision fp32 --json fp32.json > /dev/null || fail "eval --precision fp32"
"$FP8TRAIN" export --run runs/a --out own.safetensors 2> /dev/null || fail "export"
mkdir hf && "$FP8TRAIN" export --run runs/a --out hf/model.safetensors --names hf 2> /dev/null || fail "export --names hf"
"$FP8TRAIN" eval --weights own.safetensors --config runs/a/config.yaml --precision fp32 --json own.json > /dev/null \
  || fail "eval --weights (fp8train names)"
"$FP8TRAIN" eval --weights hf/model.safetensors --data val.bin --batches 3 --batch-size 4 --json hf.json > /dev/null \
  || fail "eval --weights (HF names, config.json)"
python3 - fp32.json own.json hf.json <<'PY' || fail "the safetensors evals differ from the run folder's"
import json, sys
ref, own, hf = (json.load(open(p)) for p in sys.argv[1:])
print(f"fp32: run folder {ref['loss']!r}, fp8train names {own['loss']!r}, HF names {hf['loss']!r}")
assert own["loss"] == ref["loss"] and hf["loss"] == ref["loss"], (ref, own, hf)
assert own["step"] == hf["step"] == 12 and hf["precision"] == "fp32", hf
PY

# ---- --batches all ------------------------------------------------------------------------------
"$FP8TRAIN" eval --run runs/a --batches all --batch-size 7 --json all7.json > /dev/null || fail "--batches all"
"$FP8TRAIN" eval --run runs/a --batches all --batch-size 5 --json all5.json > /dev/null || fail "--batches all (5)"
python3 - all7.json all5.json <<'PY' || fail "--batches all"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["sequences"] == b["sequences"] == 75 and a["tokens"] == 75 * 16, (a, b)
assert a["batches"] == 11 and b["batches"] == 15, (a["batches"], b["batches"])  # 10 x 7 + 5; 15 x 5
rel = abs(a["loss"] - b["loss"]) / b["loss"]
print(f"all windows: {a['loss']!r} (batches of 7), {b['loss']!r} (of 5), relative difference {rel:.1e}")
assert rel <= 1e-6, rel
PY

# ---- errors: exit 2, naming the thing ----------------------------------------------------------
expect_rc 2 "token id beyond the vocabulary" "$FP8TRAIN" eval --run runs/a --data bad.bin
out_has "bad.bin"; out_has "model.vocab_size is 64"; out_has "another tokenizer"
mkdir other && cp val.bin other/val.bin
printf '{"tokenizer": "/x/gpt2.json", "vocab_size": 50257, "shards": [{"file": "val.bin", "split": "val", "tokens": 1201}]}\n' \
  > other/manifest.json
expect_rc 2 "a manifest of a larger vocabulary" "$FP8TRAIN" eval --run runs/a --data other/val.bin
out_has "tokenizer/vocabulary mismatch"; out_has "other/manifest.json"; out_has "50257"
mkdir -p empty/run && cp runs/a/config.yaml empty/run/
expect_rc 2 "no checkpoint" "$FP8TRAIN" eval --run empty/run
out_has "no checkpoint"; out_has "empty/run/checkpoint.pt"
expect_rc 2 "no run folder" "$FP8TRAIN" eval --run nowhere
out_has "nowhere"
expect_rc 2 "a missing data file" "$FP8TRAIN" eval --run runs/a --data missing.bin
out_has "missing.bin"
expect_rc 2 "a step the folder does not keep" "$FP8TRAIN" eval --run runs/a --step 7
out_has "no checkpoint of step 7"
"$FP8TRAIN" eval --run runs/a --step 12 > /dev/null 2>&1 || fail "--step 12 (checkpoint.pt's step)"
expect_rc 2 "safetensors without a config" "$FP8TRAIN" eval --weights own.safetensors
out_has "model shape is unknown"
expect_rc 2 "--json onto a run folder file" "$FP8TRAIN" eval --run runs/a --json runs/a/summary.json --overwrite
out_has "summary.json"
expect_rc 2 "--json over an existing file" "$FP8TRAIN" eval --run runs/a --json a.json
out_has "a.json exists"
expect_rc 2 "both --run and --weights" "$FP8TRAIN" eval --run runs/a --weights own.safetensors
out_has "one of --run"

snapshot > after.txt
cmp before.txt after.txt || { diff before.txt after.txt >&2; fail "eval changed the run folder"; }

# ---- a run folder in use: read all the same, with a note --------------------------------------
cp -a runs/a busy
python3 - busy <<'PY' &
import fcntl, os, sys, time
fd = os.open(os.path.join(sys.argv[1], ".fp8train.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
open(os.path.join(sys.argv[1], "locked"), "w").close()
time.sleep(30)
PY
HOLDER=$!
trap 'kill "$HOLDER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [ -f busy/locked ] && break; sleep 0.1; done
"$FP8TRAIN" eval --run busy --json busy.json > /dev/null 2> busy.log || { cat busy.log; fail "eval of a held run folder"; }
grep -q "in use by pid" busy.log || { cat busy.log; fail "no note that the run folder is in use"; }
: > "busy/.checkpoint.pt.tmp.$HOLDER.0"
"$FP8TRAIN" eval --run busy > /dev/null 2> busy.log || { cat busy.log; fail "eval while a checkpoint is written"; }
grep -q "being written" busy.log || { cat busy.log; fail "no note that a checkpoint is being written"; }
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true
python3 -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); assert a['loss']==b['loss']" a.json busy.json \
  || fail "the held run folder's loss differs"

# ---- the run's training tokens and --data from tokenizers that differ (both with manifest.json) ----
printf '{"tokenizer": "/x/bpe-64.json", "vocab_size": 64, "separator": {"id": 0}, "shards": [{"file": "train.bin", "split": "train", "tokens": 6000}, {"file": "val.bin", "split": "val", "tokens": 1201}]}\n' \
  > manifest.json
mkdir t60 && cp val.bin t60/val.bin
printf '{"tokenizer": "/x/bpe-60.json", "vocab_size": 60, "separator": {"id": 59}, "shards": [{"file": "val.bin", "split": "val", "tokens": 1201}]}\n' \
  > t60/manifest.json
expect_rc 2 "another tokenizer than the training tokens'" "$FP8TRAIN" eval --run runs/a --data t60/val.bin
out_has "tokenizer mismatch"; out_has "bpe-64.json"; out_has "t60/manifest.json"

# ---- --json -: the JSON on stdout instead of the line ----------------------------------------------
"$FP8TRAIN" eval --run runs/a --json - 2> /dev/null | python3 -c "import json,sys; assert json.load(sys.stdin)['step'] == 12" \
  || fail "--json - printed no JSON"
echo "ok"
