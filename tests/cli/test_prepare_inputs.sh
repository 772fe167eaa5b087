# scripts/prepare_data.py on awkward inputs, with a byte-level BPE trained here on a generated corpus:
#   - a literal "<|endoftext|>" inside a .txt document is text: 40 documents stay 40 (manifest and
#     the separators in the shards agree), and that document's ids are its text's, without the separator;
#     a separator that is not a special token, found in a document, is exit 2 naming the document;
#   - .txt.xz / .txt.gz read as the plain .txt (byte-identical shards);
#   - a null text is exit 2 naming the row, in .parquet as in .jsonl;
#   - an empty validation input is exit 2 naming the file; an empty input among others is a warning
#     naming it;
#   - a failed run leaves no --out folder (nor the folders made above it);
#   - the default validation split suits a small corpus (issue 62: it took all of it, exit 2, after
#     tokenizing): 1% of the documents' tokens, whole documents, the rest trains; a bad
#     --val-fraction is refused before any work.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import tokenizers, pyarrow, tqdm' 2>/dev/null \
  || { echo "SKIP: $PY lacks tokenizers, pyarrow or tqdm (scripts/setup.sh installs them)"; exit 0; }
PREPARE=("$PY" "$FP8T_SOURCE_DIR/scripts/prepare_data.py" --quiet --tokenizer tokenizer.json)

"$PY" "$FP8T_SOURCE_DIR/tests/cli/make_corpus.py" book.txt 300
mkdir docs
"$PY" - <<'PY' || fail "could not make the test inputs"
import gzip, json, lzma
paragraphs = open("book.txt", encoding="utf-8").read().split("\n\n")
for i in range(40):  # 40 documents, one holding the separator's characters
    text = "\n".join(paragraphs[3 * i:3 * i + 3])
    if i == 20:
        text += "\nBefore the mark <|endoftext|> after the mark.\n"
    open(f"docs/d{i:02d}.txt", "w", encoding="utf-8").write(text)
with open("train.jsonl", "w") as f:
    for p in paragraphs[120:]:
        f.write(json.dumps({"text": p}) + "\n")
with open("val.jsonl", "w") as f:
    for p in paragraphs[:120]:
        f.write(json.dumps({"text": p}) + "\n")
