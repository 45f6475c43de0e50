"""
The dataset format, written by data/*/prepare.py and read by every script:

    data/NAME/train.bin   uint16 token ids, all training documents back to back
    data/NAME/val.bin     the same for validation
    data/NAME/meta.json   vocabulary, sizes, document boundaries, the start token, the source
    data/NAME/bpe.json    a learned BPE vocabulary (--tokenizer=bpe only; its sha256 in meta.json)

Documents (files of a corpus) are split whole into train or val, and their boundaries are
recorded, so evaluation windows can be taken inside one document: a window that spans two
unrelated files would blur what "position i" means.

The start token (`bos_id` in meta.json) is one extra id that no text encodes to: at character
level the id after the last symbol, with tiktoken its <|endoftext|> (or the id after the last),
with a learned BPE vocabulary its special token <|bos|>, the id after the learned ones.
A model trained with `bos` (train.py's default) reads every sequence with it at position 0:
the token overwrites the first text token of each row, so a window of n positions is the start
token and n - 1 text tokens, and its n targets are the same text with or without the token.
With it a NoPE model can read its position from the share of attention the token gets (~1/i);
without it nothing marks where a window begins. Decoding drops it (it prints as nothing).
Ask this module for batches, windows and passkey prompts: they come with the token when the
Dataset was opened for a model that uses it (Dataset.for_model).
"""

import base64
import hashlib
import json
import math
import os
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import tiktoken

from common import UserError

ROOT = Path(__file__).resolve().parent.parent

DATA_DIR = Path(__file__).resolve().parent
PLACEHOLDER = "\ufffd"  # stands for every character outside an ASCII-only vocabulary
BPE_FILE = "bpe.json"   # a learned BPE vocabulary, written beside meta.json
BOS_TOKEN = "<|bos|>"   # the start token's name in a learned BPE vocabulary
MAX_ID = 65535          # token files are uint16


def dataset_dir(name):
    """A dataset is named (data/NAME) or given as a folder path."""
    p = Path(name)
    return p if (os.sep in name or p.is_dir() and (p / "meta.json").exists()) else DATA_DIR / name


# -----------------------------------------------------------------------------
# Tokenizers: character level (vocabulary stored in meta.json), tiktoken's GPT-2 BPE, or a
# BPE vocabulary learned on the corpus (stored in bpe.json). Each gives token_bytes(): the UTF-8
# bytes each id stands for (0 for the start token), which bits per byte needs.

class CharTokenizer:
    """One id per character; the start token is the id after the last character."""

    def __init__(self, itos):
        self.itos = list(itos)
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.codepoints = np.array([ord(c) for c in self.itos], dtype=np.int64)  # sorted
        self.bos_id = len(self.itos)    # never produced by encode: no character maps to it
        self.vocab_size = len(self.itos) + 1

    @classmethod
    def from_texts(cls, texts, ascii_only=False):
        chars = set()
        for t in texts:
            chars.update(t)
        if ascii_only:
            chars = ({c for c in chars if ord(c) < 128}
                     | ({PLACEHOLDER} if any(ord(c) >= 128 for c in chars) else set()))
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
        return "".join(self.itos[int(i)] for i in ids if int(i) != self.bos_id)

    def meta(self):
        return {"kind": "char", "itos": self.itos}

    def files(self):
        return {}  # the vocabulary lives in meta.json

    def token_bytes(self):
        # an ASCII-only vocabulary's placeholder counts as its own 3 bytes, not those it replaced
        return np.array([len(c.encode("utf-8")) for c in self.itos] + [0], dtype=np.int64)


