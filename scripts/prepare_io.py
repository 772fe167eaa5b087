"""prepare_data.py's files: finding and reading the inputs (plain or compressed), and the output folder,
written in a hidden temporary folder and moved into place at the end (a module of its own to keep
prepare_data.py short; it is not a command)."""
import bz2
import collections
import gzip
import lzma
import os
import re
import shutil
import signal
import tempfile

KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
COMPRESSED = {".xz": lzma.LZMAFile, ".gz": lambda raw: gzip.GzipFile(fileobj=raw), ".bz2": bz2.BZ2File}
STREAMED = ("txt", "jsonl")  # the kinds that may be compressed (parquet compresses inside the file)
ARGS = None  # prepare_data.py's options (text_field, encoding, txt_docs)
STATS = {"undecodable": collections.Counter(), "documents": collections.Counter()}


class InputError(Exception):
    """Bad input: reported by name, exit code 2."""


# ---- finding the inputs -----------------------------------------------------------------------

def kind_of(path):
    """txt, jsonl or parquet by the name (a .txt or .jsonl may end in .xz, .gz or .bz2); None otherwise."""
    stem, ext = os.path.splitext(path.lower())
    if ext in COMPRESSED:
        kind = KINDS.get(os.path.splitext(stem)[1])
        return kind if kind in STREAMED else None
    return KINDS.get(ext)


def find_inputs(paths):
    """[(path, kind)] in order: files as given, folders walked in sorted order."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                inside += [os.path.join(root, f) for f in sorted(files) if kind_of(f)]
            if not inside:
                raise InputError(f"the folder {path} holds no .txt, .jsonl or .parquet file (plain, or .txt/.jsonl "
                                 "compressed as .xz, .gz, .bz2)")
            found += [(p, kind_of(p)) for p in inside]
        elif kind_of(path):
            found.append((path, kind_of(path)))
        elif not os.path.exists(path):
            raise InputError(f"the input {path} does not exist")
        else:
            raise InputError(f"the input {path} is not a .txt, .jsonl or .parquet file (.txt and .jsonl may be "
                             "compressed: .xz, .gz, .bz2)")
    for path, kind in found:
        check_readable(path, kind)
    return found


def check_readable(path, kind):
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise InputError(f"cannot read the input {path}")
    if kind == "parquet":
        parquet_column(path)


def parquet_column(path):
    """The ParquetFile, checked to have the --text-field column."""
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


# ---- reading them: (document or None, input bytes consumed) -----------------------------------

def content(path, whole):
    """The lines of path (whole: all of it as one piece), decompressed, each with the input bytes it took;
    a last (None, bytes) makes the counts add up to the file's size."""
    size, last = os.path.getsize(path), 0
    try:
        with open(path, "rb") as raw:
            opener = COMPRESSED.get(os.path.splitext(path.lower())[1])
            stream = opener(raw) if opener else raw
            for piece in ([stream.read()] if whole else stream):
                position = raw.tell()
                yield piece, position - last
                last = position
    except (lzma.LZMAError, EOFError, OSError) as e:  # corrupt or truncated data, a read error
        raise InputError(f"cannot read the input {path}: {e}") from None
    if size > last:
        yield None, size - last


def read_txt(path):
    """(document, source bytes) of a text file."""
    for raw, nbytes in content(path, whole=True):
        if raw is None:
            yield None, nbytes
            continue
        text = raw.decode(ARGS.encoding, errors="replace")
        bad = text.count("\ufffd") - raw.decode(ARGS.encoding, errors="ignore").count("\ufffd")
        if bad:
            STATS["undecodable"][path] += bad
        if ARGS.txt_docs == "file":
            yield (text if text.strip() else None), nbytes
            continue
        blocks = re.split(r"\n[ \t\r\f\v]*\n", text)
        for i, block in enumerate(blocks):
            yield (block if block.strip() else None), (nbytes if i == len(blocks) - 1 else 0)


