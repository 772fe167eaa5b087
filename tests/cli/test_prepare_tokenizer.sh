# scripts/prepare_data.py --train-tokenizer (README "Your own data"), on a generated corpus
# (tests/cli/make_corpus.py: no outside file) of JSON-lines records with other fields besides "text":
#   - a byte-level BPE of exactly the size asked, the separator its special token 0, written as
#     tokenizer.json beside the shards and named in manifest.json, with the flags to train printed;
#   - trained on the training documents only: a word that only the --val-input documents hold
#     (hundreds of times) gets no token of its own;
#   - deterministic: the same inputs twice (1 and 2 workers) give byte-identical tokenizer.json and
#     shards, and .xz, .gz and .bz2 inputs give the same bytes as the plain files;
#   - --train-tokenizer without --val-input, or with --tokenizer, is exit 2 saying why.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import tokenizers, tqdm' 2>/dev/null || { echo "SKIP: $PY lacks tokenizers or tqdm (scripts/setup.sh installs them)"; exit 0; }
PREPARE=("$PY" "$FP8T_SOURCE_DIR/scripts/prepare_data.py" --quiet --shard-tokens 4000 --val-tokens 1000)

"$PY" "$FP8T_SOURCE_DIR/tests/cli/make_corpus.py" book.txt 700
"$PY" - <<'PY' || fail "could not make the test inputs"
import json
paragraphs = open("book.txt", encoding="utf-8").read().split("\n\n")
with open("train.jsonl", "w") as f:  # one record per "book", text among other fields, as Gutenberg dumps are
    for i, p in enumerate(paragraphs[:600]):
        f.write(json.dumps({"id": i, "title": f"Book {i}", "text": p, "authors": ["A. Writer"]}) + "\n")
with open("val.jsonl", "w") as f:  # the validation documents repeat a word no training document has
    for i, p in enumerate(paragraphs[600:]):
        f.write(json.dumps({"id": i, "text": p + " zyzzyvaquux" * 8}) + "\n")
import bz2, gzip, lzma, os
for ext, module in (("xz", lzma), ("gz", gzip), ("bz2", bz2)):
    os.mkdir(ext)
    for name in ("train.jsonl", "val.jsonl"):
        with module.open(f"{ext}/{name}.{ext}", "wb") as f:
            f.write(open(name, "rb").read())
PY

"${PREPARE[@]}" --train-tokenizer 1000 --val-input val.jsonl --out a --workers 2 train.jsonl > a.log 2>&1 \
  || { cat a.log; fail "prepare_data.py --train-tokenizer failed"; }
"${PREPARE[@]}" --train-tokenizer 1000 --val-input val.jsonl --out b --workers 1 train.jsonl val.jsonl > /dev/null 2>&1 \
  || fail "the second run failed"
for z in xz gz bz2; do
  "${PREPARE[@]}" --train-tokenizer 1000 --val-input "$z/val.jsonl.$z" --out "out-$z" "$z/train.jsonl.$z" > /dev/null 2>&1 \
    || fail "prepare_data.py on .$z inputs failed"
done
files=$(cd a && ls tokenizer.json data_*.bin)
[ "$(echo "$files" | wc -l)" -ge 4 ] || fail "expected tokenizer.json and >= 3 shards in a/, got: $files"
for f in $files; do
  for d in b out-xz out-gz out-bz2; do cmp "a/$f" "$d/$f" || fail "$f differs between a/ and $d/"; done
done
"$PY" - <<'PY' || fail "the trained tokenizer or the manifest is wrong"
import json, os, struct
from tokenizers import Tokenizer
m = json.load(open("a/manifest.json"))
tok = Tokenizer.from_file("a/tokenizer.json")
assert tok.get_vocab_size(with_added_tokens=True) == 1000 == m["vocab_size"], (tok.get_vocab_size(), m["vocab_size"])
assert tok.token_to_id("<|endoftext|>") == 0 == m["separator"]["id"], m["separator"]
assert any(t.content == "<|endoftext|>" and t.special for t in tok.get_added_tokens_decoder().values())
assert m["tokenizer"] == os.path.abspath("a/tokenizer.json") and m["val_inputs"] == ["val.jsonl"], m
assert m["trained_tokenizer"] == {"vocab_size_asked": 1000, "inputs": ["train.jsonl"]}, m["trained_tokenizer"]
leaked = [t for t in tok.get_vocab() if "zyzz" in t or "vaqu" in t]
assert not leaked, f"tokens learnt from the validation documents: {leaked}"
assert len(tok.encode(" zyzzyvaquux").ids) > 3, "the validation-only word is one token"
text = "Ré the café’s “door”—closed."
assert tok.decode(tok.encode(text).ids) == text, "the byte-level BPE does not round-trip"
val = open("a/data_val_000000.bin", "rb").read()
count = struct.unpack("<3i", val[:12])[2]
ids = struct.unpack(f"<{count}H", val[1024:])
assert ids.count(0) == m["shards"][0]["documents"] == 100, m["shards"][0]
first = json.loads(open("val.jsonl").readline())["text"]
assert list(ids[1:1 + len(tok.encode(first).ids)]) == tok.encode(first).ids, "the first validation document"
print(f"vocabulary {tok.get_vocab_size()}, {m['tokens']} tokens in {len(m['shards'])} shards")
PY
grep -q "tokenizer: .*a/tokenizer.json (byte-level BPE, 1000 tokens" a.log || { cat a.log; fail "no tokenizer line"; }
grep -q "train on them: --set data.source=tokens .* --set model.vocab_size=1000$" a.log || { cat a.log; fail "no flags"; }

expect_rc 2 "--train-tokenizer without --val-input" "${PREPARE[@]}" --train-tokenizer 1000 --out c train.jsonl
out_has "--train-tokenizer needs --val-input"
expect_rc 2 "--train-tokenizer with --tokenizer" "${PREPARE[@]}" --train-tokenizer 1000 --tokenizer a/tokenizer.json \
  --val-input val.jsonl --out c train.jsonl
out_has "leave out --tokenizer"
expect_rc 2 "--train-tokenizer 100" "${PREPARE[@]}" --train-tokenizer 100 --val-input val.jsonl --out c train.jsonl
out_has "at least 257"
[ ! -e c ] || fail "a refused run made its --out folder"
echo "ok"
