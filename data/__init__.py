"""
The dataset format, written by data/*/prepare.py and read by every script:

    data/NAME/train.bin   uint16 token ids, all training documents back to back
    data/NAME/val.bin     the same for validation
    data/NAME/meta.json   vocabulary, sizes, document boundaries, where the text came from

Documents (files of a corpus) are split whole into train or val, and their boundaries are
recorded, so evaluation windows can be taken inside one document: a window that spans two
unrelated files would blur what "position i" means.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # so data/NAME/prepare.py can import the project's modules
    sys.path.insert(0, str(ROOT))
from common import UserError  # noqa: E402

DATA_DIR = Path(__file__).resolve().parent
PLACEHOLDER = "\ufffd"  # stands for every character outside an ASCII-only vocabulary


def dataset_dir(name):
    """A dataset is named (data/NAME) or given as a folder path."""
    p = Path(name)
    return p if (os.sep in name or p.is_dir() and (p / "meta.json").exists()) else DATA_DIR / name


# -----------------------------------------------------------------------------
# Tokenizers: character level (vocabulary stored in meta.json) or tiktoken BPE

class CharTokenizer:

    def __init__(self, itos):
        self.itos = list(itos)
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.codepoints = np.array([ord(c) for c in self.itos], dtype=np.int64)  # sorted

    @classmethod
    def from_texts(cls, texts, ascii_only=False):
        chars = set()
        for t in texts:
            chars.update(t)
        if ascii_only:
            chars = {c for c in chars if ord(c) < 128} | ({PLACEHOLDER} if any(ord(c) >= 128 for c in chars) else set())
        return cls(sorted(chars))

    def encode(self, text):
        cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.minimum(np.searchsorted(self.codepoints, cps), len(self.codepoints) - 1)
        bad = self.codepoints[ids] != cps
        if bad.any():
            if PLACEHOLDER not in self.stoi:
                c = chr(int(cps[bad.argmax()]))
                raise UserError(f"character {c!r} is not in this dataset's vocabulary")
            ids[bad] = self.stoi[PLACEHOLDER]  # an ASCII-only vocabulary: one symbol for the rest
        return ids.astype(np.uint16)

    def decode(self, ids):
        return "".join(self.itos[int(i)] for i in ids)

    def meta(self):
        return {"kind": "char", "itos": self.itos}


class TiktokenTokenizer:

    def __init__(self, enc):
        self.enc = enc
        self.name = enc.name

    def encode(self, text):
        return np.array(self.enc.encode_ordinary(text), dtype=np.uint16)

    def decode(self, ids):
        return self.enc.decode([int(i) for i in ids])

    def meta(self):
        return {"kind": "tiktoken", "name": self.name}


def gpt2_encoding():
    """tiktoken's GPT-2 BPE. Its vocabulary file is downloaded on first use and cached."""
    try:
        import tiktoken
        return tiktoken.get_encoding("gpt2")
    except Exception as e:
        raise UserError(f"could not load tiktoken's GPT-2 encoding ({type(e).__name__}; it is downloaded "
                        "on first use and needs internet once); use --tokenizer=char instead") from None


def tokenizer_from_meta(meta):
    tok = meta["tokenizer"]
    if tok["kind"] == "char":
        return CharTokenizer(tok["itos"])
    if tok["name"] != "gpt2":
        raise UserError(f"this dataset was encoded with tiktoken encoding {tok['name']!r}, which cannot be rebuilt here")
    return TiktokenTokenizer(gpt2_encoding())


# -----------------------------------------------------------------------------
# Writing a dataset

