# Your own data, end to end (README "Your own data"):
#   (a) a BPE tokenizer (vocabulary 512) trained here on a generated Windows-1252 corpus
#       (tests/cli/make_corpus.py: the test needs no outside file); scripts/prepare_data.py
#       makes 1 validation and >= 3 training shards from .txt, .jsonl and .parquet parts of it,
#       byte for byte the same with 1 and 2 workers and with the BPE as vocab.json + merges.txt;
#       its errors are exit 2 naming the file, leaving no --out folder;
#       a vocabulary beyond 16 bits gives uint32 (v7) shards, and is refused as uint16;
#   (b) 40 steps on 2 Gloo ranks over all shards with data.order sequential: every training
#       window is used once in the first epoch, none twice in the second, and the two ranks'
#       windows are disjoint (seen through FP8TRAIN_TEST_WINDOWS); epoch and tokens_seen reported;
#   (c) --stop-after 20 and --resume: the same losses and windows as the unbroken run, bit for bit;
#   (d) bad shards are exit 2 naming the file: wrong magic, truncated, a token >= model.vocab_size,
#       a glob that matches nothing;
#   (e) a shard truncated while a run reads it: exit 3, summary status failed naming the file,
#       the last checkpoint intact (the run resumes once the file is back).
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import tokenizers, pyarrow, tqdm' 2>/dev/null; then
  "$PY" -m pip install -q tokenizers pyarrow tqdm || fail "cannot install tokenizers, pyarrow and tqdm into $PY"
fi
PREPARE=("$PY" "$FP8T_SOURCE_DIR/scripts/prepare_data.py" --quiet)
BOOK="$WORK/book.txt"  # about 400 KB of prose with curly quotes, dashes and accents, as Windows-1252
"$PY" "$FP8T_SOURCE_DIR/tests/cli/make_corpus.py" "$BOOK" 2000 --encoding cp1252 || fail "could not make the corpus"

# ---- (a) tokenizer and shards ----------------------------------------------------------------
mkdir corpus
"$PY" - "$BOOK" <<'PY' || fail "could not make the test inputs"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
text = open(sys.argv[1], "rb").read().decode("cp1252", errors="replace")  # the corpus is Windows-1252
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text.split("\n\n"), trainers.BpeTrainer(
    vocab_size=512, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
tok.save("tokenizer.json")
# A wide vocabulary (70000 words) for the uint32 format.
words = {"<|endoftext|>": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(69998)}}
wide = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
wide.pre_tokenizer = pre_tokenizers.Whitespace()
wide.save("wide.json")
# Three parts of the corpus's start (about 7600 tokens): raw bytes (.txt), then paragraphs as .jsonl and .parquet.
raw = open(sys.argv[1], "rb").read()[:28000]
paragraphs = [p for p in raw.decode("cp1252", errors="replace").split("\n\n") if p.strip()]
third = len(paragraphs) // 3
open("corpus/part1.txt", "wb").write("\n\n".join(paragraphs[:third]).encode("cp1252", errors="replace"))
with open("corpus/part2.jsonl", "w") as f:
    for p in paragraphs[third:2 * third]:
        f.write(json.dumps({"id": len(p), "text": p}) + "\n")
pq.write_table(pa.table({"text": paragraphs[2 * third:]}), "corpus/part3.parquet")
PY
prep() { "${PREPARE[@]}" --tokenizer tokenizer.json --txt-docs blank-line --encoding cp1252 --shard-tokens 1500 --val-tokens 1000 "$@"; }
prep --out shards --workers 2 corpus > prep.log || { cat prep.log; fail "prepare_data.py failed"; }
prep --out shards1 --workers 1 corpus/part1.txt corpus/part2.jsonl corpus/part3.parquet > /dev/null \
  || fail "prepare_data.py --workers 1 failed"
