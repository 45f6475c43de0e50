"""
Your own text: a UTF-8 file or a folder of files, at character level, with a BPE vocabulary
learned on its training split, or with GPT-2's BPE.

    python data/text/prepare.py --input=PATH --name=NAME [--tokenizer=char|bpe|gpt2]
                                [--vocab_size=N]

writes data/NAME/, then every script takes --dataset=NAME. A folder is read recursively
(hidden files skipped); its files are split whole into train and val by a hash of their
path. A single file is split by position: the first 90% train, the rest val.
--tokenizer=bpe learns N ids (the 256 bytes and N - 256 merges) with rustbpe on the training
text only and stores them in data/NAME/bpe.json; the start token is id N, so the model's
vocabulary is N + 1. GPT-2's BPE needs tiktoken to download its vocabulary once; offline, use
char or bpe.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import UserError, parse_config, run_main  # noqa: E402
from data import (DATA_DIR, CharTokenizer, TiktokenTokenizer, check_bpe_size,  # noqa: E402
                  gpt2_encoding, read_text, split_by_hash, train_bpe, write_dataset)


@dataclass
class PrepareConfig:
    input: str = ""             # a UTF-8 text file or a folder of them (required)
    name: str = ""              # dataset name: writes data/NAME/ (required unless --out_dir)
    out_dir: str = ""           # where to write instead of data/NAME
    tokenizer: str = "char"     # char | bpe (learned on the training text) | gpt2 (GPT-2's BPE)
    vocab_size: int = 0         # with bpe: ids to learn, 256 bytes included (start token on top)
    ext: str = ""               # in a folder, only files ending with this (e.g. .txt; '' = all)
    val_fraction: float = 0.1   # share of text (one file) or of files (a folder) held out


def read_docs(path, ext):
    """(name, text) for one file, or for every non-hidden file under a folder."""
    if path.is_file():
        return [(path.name, read_text(path))]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(ext)
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return [(str(p.relative_to(path)), read_text(p)) for p in files]


def prepare(cfg, tokenizer=None):
    """tokenizer: an object with encode/decode/meta (tests pass a small tiktoken one)."""
    if not cfg.input:
        raise UserError("give --input=PATH (a text file or a folder) and --name=NAME")
    if not (cfg.name or cfg.out_dir):
        raise UserError("give --name=NAME for data/NAME/ (or --out_dir=PATH)")
    if not 0 < cfg.val_fraction < 1:
        raise UserError(f"--val_fraction must be between 0 and 1, got {cfg.val_fraction}")
    if tokenizer is None and cfg.tokenizer not in ("char", "bpe", "gpt2"):
        raise UserError(f"--tokenizer must be char, bpe or gpt2, got {cfg.tokenizer!r}")
    if cfg.tokenizer == "bpe":
        check_bpe_size(cfg.vocab_size)  # before reading the text
    elif cfg.vocab_size:
        raise UserError("--vocab_size is for --tokenizer=bpe only")
    path = Path(cfg.input)
    if not path.exists():
        raise UserError(f"--input={cfg.input} does not exist")
    docs = [(n, t) for n, t in read_docs(path, cfg.ext) if t]
    if not docs:
        raise UserError(f"no text found in {path}"
                        + (f" (files ending {cfg.ext})" if cfg.ext else ""))
    if len(docs) == 1:  # one document: split by position
        name, text = docs[0]
        n = int(len(text) * (1 - cfg.val_fraction))
        train, val = [(name, text[:n])], [(name, text[n:])]
    else:
        held = split_by_hash([n for n, _ in docs], cfg.val_fraction)
        train = [d for d in docs if d[0] not in held]
        val = [d for d in docs if d[0] in held]
    if tokenizer is None:
        if cfg.tokenizer == "char":
            tokenizer = CharTokenizer.from_texts(t for _, t in docs)
        elif cfg.tokenizer == "bpe":
            # merges from the training text alone
            tokenizer = train_bpe((t for _, t in train), cfg.vocab_size)
        else:
            tokenizer = TiktokenTokenizer(gpt2_encoding())
    out = Path(cfg.out_dir) if cfg.out_dir else DATA_DIR / cfg.name
    return write_dataset(out, train, val, tokenizer,
                         {"corpus": "text", "input": str(path.resolve())})


if __name__ == "__main__":
    run_main(lambda: prepare(parse_config(PrepareConfig, description=__doc__)))