def read_text(path):
    """Read a UTF-8 text file, with a clear error otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start}); convert it (e.g. iconv -t utf-8) "
                        "or leave it out") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def write_dataset(out_dir, train_docs, val_docs, tokenizer, source):
    """Encode (name, text) documents and write train.bin, val.bin and meta.json into out_dir.
    meta.json is written last, so a folder with meta.json is a complete dataset; every file
    goes through a temporary name, so an interrupted run never leaves a broken dataset."""
    if not train_docs or not val_docs:
        raise UserError("need at least one training and one validation document; give more text")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256()
    meta = {"format": 1, "source": source, "tokenizer": tokenizer.meta(), "splits": {}}
    for split, docs in (("train", train_docs), ("val", val_docs)):
        arrays, names, lengths = [], [], []
        for name, text in docs:
            sha.update(text.encode("utf-8"))
            ids = tokenizer.encode(text)
            if len(ids) == 0:
                continue
            arrays.append(ids)
            names.append(name)
            lengths.append(len(ids))
        if not arrays:
            raise UserError(f"the {split} split is empty after encoding; give more text")
        ids = np.concatenate(arrays).astype(np.uint16)
        tmp = out_dir / f"{split}.bin.tmp{os.getpid()}"
        ids.tofile(tmp)
        os.replace(tmp, out_dir / f"{split}.bin")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        meta["splits"][split] = {"tokens": int(len(ids)), "documents": len(names),
                                 "doc_names": names, "doc_starts": starts, "doc_lengths": lengths}
    vocab_size = len(tokenizer.itos) if isinstance(tokenizer, CharTokenizer) else tokenizer.enc.n_vocab
    if vocab_size > 65536:
        raise UserError(f"vocabulary of {vocab_size} does not fit uint16 token files")
    meta["vocab_size"] = vocab_size
    meta["sha256"] = sha.hexdigest()
    tmp = out_dir / f"meta.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, out_dir / "meta.json")
    tr, va = meta["splits"]["train"], meta["splits"]["val"]
    print(f"wrote {out_dir}: vocab {vocab_size}, train {tr['tokens']:,} tokens in {tr['documents']} docs, "
          f"val {va['tokens']:,} tokens in {va['documents']} docs")
    return meta


def split_by_hash(names, val_fraction):
    """A stable split of documents by a hash of their name: adding a file never moves others."""
    def h(n):
        return int(hashlib.sha1(n.encode()).hexdigest()[:8], 16) / 16 ** 8
    val = {n for n in names if h(n) < val_fraction}
    if not val and len(names) > 1:  # tiny corpora: still hold one document out
        val = {min(names, key=h)}
    return val


# -----------------------------------------------------------------------------
# Reading a dataset

class Dataset:
    """A prepared dataset: token memmaps, documents, batches and fixed evaluation windows."""

    def __init__(self, name):
        self.dir = dataset_dir(name)
        meta_path = self.dir / "meta.json"
        if not meta_path.exists():
            hint = (f"python data/{name}/prepare.py" if (DATA_DIR / name / "prepare.py").exists()
                    else f"python data/text/prepare.py --input=PATH --name={name}")
            raise UserError(f"dataset {name!r} is not prepared ({meta_path} missing); run: {hint}")
        with open(meta_path) as f:
            self.meta = json.load(f)
        self.vocab_size = self.meta["vocab_size"]
        self.tokens = {}
        for split in ("train", "val"):
            path = self.dir / f"{split}.bin"
            n = self.meta["splits"][split]["tokens"]
            if not path.exists() or path.stat().st_size != 2 * n:
                raise UserError(f"{path} is missing or does not match meta.json; prepare the dataset again")
            if n < 2:
                raise UserError(f"{path} holds fewer than 2 tokens; give more text")
            self.tokens[split] = np.memmap(path, dtype=np.uint16, mode="r")
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_meta(self.meta)
        return self._tokenizer

    def encode(self, text):
        return self.tokenizer.encode(text)

    def decode(self, ids):
        return self.tokenizer.decode(ids)

    def docs(self, split):
        s = self.meta["splits"][split]
        return s["doc_names"], np.array(s["doc_starts"], dtype=np.int64), np.array(s["doc_lengths"], dtype=np.int64)

    def get_batch(self, split, batch_size, block_size, generator, device="cpu"):
        """Random windows of block_size+1 tokens anywhere in the split (nanoGPT's sampler)."""
        data = self.tokens[split]
        if len(data) <= block_size + 1:
            raise UserError(f"the {split} split ({len(data)} tokens) is shorter than block_size+1={block_size + 1}")
        ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator).tolist()
        xy = torch.from_numpy(np.stack([data[i:i + block_size + 1].astype(np.int64) for i in ix]))
        x, y = xy[:, :-1], xy[:, 1:]
        if str(device).startswith("cuda"):
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)

    def windows(self, length, count, seed=1234, split="val"):
        """Fixed, seeded evaluation windows of length+1 tokens (inputs and shifted targets),
        each inside a single document and none overlapping another. The same (length, count,
        seed) gives the same windows, so every model and every lambda sees the same text.
        Returns a (count', length+1) int64 tensor, count' = min(count, windows available)."""
        if length <= 0:
            raise UserError(f"window length must be > 0, got {length}")
        names, starts, lengths = self.docs(split)
        per_doc = np.maximum((lengths - 1) // length, 0)  # non-overlapping windows per document
        if per_doc.sum() == 0:
            i = int(lengths.argmax())
            raise UserError(f"no {split} document holds {length + 1} tokens: the longest is {names[i]!r} "
                            f"with {lengths[i]} tokens, so the longest length available is {lengths[i] - 1}")
        doc = np.repeat(np.arange(len(names)), per_doc)
        slot = np.arange(len(doc)) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(len(doc), size=min(count, len(doc)), replace=False))
        offsets = starts[doc[pick]] + slot[pick] * length
        data = self.tokens[split]
        return torch.from_numpy(np.stack([data[o:o + length + 1].astype(np.int64) for o in offsets]))
