#!/usr/bin/env python3
"""Tokenizes raw text into llm.c token shards, the files fp8train reads with data.source tokens.

  .venv/bin/python3 scripts/prepare_data.py --tokenizer tokenizer.json --out shards corpus/
  .venv/bin/python3 scripts/prepare_data.py --vocab vocab.json --merges merges.txt --out shards a.jsonl b.parquet

Inputs (files, or folders searched recursively, in sorted order):
  .txt      one document per file (--txt-docs file, the default) or per block of text between
            blank lines (--txt-docs blank-line); decoded as --encoding (utf-8; bytes that do not
            decode become U+FFFD, and the count is reported)
  .jsonl    one JSON object per line; the document is its --text-field ("text")
  .parquet  the --text-field column (read with pyarrow)
Tokenizer: a Hugging Face tokenizer.json (--tokenizer), or a GPT-2 byte-level BPE given as
vocab.json + merges.txt (--vocab, --merges). Every document is preceded by the tokenizer's
end-of-text / begin-of-text token (<|endoftext|> for GPT-2, <|begin_of_text|> for Llama 3; or
--separator), so exactly one separator stands between two documents.

Output in --out: NAME_val_000000.bin (the validation shard: the first documents, whole, until it
holds --val-tokens tokens; or the documents of --val-input), then NAME_train_000001.bin, ...
of exactly --shard-tokens tokens each (the last one shorter; a document may continue in the next
shard), and manifest.json (tokenizer, vocabulary size, tokens and documents per shard). A shard
is llm.c format: a header of 256 little-endian int32 [magic, version, token count, 0, ...], then
the tokens: magic 20240520 version 1 with uint16 tokens when the vocabulary fits 16 bits, magic
20240801 version 7 with uint32 tokens otherwise. Each file is written under a temporary name in
--out, synced, then renamed: no partly written shard ever carries its final name, and a failed
run removes what it wrote.

The output does not depend on --workers: documents are tokenized in parallel and written in
input order. Exit codes: 0 done, 2 bad input (a file that cannot be read or parsed, a tokenizer
that cannot be loaded or whose vocabulary does not fit the format, an output folder that holds
shards already), 1 anything else.
"""
import argparse
import array
import collections
import json
import multiprocessing
import os
import re
import sys
import time

