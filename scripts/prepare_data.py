#!/usr/bin/env python3
"""Tokenizes raw text into llm.c token shards, the files fp8train reads with data.source tokens.

  .venv/bin/python3 scripts/prepare_data.py --tokenizer tokenizer.json --out shards corpus/
  .venv/bin/python3 scripts/prepare_data.py --vocab vocab.json --merges merges.txt --out shards a.jsonl b.parquet
  .venv/bin/python3 scripts/prepare_data.py --train-tokenizer 32768 --val-input val.jsonl.xz --out shards train/

Inputs (files, or folders searched recursively, in sorted order):
  .txt      one document per file (--txt-docs file, the default) or per block of text between
            blank lines (--txt-docs blank-line); decoded as --encoding (utf-8; bytes that do not
            decode become U+FFFD, and the count is reported)
  .jsonl    one JSON object per line; the document is its --text-field ("text"); a record without
            that text (missing, null, not a string) is an error naming the line
  .parquet  the --text-field column (read with pyarrow); a null is an error naming the row
  .txt and .jsonl may be compressed: .txt.xz, .jsonl.gz, .jsonl.bz2, ... (read as a stream)
Tokenizer: a Hugging Face tokenizer.json (--tokenizer), or a GPT-2 byte-level BPE given as
vocab.json + merges.txt (--vocab, --merges), or a byte-level BPE of --train-tokenizer tokens trained
here on the training documents only (never the --val-input ones; the separator is its special token
0), written as tokenizer.json beside the shards. Every document is preceded by the tokenizer's
end-of-text / begin-of-text token (<|endoftext|> for GPT-2, <|begin_of_text|> for Llama 3; or
--separator), so exactly one separator stands between two documents. Text is encoded as text: a
special token's characters inside a document (a literal "<|endoftext|>") are ordinary text.

Output in --out: NAME_val_000000.bin (the validation shard: the first documents, whole, until it
holds --val-fraction of the corpus (1%) or --val-tokens tokens (10M), whichever is smaller; with
--val-tokens alone, that many; or the documents of --val-input), then NAME_train_000001.bin, ...
of exactly --shard-tokens tokens each (the last one shorter; a document may continue in the next
shard), and manifest.json (tokenizer, vocabulary size, tokens and documents per shard). A shard
is llm.c format: a header of 256 little-endian int32 [magic, version, token count, 0, ...], then
the tokens: magic 20240520 version 1 with uint16 tokens when the vocabulary fits 16 bits, magic
20240801 version 7 with uint32 tokens otherwise. Everything is written into a hidden temporary
folder (.OUT.prepare-* beside a new --out, .NAME.prepare-* inside an existing one), synced, and
moved into --out at the end (a new --out appears whole, by one rename; else manifest.json last): a failed, interrupted (SIGINT) or stopped (SIGTERM, SIGHUP)
run removes it and leaves --out as it was (only SIGKILL leaves the hidden folder behind).

The output does not depend on --workers: documents are tokenized in parallel and written in
input order; the same inputs give the same tokenizer and the same shards. Exit codes: 0 done,
2 bad input (a file that cannot be read, decompressed or parsed, a tokenizer that cannot be loaded
or whose vocabulary does not fit the format, an output folder that holds shards already),
128 + the signal's number when stopped by a signal, 1 anything else.
"""
import argparse
import array
import collections
import contextlib
import json
import multiprocessing
import os
import re
import signal
import sys
import time

import prepare_io
from prepare_io import InputError