raw = open("book.txt", "rb").read()
lzma.open("book.txt.xz", "wb").write(raw)
gzip.open("book.txt.gz", "wb").write(raw)
PY
"$PY" - <<'PY' || fail "could not train the test tokenizer"
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(open("book.txt", encoding="utf-8").read().split("\n\n"), trainers.BpeTrainer(
    vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
tok.save("tokenizer.json")
PY

# ---- a literal separator is text ---------------------------------------------------------------
"${PREPARE[@]}" --out lit --shard-tokens 400 --val-tokens 300 docs > /dev/null || fail "prepare_data.py on docs/ failed"
"$PY" - <<'PY' || fail "the literal <|endoftext|> split a document"
import glob, json, struct
from tokenizers import Tokenizer
m = json.load(open("lit/manifest.json"))
stream = []
for s in m["shards"]:
    b = open("lit/" + s["file"], "rb").read()
    ids = struct.unpack(f"<{struct.unpack('<3i', b[:12])[2]}H", b[1024:])
    assert ids.count(0) == s["documents"], s
    stream += ids
assert m["documents"] == 40 == stream.count(0) == sum(s["documents"] for s in m["shards"]), \
    (m["documents"], stream.count(0))
tok = Tokenizer.from_file("tokenizer.json")
tok.encode_special_tokens = True
text = open("docs/d20.txt", encoding="utf-8").read()
want = tok.encode(text, add_special_tokens=False).ids
assert 0 not in want and "<|endoftext|>" in tok.decode(want)
starts = [i for i, t in enumerate(stream) if t == 0]
assert stream[starts[20] + 1:starts[21]] == want, "document 20's ids are not its text's"
print(f"40 documents, {len(stream)} tokens; document 20 is {len(want)} tokens of text")
PY
# A separator that is an ordinary token (not special) cannot be told from text: exit 2 naming the document.
"$PY" - <<'PY' || fail "could not make the word-level tokenizer"
from tokenizers import Tokenizer, models, pre_tokenizers
t = Tokenizer(models.WordLevel({"<|endoftext|>": 0, "[UNK]": 1, "hello": 2, "world": 3}, unk_token="[UNK]"))
t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
t.save("plain-separator.json")
PY
printf '{"text": "hello world"}\n{"text": "hello <|endoftext|> world"}\n' > sep.jsonl
expect_rc 2 "a separator that is not special" "${PREPARE[@]}" --tokenizer plain-separator.json --out bad sep.jsonl
out_has "sep.jsonl: document 2 holds text that the tokenizer encodes as the separator '<|endoftext|>'"

# ---- compressed .txt reads as plain ------------------------------------------------------------
for f in book.txt book.txt.xz book.txt.gz; do
  "${PREPARE[@]}" --txt-docs blank-line --shard-tokens 2000 --val-tokens 500 --out "out-$f" "$f" > /dev/null \
    || fail "prepare_data.py on $f failed"
done
for f in $(cd out-book.txt && ls *.bin); do
  cmp "out-book.txt/$f" "out-book.txt.xz/$f" && cmp "out-book.txt/$f" "out-book.txt.gz/$f" \
    || fail "$f differs between book.txt and its compressed copies"
done
printf 'not xz data' > broken.txt.xz
expect_rc 2 "a corrupt .xz" "${PREPARE[@]}" --out bad broken.txt.xz
out_has "broken.txt.xz"

# ---- the default validation split ------------------------------------------------------------
expect_rc 0 "the defaults on a small corpus" "${PREPARE[@]}" --out dflt --txt-docs blank-line book.txt
"$PY" - <<'PY' || fail "the default validation split"
import json
m = json.load(open("dflt/manifest.json"))
val, train = m["shards"][0], m["shards"][1:]
total = m["tokens"]
# The first whole document past 1% of the tokens ends it: at least one document, and no more
# tokens than 1% plus the longest document (a document is never cut).
assert val["split"] == "val" and val["documents"] >= 1, val
assert train and all(s["split"] == "train" for s in train) and sum(s["tokens"] for s in train) > 0, m["shards"]
assert val["tokens"] < 0.05 * total, (val["tokens"], total)
print(f"validation: {val['documents']} of {m['documents']} documents, {val['tokens']} of {total} tokens")
PY
expect_rc 2 "--val-fraction 1" "${PREPARE[@]}" --out bad --val-fraction 1 book.txt
out_has "--val-fraction must be in (0, 1)"

# ---- null texts, empty files, and what a failed run leaves -----------------------------------
"$PY" -c "import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({'text': ['one', 'two', None, 'four']}), 'null.parquet')"
printf '{"text": "one"}\n{"text": "two"}\n{"text": null}\n' > null.jsonl
expect_rc 2 "a null .parquet text" "${PREPARE[@]}" --out new/deeper/bad null.parquet
out_has "null.parquet: row 3: column 'text' holds null"
[ ! -e new ] || fail "a failed run left $(find new)"
expect_rc 2 "a null .jsonl text" "${PREPARE[@]}" --out new/deeper/bad null.jsonl
out_has "null.jsonl:3: no string field 'text' (null"
: > empty.jsonl
expect_rc 2 "an empty validation input" "${PREPARE[@]}" --out bad --val-input empty.jsonl train.jsonl
out_has "no documents for the validation shard: empty.jsonl holds none"
expect_rc 2 "an empty input" "${PREPARE[@]}" --out bad empty.jsonl
out_has "empty.jsonl holds none"
[ ! -e bad ] && [ ! -e new ] || fail "a failed run left its --out folder"
[ -z "$(ls -A | grep prepare-)" ] || fail "a failed run left its temporary folder: $(ls -A | grep prepare-)"
expect_rc 0 "an empty input among others" "${PREPARE[@]}" --out good --val-input val.jsonl train.jsonl empty.jsonl
out_has "warning: empty.jsonl holds no documents"
echo "ok"