class TiktokenTokenizer:
    """A tiktoken Encoding; the start token is its <|endoftext|>, or the id after its last."""

    def __init__(self, enc):
        self.enc = enc
        self.name = enc.name
        eot = "<|endoftext|>"
        self.bos_id = enc.encode_single_token(eot) if eot in enc.special_tokens_set else enc.n_vocab
        self.vocab_size = max(enc.n_vocab, self.bos_id + 1)

    def encode(self, text):
        return np.array(self.enc.encode_ordinary(text), dtype=np.uint16)  # special tokens stay text

    def decode(self, ids):
        return self.enc.decode([int(i) for i in ids if int(i) != self.bos_id])

    def meta(self):
        return {"kind": "tiktoken", "name": self.name}

    def files(self):
        return {}  # tiktoken rebuilds a named encoding itself

    def token_bytes(self):
        special = ({self.enc.encode_single_token(t) for t in self.enc.special_tokens_set}
                   | {self.bos_id})
        return np.array([0 if i in special else len(self.enc.decode_single_token_bytes(i))
                         for i in range(self.vocab_size)], dtype=np.int64)


class BpeTokenizer(TiktokenTokenizer):
    """A byte-level BPE vocabulary learned on the training text (train_bpe), encoded and decoded
    by a tiktoken Encoding built from its ranks and split pattern, so the same text always gives
    the same ids and nothing is downloaded. ranks: {token bytes: id}, ids 0..N-1 (the 256 single
    bytes among them); the start token <|bos|> is id N, a special token that encode_ordinary never
    produces, so meta.json's vocab_size is N + 1."""

    def __init__(self, ranks, pattern, trainer=None):
        if sorted(ranks.values()) != list(range(len(ranks))):
            raise ValueError("BPE ranks must be the ids 0..N-1")
        self.ranks, self.pattern, self.trainer = ranks, pattern, trainer
        self.bos_id = len(ranks)
        self.vocab_size = len(ranks) + 1
        self.enc = tiktoken.Encoding(name=f"bpe{len(ranks)}", pat_str=pattern,
                                     mergeable_ranks=ranks, special_tokens={BOS_TOKEN: self.bos_id})
        self.name = self.enc.name
        # bpe.json's bytes, made once (write_dataset stores them; meta() records their hash)
        tokens = sorted(self.ranks, key=self.ranks.get)
        content = {"pattern": self.pattern, "special_tokens": {BOS_TOKEN: self.bos_id},
                   "tokens": [base64.b64encode(t).decode("ascii") for t in tokens]}
        self._file = (json.dumps(content, indent=0) + "\n").encode()

    def files(self):
        """{file name: bytes} that write_dataset stores beside meta.json: the token bytes (base64)
        in id order, the split pattern and the special tokens."""
        return {BPE_FILE: self._file}

    def meta(self):
        sha = hashlib.sha256(self._file).hexdigest()
        return {"kind": "bpe", "file": BPE_FILE, "sha256": sha, "learned": len(self.ranks),
                "trainer": self.trainer}

    @classmethod
    def load(cls, folder, tok, hint):
        """Rebuild from the stored file, after checking it is the one meta.json records."""
        path = Path(folder) / tok["file"]
        try:
            raw = path.read_bytes()
            if hashlib.sha256(raw).hexdigest() != tok["sha256"]:
                raise ValueError("sha256 differs")
            content = json.loads(raw)
            ranks = {base64.b64decode(t): i for i, t in enumerate(content["tokens"])}
            return cls(ranks, content["pattern"], tok.get("trainer"))
        except (OSError, ValueError, KeyError, TypeError):
            again = (hint if "--tokenizer=bpe" in hint
                     else f"{hint} --tokenizer=bpe --vocab_size={tok.get('learned')}")
            raise UserError(f"{path} (the vocabulary this dataset was encoded with) is missing or "
                            f"damaged; prepare the dataset again: {again}") from None


def check_bpe_size(vocab_size):
    """N counts the 256 byte tokens and every merge; the start token (id N) must fit uint16."""
    if not 256 < vocab_size <= MAX_ID:
        raise UserError(f"--vocab_size must be 257..{MAX_ID} with --tokenizer=bpe (256 byte "
                        "tokens, at least one merge, and the start token on top must fit the "
                        f"uint16 token files), got {vocab_size}")