def read_jsonl(path):
    import json
    number = 0
    for line, nbytes in content(path, whole=False):
        if line is None:
            yield None, nbytes
            continue
        number += 1
        if not line.strip():
            yield None, nbytes
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{number}: not a JSON object ({e})") from None
        text = record.get(ARGS.text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise InputError(f"{path}:{number}: no string field {ARGS.text_field!r} ({not_text(record)}; "
                             "name the text field with --text-field)")
        yield (text if text else None), nbytes


def not_text(record):
    """What a record holds instead of text: missing, null, or a type."""
    if not isinstance(record, dict) or ARGS.text_field not in record:
        return "missing"
    value = record[ARGS.text_field]
    return "null" if value is None else f"a {type(value).__name__}"


def read_parquet(path):
    f = parquet_column(path)
    size, rows = os.path.getsize(path), max(f.metadata.num_rows, 1)
    done = 0
    for batch in f.iter_batches(columns=[ARGS.text_field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            done += 1
            if not isinstance(text, str):
                raise InputError(f"{path}: row {done}: column {ARGS.text_field!r} holds "
                                 f"{'null' if text is None else type(text).__name__}, not text")
            yield (text if text else None), size * done // rows - size * (done - 1) // rows


READERS = {"txt": read_txt, "jsonl": read_jsonl, "parquet": read_parquet}


# ---- the output folder ------------------------------------------------------------------------

def write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def sync_folder(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Blocked:
    """Holds off SIGINT, SIGTERM and SIGHUP (they arrive after the block) while the output is moved or removed."""
    SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

    def __enter__(self):
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


class Staging:
    """A hidden temporary folder for the output: beside --out when --out does not exist yet (renamed to it at
    the end), else inside it (its files moved in at the end, replacing the old shards of --name with --overwrite)."""

    def __init__(self, out, name, overwrite, with_tokenizer):
        self.out, self.created, self.old, self.committed = out, [], [], False
        if os.path.exists(out) and not os.path.isdir(out):
            raise InputError(f"--out {out} is not a folder")
        self.existed = os.path.isdir(out)
        if self.existed:
            where, prefix = out, f".{name}.prepare-"
            self.old = self.previous_output(name, with_tokenizer)
            if self.old and not overwrite:
                raise InputError(f"the output folder {out} holds shards already ({', '.join(self.old[:3])}"
                                 f"{', ...' if len(self.old) > 3 else ''}); choose another --out or --name, or pass --overwrite")
        else:
            where = os.path.dirname(os.path.abspath(out))
            prefix = f".{os.path.basename(os.path.abspath(out))}.prepare-"
            self.make_parents(where)
        try:
            self.path = tempfile.mkdtemp(prefix=prefix, dir=where)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.path, 0o777 & ~umask)  # mkdtemp's 0700 would become --out's
        except OSError as e:
            self.discard()
            raise InputError(f"cannot write in {where}: {e.strerror}") from None

    def previous_output(self, name, with_tokenizer):
        ours = re.compile(rf"^{re.escape(name)}_(train|val)_\d{{6}}\.bin$")
        mine = {"manifest.json"} | ({"tokenizer.json"} if with_tokenizer else set())
        try:
            return sorted(f for f in os.listdir(self.out) if ours.match(f) or f in mine)
        except OSError as e:
            raise InputError(f"cannot read the output folder {self.out}: {e.strerror}") from None

    def make_parents(self, where):
        """Makes the missing folders above --out, remembering them (deepest first) to remove on failure."""
        d = where
        while not os.path.isdir(d):
            self.created.append(d)
            d = os.path.dirname(d)
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as e:
            self.discard()
            raise InputError(f"cannot make the folder {where} for --out: {e.strerror}") from None

    def commit(self, files):
        """Moves files (manifest.json last) into --out: one rename of the folder when --out is new."""
        with Blocked():
            sync_folder(self.path)
            try:
                if not self.existed:
                    os.rename(self.path, self.out)
                else:
                    for f in self.old:
                        os.remove(os.path.join(self.out, f))
                    for f in files:
                        os.replace(os.path.join(self.path, f), os.path.join(self.out, f))
                    os.rmdir(self.path)
            except OSError as e:
                raise InputError(f"cannot move the output into {self.out}: {e}") from None
            sync_folder(self.out)
            self.committed = True

    def discard(self):
        """Removes the temporary folder and the folders made for it; --out stays as it was."""
        if self.committed:
            return
        with Blocked():
            if getattr(self, "path", None):
                shutil.rmtree(self.path, ignore_errors=True)
            for d in self.created:
                try:
                    os.rmdir(d)
                except OSError:
                    break