MAGIC = {2: (20240520, 1), 4: (20240801, 7)}  # token bytes -> (magic, version)
FORMAT_NAMES = {2: "llm.c shard v1 (uint16)", 4: "llm.c shard v7 (uint32)"}
HEADER_INTS = 256
SEPARATORS = ("<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "</s>", "<s>", "<eos>", "<bos>", "[SEP]")
DEFAULT_VAL_FRACTION = 0.01  # the validation shard: 1% of the corpus ...
DEFAULT_VAL_TOKENS = 10_000_000  # ... at most 10M tokens
CHUNK_CHARS = 1 << 20  # text per task: large enough that the pipe costs little, small enough to spread
MAX_SHARD_TOKENS = 2**31 - 1  # the header's token count is an int32
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # SIGINT is KeyboardInterrupt


class Stopped(BaseException):
    """A stop signal arrived (SIGTERM, SIGHUP): unwinds like KeyboardInterrupt."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def on_stop_signal(signum, frame):
    raise Stopped(signum)


# ---- the tokenizer ----------------------------------------------------------------------------

def load_tokenizer(spec):
    """The tokenizer of spec ("json", path) or ("bpe", vocab, merges), set to encode text as text."""
    import tokenizers
    try:
        if spec[0] == "json":
            tok = tokenizers.Tokenizer.from_file(spec[1])
        else:
            tok = tokenizers.ByteLevelBPETokenizer(spec[1], spec[2])._tokenizer
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or malformed files
        raise InputError(f"cannot load the tokenizer {' + '.join(spec[1:])}: {e}") from None
    tok.encode_special_tokens = True  # "<|endoftext|>" in a document is text, not the separator
    return tok


def train_tokenizer(inputs, vocab_size, separator, path):
    """Trains a byte-level BPE (GPT-2's pre-tokenizer) on the documents of inputs; saves it to path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[separator], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    docs = (doc for path_, kind in inputs for doc, _ in prepare_io.READERS[kind](path_) if doc is not None)
    tok.train_from_iterator(docs, trainer)
    tok.save(path)
    return tok.get_vocab_size(with_added_tokens=True)


def train_in_child(inputs, args, path):
    """train_tokenizer in a child process (its Rust merge loop would hold off signals here), all cores."""
    with contextlib.ExitStack() as stack:
        pool = start_pool(stack, 1, init_child, (args, True))
        return pool.apply_async(train_tokenizer, (inputs, args.train_tokenizer, args.separator or SEPARATORS[0],
                                                  path)).get()


def describe_tokenizer(args, trained=None):
    """(spec, name, vocabulary size, separator token, separator id, token bytes)."""
    if trained:
        spec = ("json", trained)
    elif args.tokenizer:
        spec = ("json", args.tokenizer)
    elif args.vocab and args.merges:
        spec = ("bpe", args.vocab, args.merges)
    else:
        raise InputError("name a tokenizer: --tokenizer tokenizer.json, or --vocab vocab.json --merges merges.txt, "
                         "or --train-tokenizer VOCAB_SIZE")
    for path in spec[1:]:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise InputError(f"cannot read the tokenizer file {path}")
    tok = load_tokenizer(spec)
    name = os.path.join(args.out, "tokenizer.json") if trained else " + ".join(spec[1:])
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


def start_pool(stack, processes, initializer, initargs):
    """A Pool that stack terminates; started with the stop signals held off, so that one arriving meanwhile
    (delivered when they are let through again, the pool already on the stack) leaves no process behind."""
    with prepare_io.Blocked():
        return stack.enter_context(multiprocessing.Pool(processes, initializer=initializer, initargs=initargs))


def init_child(args, parallel):
    """A pool process: the parent's options; dies on SIGTERM, leaves SIGINT to the parent (which ends the pool)."""
    global ARGS
    ARGS = prepare_io.ARGS = args
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, prepare_io.Blocked.SIGNALS)  # held off by start_pool
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if parallel else "false"


def init_worker(args, spec, sep_id, width):
    init_child(args, False)  # one core per process: the pool spreads the work
    _WORKER.update(tok=load_tokenizer(spec), sep=sep_id, code="H" if width == 2 else "I")


def tokenize(docs):
    """(the tokens of docs, each preceded by the separator, as little-endian bytes; the index of the first
    document whose own tokens hold the separator id, or -1)."""
    out = array.array(_WORKER["code"])
    tok, sep, bad = _WORKER["tok"], _WORKER["sep"], -1
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # fast: no character offsets (tokenizers >= 0.20)
    for i, enc in enumerate(encode(docs, add_special_tokens=False)):
        ids = enc.ids
        if bad < 0 and sep in ids:
            bad = i
        out.append(sep)
        out.extend(ids)
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes(), bad


# ---- tokenizing in order ----------------------------------------------------------------------

def chunks(inputs):
    """(documents, source bytes, [(path, document number)]) of about CHUNK_CHARS characters, in input order."""
    docs, origins, chars, source = [], [], 0, 0
    for path, kind in inputs:
        for doc, nbytes in prepare_io.READERS[kind](path):
            source += nbytes
            if doc is None:
                continue
            STATS["documents"][path] += 1
            docs.append(doc)
            origins.append((path, STATS["documents"][path]))
            chars += len(doc)
            if chars >= CHUNK_CHARS:
                yield docs, source, origins
                docs, origins, chars, source = [], [], 0, 0
    yield docs, source, origins


def tokenized(inputs, pool, width, sep):
    """(token array, documents, source bytes) per chunk, in order, at most 2 chunks per worker in flight."""
    pending = collections.deque()
    for docs, source, origins in chunks(inputs):
        pending.append((pool.apply_async(tokenize, (docs,)), origins, source))
        if len(pending) >= 2 * ARGS.workers:
            yield result(pending.popleft(), width, sep)
    while pending:
        yield result(pending.popleft(), width, sep)


def result(job, width, sep):
    future, origins, source = job
    try:
        raw, bad = future.get()
    except OverflowError:
        raise InputError(f"a token id does not fit {8 * width} bits; use --format uint32") from None
    if bad >= 0:
        path, number = origins[bad]
        raise InputError(f"{path}: document {number} holds text that the tokenizer encodes as the separator "
                         f"{sep!r} (the token is not special, so it cannot tell them apart); choose another "
                         f"--separator or a tokenizer whose separator is a special token")
    tokens = array.array("H" if width == 2 else "I")
    tokens.frombytes(raw)
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens, len(origins), source


# ---- the shards -------------------------------------------------------------------------------

class ShardWriter:
    """Cuts the token stream into the validation shard and the training shards and writes them."""

    def __init__(self, out, name, width, sep_id):
        self.out, self.name, self.width, self.sep = out, name, width, sep_id
        self.code = "H" if width == 2 else "I"
        self.buffer = array.array(self.code)
        self.shards = []
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

    def end_val(self, cut=None, inputs=()):
        """Writes the validation shard: the buffer up to `cut` (a document start; None: all of it)."""
        cut = len(self.buffer) if cut is None else cut
        if cut == 0:
            raise InputError("no documents for the validation shard: " + ", ".join(
                f"{p} holds none" for p, _ in inputs) + " (empty, blank, or only empty texts)")
        self.write(self.buffer[:cut])
        self.buffer = self.buffer[cut:]
        self.split = "train"

    def close(self, inputs):
        if self.split == "val":
            self.end_val(inputs=inputs)
        if self.buffer:
            self.write(self.buffer)
        if len(self.shards) < 2:
            raise InputError(f"the validation shard took all {sum(s['tokens'] for s in self.shards)} tokens (it ends "
                             "where a document ends): nothing is left for training; give more documents "
                             "(--txt-docs blank-line splits .txt files at blank lines) or lower --val-tokens or "
                             "--val-fraction")

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
        prepare_io.write_synced(os.path.join(self.out, file), header.tobytes() + tokens.tobytes())
        self.shards.append({"file": file, "split": self.split, "tokens": len(tokens), "documents": documents})


class ValSplit:
    """Where the validation shard ends when no --val-input names it: after --val-tokens tokens, or,
    with --val-fraction, after that share of the corpus if it is smaller. The corpus's tokens are
    estimated from the input bytes (the files' sizes, compressed or not, as the progress bar
    counts them) times the tokens per byte so far, so the split is decided in the one pass."""

    def __init__(self, args, total_bytes):
        self.cap, self.fraction, self.total_bytes = args.val_tokens, args.val_fraction, total_bytes
        self.tokens = self.bytes = 0

    def after(self, tokens, source_bytes):
        """The validation shard's size in tokens, once `tokens` more were read from `source_bytes`."""
        self.tokens += tokens
        self.bytes += source_bytes
        if self.fraction is None or self.bytes == 0:
            return self.cap
        estimate = self.tokens * max(self.total_bytes, self.bytes) / self.bytes
        return max(1, min(self.cap, int(self.fraction * estimate)))


# ---- the run ----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("inputs", nargs="*", help=".txt, .jsonl and .parquet files (.txt/.jsonl also .xz, .gz, .bz2), "
                   "or folders holding them")
    p.add_argument("--out", required=True, help="output folder for the shards and manifest.json")
    p.add_argument("--tokenizer", help="a Hugging Face tokenizer.json")
    p.add_argument("--vocab", help="GPT-2 BPE vocab.json (with --merges)")
    p.add_argument("--merges", help="GPT-2 BPE merges.txt (with --vocab)")
    p.add_argument("--train-tokenizer", type=int, metavar="VOCAB_SIZE",
                   help="train a byte-level BPE of VOCAB_SIZE tokens (separator included) on the training "
                   "documents, saved as --out/tokenizer.json (needs --val-input)")
    p.add_argument("--separator", help="the token put before every document (default: the tokenizer's end-of-text)")
    p.add_argument("--format", choices=("auto", "uint16", "uint32"), default="auto",
                   help="token width: auto picks uint16 (llm.c v1) when the vocabulary fits, else uint32 (v7)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per training shard (100M)")
    p.add_argument("--val-tokens", type=int,
                   help=f"tokens of the validation shard: at most this many (default {DEFAULT_VAL_TOKENS:,}); given "
                   "alone, exactly this many (whole documents)")
    p.add_argument("--val-fraction", type=float,
                   help=f"the validation shard's share of the corpus's tokens (default {DEFAULT_VAL_FRACTION}, "
                   "capped by --val-tokens), estimated while tokenizing from the tokens per input byte so far")
    p.add_argument("--val-input", action="append", default=[], metavar="PATH",
                   help="a file or folder whose documents form the validation shard instead (repeatable; "
                   "taken out of the inputs when among them)")
    p.add_argument("--name", default="data", help="shard file prefix: NAME_val_000000.bin, NAME_train_000001.bin, ...")
    p.add_argument("--txt-docs", choices=("file", "blank-line"), default="file",
                   help=".txt documents: one per file, or one per block between blank lines")
    p.add_argument("--text-field", default="text", help="the text field of .jsonl records and column of .parquet files")
    p.add_argument("--encoding", default="utf-8", help="encoding of .txt files")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes (all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace the shards of the same --name in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if not args.inputs and not args.val_input:
        p.error("name the inputs: files or folders")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        p.error(f"--shard-tokens must be in [1, {MAX_SHARD_TOKENS}] (the llm.c header counts tokens in an int32)")
    # The default split suits any corpus: a fraction of it, capped (issue 62: --val-tokens used to
    # default to --shard-tokens, 100M, and took the whole of any smaller corpus).
    if args.val_fraction is None:
        args.val_fraction = None if args.val_tokens is not None else DEFAULT_VAL_FRACTION
    elif not 0 < args.val_fraction < 1:
        p.error(f"--val-fraction must be in (0, 1), got {args.val_fraction}")
    args.val_tokens = DEFAULT_VAL_TOKENS if args.val_tokens is None else args.val_tokens
    if not 1 <= args.val_tokens <= MAX_SHARD_TOKENS:
        p.error(f"--val-tokens must be in [1, {MAX_SHARD_TOKENS}]")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.train_tokenizer is not None:
        if args.tokenizer or args.vocab or args.merges:
            p.error("--train-tokenizer trains the tokenizer: leave out --tokenizer, --vocab and --merges")
        if not 257 <= args.train_tokenizer <= 2**32:
            p.error(f"--train-tokenizer {args.train_tokenizer}: the vocabulary needs at least 257 tokens "
                    "(256 bytes and the separator) and at most 2^32")
        if args.format == "uint16" and args.train_tokenizer > 2**16:
            p.error(f"--train-tokenizer {args.train_tokenizer} does not fit --format uint16 (at most 65536 tokens)")
        if not args.val_input:
            p.error("--train-tokenizer needs --val-input: the tokenizer learns from the training documents "
                    "only, so name the validation documents (a file or folder)")
    return args


def split_inputs(args):
    """(validation inputs, training inputs, all inputs): --val-input's files, then the others in order."""
    inputs = prepare_io.find_inputs(args.inputs)
    val = prepare_io.find_inputs(args.val_input)
    held_out = {os.path.abspath(p) for p, _ in val}
    train = [(p, k) for p, k in inputs if os.path.abspath(p) not in held_out]
    if args.val_input and not train:
        raise InputError("every input is a --val-input: name the training inputs too")
    known = {os.path.abspath(p) for p, _ in inputs}
    return val, train, inputs + [(p, k) for p, k in val if os.path.abspath(p) not in known]


def run(args):
    import tqdm
    if args.tokenizer or args.vocab or args.merges:
        describe_tokenizer(args)  # a bad tokenizer fails before the inputs are read
    val_inputs, train_inputs, inputs = split_inputs(args)
    global OUTPUT
    out = OUTPUT = prepare_io.Staging(args.out, args.name, args.overwrite, args.train_tokenizer is not None)
    start, documents = time.time(), 0
    bar = None
    try:
        trained = None
        if args.train_tokenizer is not None:
            trained = os.path.join(out.path, "tokenizer.json")
            if not args.quiet:
                print(f"training a {args.train_tokenizer}-token byte-level BPE on the training inputs ...",
                      file=sys.stderr)
            got = train_in_child(train_inputs, args, trained)
            if got < args.train_tokenizer:
                print(f"prepare_data.py: warning: the corpus gave only {got} of the {args.train_tokenizer} tokens "
                      "asked (too little text for more merges)", file=sys.stderr)
        spec, name, vocab, sep_token, sep_id, width = describe_tokenizer(args, trained)
        writer = ShardWriter(out.path, args.name, width, sep_id)
        total = sum(os.path.getsize(p) for p, _ in inputs)
        bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, disable=args.quiet, desc="tokenizing", file=sys.stderr)
        # With --val-input its documents are the validation shard; else the first documents.
        phases = [(val_inputs, None), (train_inputs, None)] if val_inputs else [(inputs, ValSplit(args, total))]
        initargs = (args, spec, sep_id, width)
        with contextlib.ExitStack() as stack:
            pool = start_pool(stack, args.workers, init_worker, initargs)
            for part, split in phases:
                for tokens, ndocs, source in tokenized(part, pool, width, sep_token):
                    writer.add(tokens, split.after(len(tokens), source) if split else None)
                    documents += ndocs
                    bar.update(source)
                if writer.split == "val" and val_inputs:
                    writer.end_val(inputs=part)
        writer.close(inputs)
        manifest = {
            "format": FORMAT_NAMES[width], "magic": MAGIC[width][0], "version": MAGIC[width][1],
            "tokenizer": (os.path.abspath(os.path.join(args.out, "tokenizer.json")) if trained else
                          os.path.abspath(spec[1]) if spec[0] == "json" else [os.path.abspath(p) for p in spec[1:]]),
            "vocab_size": vocab, "separator": {"token": sep_token, "id": sep_id, "placement": "before every document"},
            "txt_docs": args.txt_docs, "documents": documents, "tokens": sum(s["tokens"] for s in writer.shards),
            "shards": writer.shards, "inputs": [p for p, _ in inputs], "val_inputs": [p for p, _ in val_inputs],
        }
        if trained:
            manifest["trained_tokenizer"] = {"vocab_size_asked": args.train_tokenizer,
                                             "inputs": [p for p, _ in train_inputs]}
        prepare_io.write_synced(os.path.join(out.path, "manifest.json"), (json.dumps(manifest, indent=2) + "\n").encode())
        out.commit([s["file"] for s in writer.shards] + (["tokenizer.json"] if trained else []) + ["manifest.json"])
    except BaseException:
        out.discard()
        raise
    finally:
        if bar is not None:
            bar.close()
    report(args, manifest, inputs, total, time.time() - start)


