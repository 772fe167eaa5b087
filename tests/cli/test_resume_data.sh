# What a run was trained on, checked on --resume and at the start (tiny one-layer runs on token
# shards written here in prepare_data.py's layout: llm.c v1 files and manifest.json):
#   (a) a shard replaced by another of the same size after --stop-after: --resume is exit 2
#       naming the file, metrics.jsonl and checkpoint.pt untouched; --accept-data-change
#       continues with a warning;
#   (b) manifest.json: a shard it does not list is exit 2 naming both, nothing written; a pattern
#       that matches fewer shards than it lists is warned about; a single token file of the
#       user's own (no manifest) trains without a word about manifests;
#   (c) ZeRO-3 on 2 Gloo ranks: with shard files of the last two checkpoints missing, --resume
#       is exit 2 naming the complete older checkpoint and its --resume-from, which then works.
source "$(dirname "$0")/lib.sh"

# shards FOLDER N: N training shards of 600 tokens (each its own pattern) and a validation shard
# of 300, with the manifest prepare_data.py writes.
shards() {
  python3 - "$1" "$2" <<'PY'
import json, os, struct, sys
out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
entries = []
def shard(name, split, tokens):
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    entries.append({"file": name, "split": split, "tokens": len(tokens), "documents": 1})
shard("data_val_000000.bin", "val", [(i * 7) % 64 for i in range(300)])
for s in range(1, n + 1):
    shard(f"data_train_{s:06d}.bin", "train", [(i * (s + 2) + i // 5) % 64 for i in range(600)])
json.dump({"format": "llm.c shard v1 (uint16)", "vocab_size": 64, "shards": entries}, open(os.path.join(out, "manifest.json"), "w"))
PY
}
shards data 3
RUN=(--out-dir "$WORK/runs" --quiet --steps 20 --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2
     --set model.seq_len=16 --set model.vocab_size=64 --set train.micro_batch_size=2 --set train.warmup_steps=0
     --set train.eval_interval=0 --set train.eval_batches=1 --set train.log_interval=1 --set data.source=tokens
     --set 'data.train_path=data/data_train_*.bin' --set data.val_path=data/data_val_000000.bin
     --set data.order=sequential)

# ---- (a) a shard replaced after --stop-after ---------------------------------------------------
expect_rc 0 "first part" "$FP8TRAIN" "${RUN[@]}" --run-name a --stop-after 8
cp runs/a/checkpoint.pt before.pt && cp runs/a/metrics.jsonl before.jsonl
cp data/data_train_000003.bin data/data_train_000002.bin  # the same size, other tokens
expect_rc 2 "resume on a replaced shard" "$FP8TRAIN" "${RUN[@]}" --run-name a --resume
out_has "data.train_path: 'data/data_train_000002.bin' holds other data"
out_has "--accept-data-change"
cmp runs/a/checkpoint.pt before.pt && cmp runs/a/metrics.jsonl before.jsonl || fail "the refused resume wrote"
expect_rc 0 "resume accepting the change" "$FP8TRAIN" "${RUN[@]}" --run-name a --resume --accept-data-change
out_has "on data files that differ from those it was trained on"
[ "$(losses runs/a/metrics.jsonl | wc -l)" = 20 ] || fail "the accepted resume did not train to step 20"
rm -rf data && shards data 3

# ---- (b) manifest.json -------------------------------------------------------------------------
cp data/data_train_000001.bin data/data_train_000004.bin  # a shard the manifest does not list
expect_rc 2 "a shard the manifest does not list" "$FP8TRAIN" "${RUN[@]}" --run-name b --dry-run
out_has "data.train_path: 'data/data_train_000004.bin' is not listed in data/manifest.json"
[ ! -e runs/b ] || fail "a refused run wrote its folder"
rm data/data_train_000004.bin data/data_train_000003.bin  # now the pattern matches 2 of the 3
expect_rc 0 "a pattern that matches fewer shards" "$FP8TRAIN" "${RUN[@]}" --run-name b --dry-run
out_has "trains on 2 of the 3 train shards data/manifest.json lists; missing from the folder: data_train_000003.bin"
mkdir own && cp data/data_train_000001.bin own/tokens.bin  # a user's own file, no manifest
expect_rc 0 "a token file without a manifest" "$FP8TRAIN" "${RUN[@]}" --run-name own --steps 2 \
  --set data.train_path=own/tokens.bin
grep -q "manifest" "$WORK/out.txt" && { cat "$WORK/out.txt"; fail "a single token file of one's own is warned about"; }
rm -rf data && shards data 3

# ---- (c) ZeRO-3: missing shard files -----------------------------------------------------------
Z3=("${RUN[@]}" --run-name z --steps 8 --zero 3 --set train.checkpoint_interval=2 --set train.keep_checkpoints=3)
launch_by_hand 2 "${Z3[@]}" --stop-after 6 || { cat rank*.log; fail "ZeRO-3 on 2 ranks"; }
ls runs/z/checkpoint.step-2.pt runs/z/checkpoint.step-4.pt runs/z/checkpoint.shard-1-of-2.step-6.pt > /dev/null
rm runs/z/checkpoint.shard-1-of-2.step-6.pt runs/z/checkpoint.shard-0-of-2.step-4.pt
set +e; launch_by_hand 2 "${Z3[@]}" --resume; rc=$?; set -e
[ "$rc" = 2 ] || { cat rank*.log; fail "resume with a missing shard file: exit $rc, expected 2"; }
grep -q "1 of its 2 ZeRO shard files is missing .*(checkpoint.shard-1-of-2.step-6.pt)" rank0.log \
  || { cat rank0.log; fail "the error does not name the missing shard file"; }
grep -q "complete earlier checkpoints the folder keeps: step 2 (checkpoint.step-2.pt): continue from the newest with --resume-from 2" \
  rank0.log || { cat rank0.log; fail "the error does not name the complete checkpoint and the command"; }
launch_by_hand 2 "${Z3[@]}" --resume-from 2 || { cat rank*.log; fail "--resume-from 2 after a lost shard"; }
[ "$(json_get runs/z/summary.json 'd["status"]')" = completed ] || fail "the run did not complete from step 2"
echo "ok"
