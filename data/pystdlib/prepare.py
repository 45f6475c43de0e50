"""
The built-in corpus: the Python standard library's own source files, character level or
with a BPE vocabulary learned on its training files. Needs no download: it reads the library
of the interpreter that runs this script.

    python data/pystdlib/prepare.py                                   # data/pystdlib
    python data/pystdlib/prepare.py --tokenizer=bpe --vocab_size=1024   # data/pystdlib_bpe1024

Left out: site-packages, test suites (test/, tests/), idlelib, lib2to3, and the codec tables
under encodings/ (about 17% of the text, and lookup tables rather than code). At character
level non-ASCII characters map to one placeholder, so the vocabulary is about 100 symbols;
with --tokenizer=bpe rustbpe learns N ids (256 bytes + merges) on the raw UTF-8 training text,
no placeholder needed, and the start token is id N on top. Files are split
whole into train and val by a hash of their path. The result depends on the Python version
(3.12 dropped distutils), so meta.json records the version and a hash of the text.
"""

import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.cli import UserError, parse_config, run_main  # noqa: E402
from data import CharTokenizer, check_bpe_size, read_text, split_by_hash, train_bpe, write_dataset  # noqa: E402

SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "encodings", "__pycache__"}


@dataclass
class PrepareConfig:
    root: str = ""              # standard library folder to read ('' = this interpreter's)
    out_dir: str = ""           # where to write ('' = data/pystdlib, or data/pystdlib_bpeN with bpe)
    tokenizer: str = "char"     # char (ASCII + one placeholder) | bpe (learned on the training files)
    vocab_size: int = 0         # with bpe: ids to learn, the 256 bytes included (the start token comes on top)
    val_fraction: float = 0.1   # share of files held out for validation


def main():
    cfg = parse_config(PrepareConfig, description=__doc__)
    root = Path(cfg.root or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise UserError(f"{root} is not a folder; give --root=PATH of a Python standard library")
    if not 0 < cfg.val_fraction < 1:
        raise UserError(f"--val_fraction must be between 0 and 1, got {cfg.val_fraction}")
    if cfg.tokenizer == "bpe":
        check_bpe_size(cfg.vocab_size)  # before reading the library
    elif cfg.tokenizer != "char":
        raise UserError(f"--tokenizer must be char or bpe, got {cfg.tokenizer!r}")
    elif cfg.vocab_size:
        raise UserError("--vocab_size is for --tokenizer=bpe only")
    docs = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                path = Path(dirpath) / fn
                try:
                    docs[str(path.relative_to(root))] = read_text(path)
                except UserError:
                    print(f"skipping {path}: not UTF-8")
    if not docs:
        raise UserError(f"no .py files under {root}")
    held = split_by_hash(list(docs), cfg.val_fraction)
    train = [(n, t) for n, t in docs.items() if n not in held]
    val = [(n, t) for n, t in docs.items() if n in held]
    if cfg.tokenizer == "bpe":
        tok = train_bpe((t for _, t in train), cfg.vocab_size)  # merges from the training files alone
    else:
        tok = CharTokenizer.from_texts(docs.values(), ascii_only=True)
    source = {"corpus": "pystdlib", "root": str(root), "files": len(docs),
              "python_version": sys.version.split()[0], "skipped_dirs": sorted(SKIP_DIRS)}
    here = Path(__file__).parent
    out = cfg.out_dir or (here.parent / f"pystdlib_bpe{cfg.vocab_size}" if cfg.tokenizer == "bpe" else here)
    write_dataset(out, train, val, tok, source)


if __name__ == "__main__":
    run_main(main)