def train_bpe(texts, vocab_size):
    """Learn a byte-level BPE vocabulary of vocab_size ids on texts (the training split only)
    with rustbpe and its GPT-4 split pattern; rustbpe is imported only here."""
    check_bpe_size(vocab_size)
    try:
        import rustbpe  # an optional requirement: only learning a vocabulary needs it
    except ImportError:
        raise UserError("--tokenizer=bpe needs rustbpe: pip install rustbpe "
                        "(or use --tokenizer=char)") from None
    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(iter(texts), vocab_size)
    ranks = dict(trainer.get_mergeable_ranks())
    if len(ranks) < vocab_size:  # rustbpe stops early when no pair is left to merge
        raise UserError(f"the training text runs out of pairs to merge at {len(ranks)} tokens, "
                        f"short of --vocab_size={vocab_size}; give more text or a vocab_size of at "
                        f"most {len(ranks)}")
    return BpeTokenizer(ranks, trainer.get_pattern(),
                        trainer=f"rustbpe {metadata.version('rustbpe')}")


def gpt2_encoding():
    """tiktoken's GPT-2 BPE. Its vocabulary file is downloaded on first use and cached."""
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:
        raise UserError(f"could not load tiktoken's GPT-2 encoding ({type(e).__name__}; it is "
                        "downloaded on first use and needs internet once); use --tokenizer=char "
                        "instead") from None


def tokenizer_from_meta(meta, folder, hint="its prepare.py"):
    """The tokenizer a dataset was encoded with; folder holds its files (bpe.json)."""
    tok = meta["tokenizer"]
    if tok["kind"] == "char":
        return CharTokenizer(tok["itos"])
    if tok["kind"] == "bpe":
        return BpeTokenizer.load(folder, tok, hint)
    if tok["name"] != "gpt2":
        raise UserError(f"this dataset was encoded with tiktoken encoding {tok['name']!r}, which "
                        "cannot be rebuilt here")
    return TiktokenTokenizer(gpt2_encoding())


# -----------------------------------------------------------------------------
# Writing a dataset