MAGIC = {2: (20240520, 1), 4: (20240801, 7)}  # token bytes -> (magic, version)
FORMAT_NAMES = {2: "llm.c shard v1 (uint16)", 4: "llm.c shard v7 (uint32)"}
HEADER_INTS = 256
SEPARATORS = ("<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "</s>", "<s>", "<eos>", "<bos>", "[SEP]")
KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
CHUNK_CHARS = 1 << 20  # text per task: large enough that the pipe costs little, small enough to spread
MAX_SHARD_TOKENS = 2**31 - 1  # the header's token count is an int32


class InputError(Exception):
    """Bad input: reported by name, exit code 2."""


# ---- the tokenizer ----------------------------------------------------------------------------

def load_tokenizer(spec):
    """The tokenizer of spec ("json", path) or ("bpe", vocab, merges)."""
    import tokenizers
    try:
        if spec[0] == "json":
            return tokenizers.Tokenizer.from_file(spec[1])
        return tokenizers.ByteLevelBPETokenizer(spec[1], spec[2])
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or malformed files
        raise InputError(f"cannot load the tokenizer {' + '.join(spec[1:])}: {e}") from None


def describe_tokenizer(args):
    """(spec, name, vocabulary size, separator token, separator id, token bytes)."""
    if args.tokenizer:
        spec = ("json", args.tokenizer)
    elif args.vocab and args.merges:
        spec = ("bpe", args.vocab, args.merges)
    else:
        raise InputError("name a tokenizer: --tokenizer tokenizer.json, or --vocab vocab.json --merges merges.txt")
    for path in spec[1:]:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise InputError(f"cannot read the tokenizer file {path}")
    tok = load_tokenizer(spec)
    name = " + ".join(spec[1:])
    vocab = tok.get_vocab_size(with_added_tokens=True)
    candidates = [args.separator] if args.separator else SEPARATORS
    sep = next(((s, tok.token_to_id(s)) for s in candidates if tok.token_to_id(s) is not None), None)
    if sep is None:
        wanted = f"token {args.separator!r}" if args.separator else "end-of-text token (" + ", ".join(SEPARATORS) + ")"
        raise InputError(f"the tokenizer {name} has no {wanted}; name the token that separates documents with --separator")
    width = {"uint16": 2, "uint32": 4}.get(args.format, 2 if vocab <= 2**16 else 4)
    if vocab > 2 ** (8 * width):
        raise InputError(f"the tokenizer {name} has {vocab} tokens, more than {args.format} ids hold "
                         f"({2 ** (8 * width)}); use --format uint32 (llm.c shard v7)")
    return spec, name, vocab, sep[0], sep[1], width


_WORKER = {}


def init_worker(spec, sep_id, width):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per process: the pool spreads the work
    _WORKER.update(tok=load_tokenizer(spec), sep=sep_id, code="H" if width == 2 else "I")


def tokenize(docs):
    """The tokens of a list of documents, each preceded by the separator, as raw little-endian bytes."""
    out = array.array(_WORKER["code"])
    tok = _WORKER["tok"]
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # fast: no character offsets (tokenizers >= 0.20)
    for enc in encode(docs, add_special_tokens=False):
        out.append(_WORKER["sep"])
        out.extend(enc.ids)
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


# ---- the inputs -------------------------------------------------------------------------------

def find_inputs(paths):
    """[(path, kind)] in order: files as given, folders walked in sorted order."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                inside += [os.path.join(root, f) for f in sorted(files) if os.path.splitext(f)[1].lower() in KINDS]
            if not inside:
                raise InputError(f"the folder {path} holds no .txt, .jsonl or .parquet file")
            found += [(p, KINDS[os.path.splitext(p)[1].lower()]) for p in inside]
        elif os.path.splitext(path)[1].lower() in KINDS:
            found.append((path, KINDS[os.path.splitext(path)[1].lower()]))
        elif not os.path.exists(path):
            raise InputError(f"the input {path} does not exist")
        else:
            raise InputError(f"the input {path} is not a .txt, .jsonl or .parquet file")
    for path, kind in found:
        check_readable(path, kind)
    return found


def check_readable(path, kind):
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise InputError(f"cannot read the input {path}")
    if kind == "parquet":
        parquet_column(path)


def parquet_column(path):
    """The ParquetFile and the index of its --text-field column."""
    import pyarrow.parquet as pq
    try:
        f = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise InputError(f"cannot read the parquet file {path}: {e}") from None
    names = f.schema_arrow.names
    if ARGS.text_field not in names:
        raise InputError(f"the parquet file {path} has no column {ARGS.text_field!r} (it has {', '.join(names)}); "
                         f"name the text column with --text-field")
    return f


def read_txt(path):
    """(document, source bytes) of a text file."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode(ARGS.encoding, errors="replace")
    bad = text.count("\ufffd") - raw.decode(ARGS.encoding, errors="ignore").count("\ufffd")
    if bad:
        STATS["undecodable"][path] += bad
    if ARGS.txt_docs == "file":
        if text.strip():
            yield text, len(raw)
        else:
            yield None, len(raw)
        return
    blocks = re.split(r"\n[ \t\r\f\v]*\n", text)
    for i, block in enumerate(blocks):
        yield (block if block.strip() else None), (len(raw) if i == len(blocks) - 1 else 0)


def read_jsonl(path):
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                yield None, len(line)
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{number}: not a JSON object ({e})") from None
            text = record.get(ARGS.text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise InputError(f"{path}:{number}: no string field {ARGS.text_field!r} (name it with --text-field)")
            yield (text if text else None), len(line)


def read_parquet(path):
    f = parquet_column(path)
    size, rows = os.path.getsize(path), max(f.metadata.num_rows, 1)
    done = 0
    for batch in f.iter_batches(columns=[ARGS.text_field], batch_size=4096):
        for i, text in enumerate(batch.column(0).to_pylist()):
            if text is not None and not isinstance(text, str):
                raise InputError(f"{path}: column {ARGS.text_field!r} holds {type(text).__name__}, not text")
            done += 1
            yield (text if text else None), size * done // rows - size * (done - 1) // rows


READERS = {"txt": read_txt, "jsonl": read_jsonl, "parquet": read_parquet}


def chunks(inputs):
    """(documents, source bytes) lists of about CHUNK_CHARS characters, in input order."""
    docs, chars, source = [], 0, 0
    for path, kind in inputs:
        for doc, nbytes in READERS[kind](path):
            source += nbytes
            if doc is None:
                continue
            docs.append(doc)
            chars += len(doc)
            if chars >= CHUNK_CHARS:
                yield docs, source
                docs, chars, source = [], 0, 0
    yield docs, source


def tokenized(inputs, pool, width):
    """(token array, documents, source bytes) per chunk, in order, at most 2 chunks per worker in flight."""
    pending = collections.deque()
    for docs, source in chunks(inputs):
        pending.append((pool.apply_async(tokenize, (docs,)), len(docs), source))
        if len(pending) >= 2 * ARGS.workers:
            yield result(pending.popleft(), width)
    while pending:
        yield result(pending.popleft(), width)


def result(job, width):
    future, ndocs, source = job
    try:
        raw = future.get()
    except OverflowError:
        raise InputError(f"a token id does not fit {8 * width} bits; use --format uint32") from None
    tokens = array.array("H" if width == 2 else "I")
    tokens.frombytes(raw)
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens, ndocs, source


# ---- the shards -------------------------------------------------------------------------------

class ShardWriter:
    """Cuts the token stream into the validation shard and the training shards and writes them."""

    def __init__(self, out, name, width, sep_id):
        self.out, self.name, self.width, self.sep = out, name, width, sep_id
        self.code = "H" if width == 2 else "I"
        self.buffer = array.array(self.code)
        self.shards, self.written = [], []
        self.split = "val"

    def add(self, tokens, val_tokens):
        """Appends tokens and writes what is complete: the validation shard once a document starts at
        or after val_tokens (None: only end_val ends it), then every full training shard."""
        self.buffer.extend(tokens)
        if self.split == "val" and val_tokens is not None and len(self.buffer) > val_tokens:
            try:
                self.end_val(self.buffer.index(self.sep, val_tokens))
            except ValueError:  # the document that crosses val_tokens goes on
                pass
        while self.split == "train" and len(self.buffer) >= ARGS.shard_tokens:
            self.write(self.buffer[:ARGS.shard_tokens])
            self.buffer = self.buffer[ARGS.shard_tokens:]

    def end_val(self, cut=None):
        """Writes the validation shard: the buffer up to `cut` (a document start; None: all of it)."""
        cut = len(self.buffer) if cut is None else cut
        if cut == 0:
            raise InputError("no documents for the validation shard")
        self.write(self.buffer[:cut])
        self.buffer = self.buffer[cut:]
        self.split = "train"

    def close(self):
        if self.split == "val":
            self.end_val()
        if self.buffer:
            self.write(self.buffer)
        if len(self.shards) < 2:
            raise InputError(f"the validation shard took all {sum(s['tokens'] for s in self.shards)} tokens (it ends "
                             "where a document ends): nothing is left for training; give more documents "
                             "(--txt-docs blank-line splits .txt files at blank lines) or lower --val-tokens")

    def write(self, tokens):
        file = f"{self.name}_{self.split}_{len(self.shards):06d}.bin"
        header = array.array("i", [0] * HEADER_INTS)
        header[0], header[1] = MAGIC[self.width]
        header[2] = len(tokens)
        documents = tokens.count(self.sep)
        if sys.byteorder != "little":
            header.byteswap()
            tokens = array.array(self.code, tokens)
            tokens.byteswap()
        write_atomic(os.path.join(self.out, file), header.tobytes() + tokens.tobytes(), self.written)
        self.shards.append({"file": file, "split": self.split, "tokens": len(tokens), "documents": documents})


def write_atomic(path, data, written):
    """Writes under a temporary name in the same folder, syncs, renames; records the final path."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    TEMPORARY.add(tmp)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    TEMPORARY.discard(tmp)
    written.append(path)


def prepare_out(out, name, overwrite):
    os.makedirs(out, exist_ok=True)
    ours = re.compile(rf"^{re.escape(name)}_(train|val)_\d{{6}}\.bin$")
    old = [f for f in os.listdir(out) if ours.match(f) or f == "manifest.json"]
    if old and not overwrite:
        raise InputError(f"the output folder {out} holds shards already ({', '.join(sorted(old)[:3])}"
                         f"{', ...' if len(old) > 3 else ''}); choose another --out or --name, or pass --overwrite")
    for f in old:
        os.remove(os.path.join(out, f))


# ---- the run ----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("inputs", nargs="+", help=".txt, .jsonl and .parquet files, or folders holding them")
    p.add_argument("--out", required=True, help="output folder for the shards and manifest.json")
    p.add_argument("--tokenizer", help="a Hugging Face tokenizer.json")
    p.add_argument("--vocab", help="GPT-2 BPE vocab.json (with --merges)")
    p.add_argument("--merges", help="GPT-2 BPE merges.txt (with --vocab)")
    p.add_argument("--separator", help="the token put before every document (default: the tokenizer's end-of-text)")
    p.add_argument("--format", choices=("auto", "uint16", "uint32"), default="auto",
                   help="token width: auto picks uint16 (llm.c v1) when the vocabulary fits, else uint32 (v7)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per training shard (100M)")
    p.add_argument("--val-tokens", type=int, help="tokens of the validation shard (default: --shard-tokens)")
    p.add_argument("--val-input", help="one of the inputs whose documents form the validation shard instead")
    p.add_argument("--name", default="data", help="shard file prefix: NAME_val_000000.bin, NAME_train_000001.bin, ...")
    p.add_argument("--txt-docs", choices=("file", "blank-line"), default="file",
                   help=".txt documents: one per file, or one per block between blank lines")
    p.add_argument("--text-field", default="text", help="the text field of .jsonl records and column of .parquet files")
    p.add_argument("--encoding", default="utf-8", help="encoding of .txt files")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes (all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace the shards of the same --name in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        p.error(f"--shard-tokens must be in [1, {MAX_SHARD_TOKENS}] (the llm.c header counts tokens in an int32)")
    args.val_tokens = args.shard_tokens if args.val_tokens is None else args.val_tokens
    if not 1 <= args.val_tokens <= MAX_SHARD_TOKENS:
        p.error(f"--val-tokens must be in [1, {MAX_SHARD_TOKENS}]")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    return args


def ordered_inputs(inputs):
    """The validation input first (when --val-input names one), then the others in order."""
    if ARGS.val_input is None:
        return [], inputs
    val = [(p, k) for p, k in inputs if os.path.abspath(p) == os.path.abspath(ARGS.val_input)]
    if not val:
        raise InputError(f"--val-input {ARGS.val_input} is not one of the inputs")
    return val, [(p, k) for p, k in inputs if (p, k) not in val]


def run(args):
    import tqdm
    spec, name, vocab, sep_token, sep_id, width = describe_tokenizer(args)
    inputs = find_inputs(args.inputs)
    val_inputs, train_inputs = ordered_inputs(inputs)
    prepare_out(args.out, args.name, args.overwrite)
    writer = ShardWriter(args.out, args.name, width, sep_id)
    total = sum(os.path.getsize(p) for p, _ in inputs)
    start, documents = time.time(), 0
    bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, disable=args.quiet, desc="tokenizing", file=sys.stderr)
    # With --val-input its documents are the validation shard; else the first --val-tokens.
    phases = [(val_inputs, None), (train_inputs, None)] if val_inputs else [(inputs, args.val_tokens)]
    try:
        with multiprocessing.Pool(args.workers, initializer=init_worker, initargs=(spec, sep_id, width)) as pool:
            for part, val_tokens in phases:
                for tokens, ndocs, source in tokenized(part, pool, width):
                    writer.add(tokens, val_tokens)
                    documents += ndocs
                    bar.update(source)
                if writer.split == "val" and val_inputs:
                    writer.end_val()
        writer.close()
    except BaseException:
        for path in writer.written:
            os.remove(path)
        raise
    finally:
        bar.close()
    seconds = time.time() - start
    manifest = {
        "format": FORMAT_NAMES[width], "magic": MAGIC[width][0], "version": MAGIC[width][1],
        "tokenizer": os.path.abspath(spec[1]) if spec[0] == "json" else [os.path.abspath(p) for p in spec[1:]],
        "vocab_size": vocab, "separator": {"token": sep_token, "id": sep_id, "placement": "before every document"},
        "txt_docs": args.txt_docs, "documents": documents, "tokens": sum(s["tokens"] for s in writer.shards),
        "shards": writer.shards, "inputs": [p for p, _ in inputs],
    }
    write_atomic(os.path.join(args.out, "manifest.json"), (json.dumps(manifest, indent=2) + "\n").encode(), [])
    report(args, manifest, vocab, total, seconds)


def report(args, manifest, vocab, total, seconds):
    for path, count in STATS["undecodable"].items():
        print(f"prepare_data.py: warning: {count} characters of {path} are not {args.encoding} and became U+FFFD "
              f"(pass --encoding if the file has another encoding)", file=sys.stderr)
    train = [s for s in manifest["shards"] if s["split"] == "train"]
    val = manifest["shards"][0]["file"]
    print(f"wrote {len(manifest['shards'])} shards ({manifest['format']}: 1 validation, {len(train)} training), "
          f"{manifest['tokens']} tokens, {manifest['documents']} documents, in {seconds:.1f} s "
          f"({total / 1e6 / max(seconds, 1e-9):.2f} MB/s of input) -> {args.out}")
    print(f"train on them: --set data.source=tokens --set 'data.train_path={os.path.join(args.out, args.name)}_train_*.bin' "
          f"--set data.val_path={os.path.join(args.out, val)} --set model.vocab_size={vocab}")


ARGS = None
STATS = {"undecodable": collections.Counter()}
TEMPORARY = set()


def main(argv=None):
    global ARGS
    ARGS = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(ARGS)
    except InputError as e:
        print(f"prepare_data.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("prepare_data.py: interrupted; the shards written so far were removed", file=sys.stderr)
        return 130
    finally:
        for tmp in TEMPORARY:
            if os.path.exists(tmp):
                os.remove(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