for f in shards/*.bin; do cmp "$f" "shards1/$(basename "$f")" || fail "$f differs between 1 and 2 workers"; done
# The same BPE as GPT-2's vocab.json + merges.txt gives the same shards.
"$PY" -c "from tokenizers import Tokenizer; Tokenizer.from_file('tokenizer.json').model.save('.')"
prep --out shards2 --vocab vocab.json --merges merges.txt corpus > /dev/null || fail "prepare_data.py --vocab --merges failed"
for f in shards/*.bin; do cmp "$f" "shards2/$(basename "$f")" || fail "$f differs with vocab.json + merges.txt"; done
"$PY" - <<'PY' || fail "the shards or the manifest are wrong"
import glob, json, struct
m = json.load(open("shards/manifest.json"))
files = sorted(glob.glob("shards/data_*.bin"))
assert sorted(s["file"] for s in m["shards"]) == [f.split("/")[-1] for f in files], m["shards"]
assert m["shards"][0]["split"] == "val" and m["shards"][0]["file"] == "data_val_000000.bin"
train = [s for s in m["shards"] if s["split"] == "train"]
assert len(train) >= 3, f"{len(train)} training shards"
assert m["vocab_size"] == 512 and m["separator"]["token"] == "<|endoftext|>" and m["format"].startswith("llm.c shard v1")
assert m["inputs"] == ["corpus/part1.txt", "corpus/part2.jsonl", "corpus/part3.parquet"], m["inputs"]
sep = m["separator"]["id"]
for s in m["shards"]:
    b = open("shards/" + s["file"], "rb").read()
    magic, version, count = struct.unpack("<3i", b[:12])
    assert (magic, version, count) == (20240520, 1, s["tokens"]) and len(b) == 1024 + 2 * count, s
    assert b[12:1024] == bytes(1012), "header words 3..255 must be zero"
    tokens = struct.unpack(f"<{count}H", b[1024:])
    assert max(tokens) < 512 and tokens.count(sep) == s["documents"], s
val = m["shards"][0]
assert val["tokens"] >= 1000 and open("shards/data_val_000000.bin", "rb").read()[1024:1026] == struct.pack("<H", sep)
assert all(s["tokens"] == 1500 for s in train[:-1]) and sum(s["documents"] for s in m["shards"]) == m["documents"]
print(f"{len(m['shards'])} shards: {val['tokens']} validation tokens, {sum(s['tokens'] for s in train)} training tokens, "
      f"{m['documents']} documents")
PY
grep -q "train on them: --set data.source=tokens" prep.log || fail "prepare_data.py does not say how to train"

# prepare_data.py refuses bad input with exit 2, naming the file, and leaves nothing behind.
expect_prep_error() {  # expect_prep_error NEEDLE ARGS...
  local needle=$1; shift
  set +e; "${PREPARE[@]}" "$@" > perr.log 2>&1; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat perr.log; fail "prepare_data.py $*: exit $rc, expected 2"; }
  grep -qF -- "$needle" perr.log || { cat perr.log; fail "prepare_data.py $*: the error lacks '$needle'"; }
}
expect_prep_error "corpus/missing.txt" --tokenizer tokenizer.json --out bad corpus/missing.txt
printf '{"text": "fine"}\n{"text": 3}\n' > broken.jsonl
expect_prep_error "broken.jsonl:2" --tokenizer tokenizer.json --out bad broken.jsonl
[ ! -e bad ] || fail "a failed prepare_data.py left its --out folder: $(ls -A bad)"
expect_prep_error "no-such-tokenizer.json" --tokenizer no-such-tokenizer.json --out bad corpus
expect_prep_error "wide.json" --tokenizer wide.json --format uint16 --out bad corpus
expect_prep_error "holds shards already" --tokenizer tokenizer.json --out shards corpus
"${PREPARE[@]}" --tokenizer wide.json --out wide --shard-tokens 3000 --val-tokens 1000 --txt-docs blank-line \
  --encoding cp1252 corpus > /dev/null || fail "prepare_data.py with a 70000-token vocabulary failed"
[ "$(json_get wide/manifest.json 'd["format"]')" = "llm.c shard v7 (uint32)" ] || fail "a wide vocabulary is not v7"
"$FP8TRAIN" --config "$CONFIG" --dry-run --quiet --set data.source=tokens --set 'data.train_path=wide/data_train_*.bin' \
  --set data.val_path=wide/data_val_000000.bin --set model.vocab_size=70000 > wide.json.out \
  || fail "fp8train does not read prepare_data.py's uint32 shards"

# ---- (b) two ranks, sequential order ---------------------------------------------------------
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
two_ranks() {  # two_ranks WINDOW_LOG ARGS...: rank 0 and 1 by hand, as torchrun would start them
  local log=$1; shift
  local port; port=$(free_port)
  local pids=() rc=0
  for r in 0 1; do
    FP8TRAIN_TEST_WINDOWS="$log" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 "$FP8TRAIN" "$@" > "rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  [ "$rc" = 0 ] || { cat rank0.log rank1.log; fail "two-rank run $* failed"; }
}
DATA=(--set data.source=tokens --set 'data.train_path=shards/data_train_*.bin' --set data.val_path=shards/data_val_000000.bin
      --set model.vocab_size=512 --set model.seq_len=32)
TINY=(--config "$CONFIG" --out-dir "$WORK/runs" --quiet --steps 40 --set model.n_layer=1 --set model.d_model=32
      --set model.n_head=2 --set train.micro_batch_size=4 --set train.warmup_steps=2 --set train.log_interval=1
      --set train.eval_interval=20 --set train.eval_batches=2 "${DATA[@]}" --set data.order=sequential)
"$FP8TRAIN" "${TINY[@]}" --set run.quiet=false --dry-run > dry.log 2>&1 || { cat dry.log; fail "dry run"; }
two_ranks win-full "${TINY[@]}" --run-name full
"$PY" - runs/full win-full <<'PY' || fail "the sequential windows are wrong"
import json, sys
run, log = sys.argv[1], sys.argv[2]
s = json.load(open(run + "/summary.json"))
per_epoch = s["tokens_per_epoch"] // 32  # windows of model.seq_len per epoch
rows = {r: [tuple(map(int, line.split())) for line in open(f"{log}.rank{r}")] for r in (0, 1)}
steps, rows_per_rank = 40, 4
assert all(len(rows[r]) == steps * rows_per_rank for r in (0, 1)), {r: len(v) for r, v in rows.items()}
# Stream numbers: call c holds 8 rows, rank 0 the first 4 and rank 1 the next 4.
for r in (0, 1):
    assert [x[0] for x in rows[r]] == [c * 8 + r * 4 + i for c in range(steps) for i in range(4)], f"rank {r} rows"
total = steps * 8
assert per_epoch < total < 2 * per_epoch, (per_epoch, total)  # one full epoch, and part of the second
by_epoch = [{0: [], 1: []}, {0: [], 1: []}]
for r in (0, 1):
    for stream, file, offset in rows[r]:
        assert offset % 32 == 0, "sequential windows are non-overlapping: offsets are multiples of seq_len"
        by_epoch[stream // per_epoch][r].append((file, offset))
for e, ranks in enumerate(by_epoch):
    both = ranks[0] + ranks[1]
    assert len(set(both)) == len(both), f"epoch {e}: a window repeats"
    assert not set(ranks[0]) & set(ranks[1]), f"epoch {e}: the ranks share a window"
assert len(set(by_epoch[0][0] + by_epoch[0][1])) == per_epoch, "epoch 0 does not use every window"
files = {f for f, _ in by_epoch[0][0] + by_epoch[0][1]}
assert files == set(range(len(files))) and len(files) >= 3, files
assert s["tokens_seen"] == total * 32 and s["epoch"] == total / per_epoch, (s["tokens_seen"], s["epoch"])
rows_m = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"loss"' in l]
assert [r["tokens_seen"] for r in rows_m] == [(i + 1) * 8 * 32 for i in range(steps)]
assert rows_m[-1]["epoch"] == s["epoch"] and rows_m[0]["epoch"] == 8 / per_epoch
print(f"{per_epoch} windows per epoch over {len(files)} shards; {total} windows drawn: epoch 0 each once, "
      f"{total - per_epoch} of epoch 1 without repeats, ranks disjoint; epoch {s['epoch']:.3f}")
PY
want="data: $(json_get runs/full/summary.json 'd["train_tokens"]') training tokens, $(json_get runs/full/summary.json \
  'd["tokens_per_epoch"]') per epoch; 40 steps x 128 tokens"  # one process: 4 x 32 per step
grep -qF "$want" dry.log || { cat dry.log; fail "the dry run does not report '$want'"; }
grep -qF "order sequential" dry.log || fail "the dry run does not report the order"

# ---- (c) stop and resume ---------------------------------------------------------------------
two_ranks win-split "${TINY[@]}" --run-name split --stop-after 20
[ "$(json_get runs/split/summary.json 'd["status"]')" = stopped ] || fail "stop-after status"
two_ranks win-split "${TINY[@]}" --run-name split --resume
diff <(losses runs/full/metrics.jsonl) <(losses runs/split/metrics.jsonl) || fail "the resumed losses differ"
for r in 0 1; do cmp win-full.rank$r win-split.rank$r || fail "rank $r: the resumed run drew other windows"; done
[ "$(json_get runs/split/summary.json 'd["epoch"]')" = "$(json_get runs/full/summary.json 'd["epoch"]')" ] \
  || fail "the resumed epoch differs"

# ---- (d) bad shards: exit 2 naming the file --------------------------------------------------
expect_bad_shard() {  # expect_bad_shard NEEDLE [--set ...]: a dry run over bad/ must name NEEDLE
  local needle=$1; shift
  set +e
  "$FP8TRAIN" --config "$CONFIG" --dry-run --quiet "${DATA[@]}" --set 'data.train_path=bad/data_train_*.bin' "$@" \
    > bad.log 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { cat bad.log; fail "bad shard $needle: exit $rc, expected 2"; }
  grep -qF -- "$needle" bad.log || { cat bad.log; fail "the error does not name $needle"; }
}
reset_bad() { rm -rf bad && cp -r shards bad; }
reset_bad
"$PY" -c "import struct; f=open('bad/data_train_000002.bin','r+b'); f.write(struct.pack('<i', 20240521))"
expect_bad_shard "bad/data_train_000002.bin' has an llm.c header with bad magic 20240521"
reset_bad
truncate -s -6 bad/data_train_000003.bin
expect_bad_shard "bad/data_train_000003.bin' size mismatch"
reset_bad
"$PY" -c "import struct; f=open('bad/data_train_000002.bin','r+b'); f.seek(1024 + 2 * 77); f.write(struct.pack('<H', 600))"
expect_bad_shard "bad/data_train_000002.bin' holds token 600 at position 77"
expect_bad_shard "bad/nothing_*.bin' matches no file" --set 'data.train_path=bad/data_train_000001.bin,bad/nothing_*.bin'

# ---- (e) a shard truncated while the run reads it --------------------------------------------
reset_bad
LONG=(--config "$CONFIG" --out-dir "$WORK/runs" --run-name cut --quiet --steps 100000 --set model.n_layer=1
      --set model.d_model=32 --set model.n_head=2 --set train.micro_batch_size=4 --set train.log_interval=1
      --set train.eval_interval=0 --set train.checkpoint_interval=5 "${DATA[@]}" --set 'data.train_path=bad/data_train_*.bin'
      --set data.order=sequential)
OMP_NUM_THREADS=1 "$FP8TRAIN" "${LONG[@]}" > cut.log 2>&1 &
pid=$!
for _ in $(seq 600); do [ -f runs/cut/checkpoint.pt ] && [ "$(grep -c '"loss"' runs/cut/metrics.jsonl)" -ge 12 ] && break; sleep 0.1; done
[ -f runs/cut/checkpoint.pt ] || { kill "$pid"; cat cut.log; fail "the long run wrote no checkpoint"; }
truncate -s 1024 bad/data_train_000002.bin  # the header alone, as a copy over the file leaves it for a moment
set +e
timeout 60 tail --pid="$pid" -f /dev/null
wait "$pid"
rc=$?
set -e
[ "$rc" = 3 ] || { cat cut.log; fail "a shard truncated mid-run: exit $rc, expected 3"; }
grep -q "bad/data_train_000002.bin' changed while the run reads it" cut.log || { cat cut.log; fail "the error does not name the file"; }
[ "$(json_get runs/cut/summary.json 'd["status"]')" = failed ] || fail "summary status after a truncated shard"
json_get runs/cut/summary.json 'd["error"]' | grep -q "data_train_000002.bin" || fail "the summary's error does not name the file"
cp shards/data_train_000002.bin bad/data_train_000002.bin
OMP_NUM_THREADS=1 "$FP8TRAIN" "${LONG[@]}" --resume --stop-after 1 > resume.log 2>&1 || { cat resume.log; fail "resume after the truncation"; }
grep -q "resumed .*checkpoint.pt at step" runs/cut/train.log || fail "the resume did not start from the checkpoint"
echo "ok"