def report(args, manifest, inputs, total, seconds):
    for path, count in STATS["undecodable"].items():
        print(f"prepare_data.py: warning: {count} characters of {path} are not {args.encoding} and became U+FFFD "
              f"(pass --encoding if the file has another encoding)", file=sys.stderr)
    for path in [p for p, _ in inputs if not STATS["documents"][p]]:
        print(f"prepare_data.py: warning: {path} holds no documents (empty, blank, or only empty texts)", file=sys.stderr)
    train = [s for s in manifest["shards"] if s["split"] == "train"]
    val = manifest["shards"][0]["file"]
    print(f"wrote {len(manifest['shards'])} shards ({manifest['format']}: 1 validation, {len(train)} training), "
          f"{manifest['tokens']} tokens, {manifest['documents']} documents, in {seconds:.1f} s "
          f"({total / 1e6 / max(seconds, 1e-9):.2f} MB/s of input) -> {args.out}")
    if "trained_tokenizer" in manifest:
        n = len(manifest["trained_tokenizer"]["inputs"])
        print(f"tokenizer: {manifest['tokenizer']} (byte-level BPE, {manifest['vocab_size']} tokens, trained on "
              f"{n} training input{'s' if n != 1 else ''})")
    print(f"train on them: --set data.source=tokens --set 'data.train_path={os.path.join(args.out, args.name)}_train_*.bin' "
          f"--set data.val_path={os.path.join(args.out, val)} --set model.vocab_size={manifest['vocab_size']}")


ARGS = None
STATS = prepare_io.STATS
OUTPUT = None  # the Staging of the run


def removed():
    """How the message of an interrupted run ends: what became of the output."""
    if OUTPUT is not None and OUTPUT.committed:
        return f"the output in {OUTPUT.out} was complete"
    return "what it wrote was removed"


def main(argv=None):
    global ARGS
    ARGS = prepare_io.ARGS = parse_args(sys.argv[1:] if argv is None else argv)
    for s in STOP_SIGNALS:
        if signal.getsignal(s) != signal.SIG_IGN:  # under nohup SIGHUP stays ignored
            signal.signal(s, on_stop_signal)
    try:
        run(ARGS)
    except InputError as e:
        print(f"prepare_data.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"prepare_data.py: interrupted; {removed()}", file=sys.stderr)
        return 130
    except Stopped as e:
        print(f"prepare_data.py: stopped by {signal.Signals(e.signum).name}; {removed()}", file=sys.stderr)
        return 128 + e.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