def read_text(path):
    """Read a UTF-8 text file, with a clear error otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start}); convert it "
                        "(e.g. iconv -t utf-8) or leave it out") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def write_dataset(out_dir, train_docs, val_docs, tokenizer, source):
    """Encode (name, text) documents and write train.bin, val.bin and meta.json into out_dir,
    with the tokenizer's own files (tokenizer.files(), if it has any) beside them. Everything is
    encoded before anything is written, so bad input leaves an earlier dataset as it was;
    meta.json is written last, so a folder with meta.json is a complete dataset; every file
    goes through a temporary name, so an interrupted run never leaves a broken dataset."""
    if not train_docs or not val_docs:
        raise UserError("need at least one training and one validation document; give more text")
    out_dir = Path(out_dir)
    sha = hashlib.sha256()
    meta = {"format": 1, "source": source, "tokenizer": tokenizer.meta(), "splits": {}}
    files = dict(tokenizer.files())
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
        files[f"{split}.bin"] = ids.tobytes()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        meta["splits"][split] = {"tokens": int(len(ids)), "documents": len(names),
                                 "doc_names": names, "doc_starts": starts, "doc_lengths": lengths}
    vocab_size = tokenizer.vocab_size  # the text's ids and the start token
    if vocab_size > MAX_ID + 1:
        raise UserError(f"vocabulary of {vocab_size} does not fit uint16 token files")
    meta["vocab_size"] = vocab_size
    meta["bos_id"] = tokenizer.bos_id
    meta["sha256"] = sha.hexdigest()
    files["meta.json"] = (json.dumps(meta, indent=1) + "\n").encode()  # last: dicts keep order
    out_dir.mkdir(parents=True, exist_ok=True)
    for fn, data in files.items():
        tmp = out_dir / f"{fn}.tmp{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, out_dir / fn)
    tr, va = meta["splits"]["train"], meta["splits"]["val"]
    print(f"wrote {out_dir}: vocab {vocab_size}, train {tr['tokens']:,} tokens in "
          f"{tr['documents']} docs, val {va['tokens']:,} tokens in {va['documents']} docs")
    print("evaluation windows the val split gives (evaluate.py scores up to 64 per length): "
          + "; ".join(f"L = {L}: {eval_windows(va['doc_names'], va['doc_lengths'], L)} at L, "
                      f"{eval_windows(va['doc_names'], va['doc_lengths'], 8 * L)} at 8L"
                      for L in (128, 512)))
    return meta


def doc_sides(doc_names, doc_lengths):
    """Protocol 3: the validation documents divided once into the evaluation's (0) and the scale
    search's (1), balanced by length: longest first, each document goes to the side holding fewer
    tokens so far (the evaluation's on a tie). Every window of every length is then cut inside one
    side, so no token evaluate.py scores is read by search_scales.py or by train.py's monitor.
    Returns an int array, one entry a document."""
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    side, totals = np.zeros(len(lengths), dtype=np.int64), [0, 0]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], doc_names[i])):
        side[i] = int(totals[1] < totals[0])
        totals[side[i]] += int(lengths[i])
    return side


def val_documents(names, starts, lengths):
    """The validation documents as protocol 3 divides them: as recorded, but one document (a
    single file's last 10%) is read as its two halves, so each side (doc_sides) gets one."""
    if len(names) != 1:
        return list(names), list(starts), list(lengths)
    half = lengths[0] // 2
    return ([f"{names[0]} (first half)", f"{names[0]} (second half)"],
            [starts[0], starts[0] + half], [half, lengths[0] - half])


def eval_windows(doc_names, doc_lengths, length):
    """How many windows of `length` positions Dataset.windows can give the "eval" subset: the
    non-overlapping windows inside its documents (a window takes length + 1 tokens; one document
    is read as two halves, as Dataset.docs does)."""
    doc_names, _, doc_lengths = val_documents(doc_names, [0] * len(doc_lengths), doc_lengths)
    side = doc_sides(doc_names, doc_lengths)
    return int(sum(max((n - 1) // length, 0) for n, s in zip(doc_lengths, side) if s == 0))


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
    """A prepared dataset: token memmaps, documents, batches and fixed evaluation windows.
    bos=True: every batch row, window and passkey prompt begins with the start token."""

    def __init__(self, name, bos=False):
        self.dir = dataset_dir(name)
        meta_path = self.dir / "meta.json"
        # NAME_bpeN: prepared by data/NAME/prepare.py --tokenizer=bpe --vocab_size=N
        base, bpe = re.fullmatch(r"(.+?)(?:_bpe(\d+))?", name).groups()
        self.prepare_hint = (f"python data/{base}/prepare.py"
                             + (f" --tokenizer=bpe --vocab_size={bpe}" if bpe else "")
                             if (DATA_DIR / base / "prepare.py").exists()
                             else f"python data/text/prepare.py --input=PATH --name={name}")
        if not meta_path.exists():
            raise UserError(f"dataset {name!r} is not prepared ({meta_path} missing); "
                            f"run: {self.prepare_hint}")
        try:
            with open(meta_path, encoding="utf-8") as f:
                self.meta = json.load(f)
            self.vocab_size = self.meta["vocab_size"]
            if (not {"train", "val"} <= set(self.meta["splits"])
                    or "kind" not in self.meta["tokenizer"]):
                raise KeyError("splits")
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{meta_path} is damaged; prepare the dataset again: "
                            f"{self.prepare_hint}") from None
        self.name = name
        self.bos_id = self.meta.get("bos_id")
        if self.bos_id is None:
            raise UserError(f"dataset {name!r} was prepared before the start token existed; "
                            f"prepare it again ({self.prepare_hint})")
        self.bos = bool(bos)
        self.tokens = {}
        for split in ("train", "val"):
            path = self.dir / f"{split}.bin"
            n = self.meta["splits"][split]["tokens"]
            if not path.exists() or path.stat().st_size != 2 * n:
                raise UserError(f"{path} is missing or does not match meta.json; "
                                "prepare the dataset again")
            if n < 2:
                raise UserError(f"{path} holds fewer than 2 tokens; give more text")
            self.tokens[split] = np.memmap(path, dtype=np.uint16, mode="r")
        self._tokenizer = self._token_bytes = None
        if self.meta["tokenizer"].get("kind") == "bpe":  # check its vocabulary now, not mid-run
            self.tokenizer  # noqa: B018

    @classmethod
    def for_model(cls, model_config, ckpt, name=""):
        """The dataset a checkpoint was trained on (or `name`), opened in the model's start-token
        mode, after checking that it is the same data: its vocabulary size and, when both record
        it, the hash of its text. The one place where a model and a dataset are matched."""
        recorded = ckpt.get("dataset", {}) if isinstance(ckpt.get("dataset"), dict) else {}
        name = name or recorded.get("name") or ckpt.get("config", {}).get("dataset")
        if not name:
            raise UserError("the checkpoint does not record its dataset; pass --dataset=NAME")
        ds = cls(name, bos=model_config.bos)
        if ds.vocab_size != model_config.vocab_size:
            raise UserError(f"dataset {name!r} has {ds.vocab_size} token ids, the checkpoint "
                            f"{model_config.vocab_size}; use the dataset it was trained on "
                            "(--dataset=NAME)")
        sha, ours = recorded.get("sha256"), ds.meta.get("sha256")
        if sha and ours and sha != ours:
            raise UserError(f"dataset {name!r} holds other text than the checkpoint was trained "
                            f"on (sha256 {ours[:12]} vs {sha[:12]}); prepare it as it was (same "
                            "corpus and Python version) or retrain")
        return ds

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = tokenizer_from_meta(self.meta, self.dir, self.prepare_hint)
        return self._tokenizer

    def bits_per_byte(self, loss, windows):
        """A mean loss in nats per target token over windows (k, n+1) -> bits per byte of the UTF-8
        text those targets cover: total nats / (ln 2 * total bytes). Unlike nats per token it
        compares models with different tokenizers. At character level a character counts its
        UTF-8 bytes (the ASCII-only placeholder counts as its own 3); the start token counts 0."""
        import torch  # the data scripts run without PyTorch
        if self._token_bytes is None:
            self._token_bytes = torch.from_numpy(self.tokenizer.token_bytes())
        targets = windows[:, 1:]
        return float(loss) * targets.numel() / (math.log(2) * int(self._token_bytes[targets].sum()))

    def encode(self, text):
        """Text to ids; the start token is never among them (see prompt_ids)."""
        return self.tokenizer.encode(text)

    def decode(self, ids):
        """Ids to text; the start token prints as nothing."""
        return self.tokenizer.decode(ids)

    def prompt_ids(self, text):
        """A prompt as the model reads it: the start token first (in bos mode), then the text."""
        ids = self.encode(text).astype(np.int64)
        return np.concatenate([[self.bos_id], ids]) if self.bos else ids

    def passkey(self):
        """Passkey examples in this dataset's tokens and start-token mode."""
        from data.passkey import Passkey  # its examples are tensors: the data scripts need none
        return Passkey(self.tokenizer, self.bos_id if self.bos else None)

    def _with_bos(self, xy):
        """Rows of text tokens (k, n+1) -> the same rows with position 0 the start token (in bos
        mode): inputs [bos, t1 .. t_{n-1}], targets t1 .. t_n, the same targets as without it."""
        if self.bos:
            xy[:, 0] = self.bos_id
        return xy

    def docs(self, split):
        """The split's documents: names, first token's index, lengths (the validation split as
        val_documents reads it)."""
        s = self.meta["splits"][split]
        names, starts, lengths = s["doc_names"], s["doc_starts"], s["doc_lengths"]
        if split == "val":
            names, starts, lengths = val_documents(names, starts, lengths)
        return names, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)

    def get_batch(self, split, batch_size, block_size, generator, device="cpu",
                  within_documents=False):
        """Random rows of block_size positions anywhere in the split (nanoGPT's sampler): inputs
        x (B, block_size), targets y (B, block_size) = x shifted by one; x[:, 0] is the start
        token in bos mode. within_documents=True: every row inside one document, as the
        evaluation's windows are (HeadScale's fit rows), drawn evenly over the places one fits."""
        import torch  # the data scripts run without PyTorch
        data = self.tokens[split]
        if len(data) <= block_size + 1:
            raise UserError(f"the {split} split ({len(data)} tokens) is shorter than "
                            f"block_size+1={block_size + 1}")
        if within_documents:
            ix = self._starts_within_documents(split, batch_size, block_size + 1, generator)
        else:
            ix = torch.randint(len(data) - block_size - 1, (batch_size,),
                               generator=generator).tolist()
        rows = [data[i:i + block_size + 1].astype(np.int64) for i in ix]
        xy = self._with_bos(torch.from_numpy(np.stack(rows)))
        x, y = xy[:, :-1], xy[:, 1:]
        if str(device).startswith("cuda"):
            return (x.pin_memory().to(device, non_blocking=True),
                    y.pin_memory().to(device, non_blocking=True))
        return x.to(device), y.to(device)

    def _starts_within_documents(self, split, count, n, generator):
        """`count` start indices of rows of n tokens that lie inside one document each, uniform over
        every such place in the split."""
        import torch  # the data scripts run without PyTorch
        names, starts, lengths = self.docs(split)
        room = np.maximum(lengths - n + 1, 0)  # the places a row of n tokens fits in each document
        if room.sum() == 0:
            raise UserError(f"no {split} document holds {n} tokens (the longest: {lengths.max()}); "
                            "use a shorter length")
        r = torch.randint(int(room.sum()), (count,), generator=generator).numpy()
        doc = np.searchsorted(np.cumsum(room), r, side="right")
        return (starts[doc] + r - (np.cumsum(room) - room)[doc]).tolist()

    def window_offsets(self, length, count, seed=1234, split="val", subset="all"):
        """Where windows() takes its windows: their first token's index in the split, (count',)."""
        if length <= 0:
            raise UserError(f"window length must be > 0, got {length}")
        if subset not in ("all", "eval", "search"):
            raise ValueError(f"subset must be all, eval or search, got {subset!r}")
        names, starts, lengths = self.docs(split)
        per_doc = np.maximum((lengths - 1) // length, 0)  # non-overlapping windows per document
        if subset != "all":  # only the documents on this subset's side (doc_sides)
            per_doc = per_doc * (doc_sides(names, lengths) == (0 if subset == "eval" else 1))
        doc = np.repeat(np.arange(len(names)), per_doc)
        slot = np.arange(len(doc)) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)
        if len(doc) == 0:
            i = int(lengths.argmax())
            if (lengths - 1 >= length).sum() == 0:
                raise UserError(f"no {split} document holds {length + 1} tokens: the longest is "
                                f"{names[i]!r} with {lengths[i]} tokens, so the longest length "
                                f"available is {lengths[i] - 1}")
            raise UserError(f"no {subset} document of the {split} split holds {length + 1} tokens "
                            "(the search and eval subsets have documents of their own; longest: "
                            f"{lengths[i]} tokens); use a shorter length")
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(len(doc), size=min(count, len(doc)), replace=False))
        if len(pick) < count:
            print(f"note: only {len(pick)} {subset} windows of {length} positions fit in the "
                  f"{split} split ({count} asked); results record the count", flush=True)
        return starts[doc[pick]] + slot[pick] * length

    def windows(self, length, count, seed=1234, split="val", subset="all"):
        """Fixed, seeded evaluation windows of `length` positions (inputs) and their targets, as
        one (count', length+1) int64 tensor, each inside a single document and none overlapping
        another. The same arguments give the same windows, so every model and every lambda sees
        the same text; bos and no-bos models score the same targets.
        subset: "eval" or "search" takes windows only inside that subset's documents (doc_sides,
        protocol 3), so at no length does the scale search, or train.py's monitor, read a token
        the evaluation scores ("all" takes every document; study/overlap.py counts what is shared).
        count' = min(count, windows available); a shortfall is printed in one line."""
        import torch  # the data scripts run without PyTorch
        offsets = self.window_offsets(length, count, seed, split, subset)
        data = self.tokens[split]
        rows = [data[o:o + length + 1].astype(np.int64) for o in offsets]
        return self._with_bos(torch.from_numpy(np.stack(rows)))
