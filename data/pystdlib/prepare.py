"""
The built-in corpus: the Python standard library's own source files, character level or
with a BPE vocabulary learned on its training files. Needs no download: the files are shipped
in this folder, as Python 3.11.7's library held them (stdlib-3.11.7.tar.xz, 1.8 MB; the
Python Software Foundation's license beside it, LICENSE-PSF.txt), so every Python from 3.10
and every OS prepares the same text, byte for byte.

    python data/pystdlib/prepare.py                                   # data/pystdlib
    python data/pystdlib/prepare.py --tokenizer=bpe --vocab_size=1024   # data/pystdlib_bpe1024
    python data/pystdlib/prepare.py --root=/usr/lib/python3.12        # another library instead

The selection (made once from 3.11.7's library, and the same for --root): every .py file
except site-packages, test suites (test/, tests/), idlelib, lib2to3, and the codec tables
under encodings/ (about 17% of the text, and lookup tables rather than code), and files that
are not UTF-8. Documents are named by their POSIX path inside the library and kept in the order
of a sorted walk. At character level non-ASCII characters map to one placeholder, so the
vocabulary is about 100 symbols; with --tokenizer=bpe rustbpe learns N ids (256 bytes +
merges) on the raw UTF-8 training text, no placeholder needed, and the start token is id N on
top. Files are split whole into train and val by a hash of their name. meta.json records the
library's version (stdlib_version) beside the interpreter's (python_version) and a hash of the
text. No PyTorch is needed here: numpy, tiktoken and rustbpe.
"""

import io
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import UserError, parse_config, run_main  # noqa: E402
from data import (CharTokenizer, check_bpe_size, read_text, split_by_hash, train_bpe,  # noqa: E402
                  write_dataset)

HERE = Path(__file__).resolve().parent
SHIPPED = HERE / "stdlib-3.11.7.tar.xz"  # the corpus: Python 3.11.7's files, in walk order
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "encodings",
             "__pycache__"}


@dataclass
class PrepareConfig:
    root: str = ""  # a standard library folder to read instead ('' = the shipped 3.11.7 files)
    out_dir: str = ""  # where to write ('' = data/pystdlib, or data/pystdlib_bpeN with bpe)
    tokenizer: str = "char"  # char (ASCII + one placeholder) | bpe (learned on the training files)
    vocab_size: int = (
        0  # with bpe: ids to learn, the 256 bytes included (the start token comes on top)
    )
    val_fraction: float = 0.1  # share of files held out for validation
    archive: str = (
        ""  # with --root: write that library's selection as a .tar.xz here, prepare nothing
    )


def library_docs(root):
    """{POSIX name: text} of a library folder's selection, in the order of a sorted walk."""
    docs = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                path = Path(dirpath) / fn
                try:
                    docs[path.relative_to(root).as_posix()] = read_text(path)
                except UserError:
                    print(f"skipping {path}: not UTF-8")
    return docs


def shipped_docs():
    """{name: text} of the shipped corpus, in its order."""
    docs = {}
    with tarfile.open(SHIPPED, "r:xz") as tar:
        for member in tar:
            docs[member.name] = tar.extractfile(member).read().decode("utf-8")
    return docs


def library_version(root):
    """A library folder's own Python version: its include/pythonX.Y/patchlevel.h where the
    installation has one, else the X.Y of its folder name, else 'unknown'."""
    root = Path(root).resolve()
    for header in (root.parents[1] / "include" / root.name / "patchlevel.h",):
        if header.exists():
            for line in header.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("#define PY_VERSION "):
                    return line.split('"')[1]
    name = root.name
    return name.removeprefix("python") if name.startswith("python3.") else "unknown"


def write_archive(docs, path):
    """The selection as a .tar.xz: documents in order, POSIX names, no dates or owners."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.PAX_FORMAT) as tar:
        for name, text in docs.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    Path(path).write_bytes(buf.getvalue())
    print(
        f"wrote {path}: {len(docs)} files, "
        f"{sum(len(t) for t in docs.values()) / 1e6:.2f} M characters, "
        f"{len(buf.getvalue()) / 1e6:.2f} MB"
    )


def main():
    cfg = parse_config(PrepareConfig, description=__doc__)
    if cfg.root and not Path(cfg.root).is_dir():
        raise UserError(
            f"{cfg.root} is not a folder; give --root=PATH of a Python standard library"
        )
    if cfg.archive and not cfg.root:
        raise UserError("--archive writes a library's selection: give --root=PATH too")
    if not 0 < cfg.val_fraction < 1:
        raise UserError(f"--val_fraction must be between 0 and 1, got {cfg.val_fraction}")
    if cfg.tokenizer == "bpe":
        check_bpe_size(cfg.vocab_size)  # before reading the library
    elif cfg.tokenizer != "char":
        raise UserError(f"--tokenizer must be char or bpe, got {cfg.tokenizer!r}")
    elif cfg.vocab_size:
        raise UserError("--vocab_size is for --tokenizer=bpe only")
    if cfg.root:
        docs, version, where = (
            library_docs(cfg.root),
            library_version(cfg.root),
            str(Path(cfg.root).resolve()),
        )
    else:
        docs, version, where = (
            shipped_docs(),
            "3.11.7",
            SHIPPED.relative_to(HERE.parents[1]).as_posix(),
        )
    if not docs:
        raise UserError(f"no .py files under {cfg.root}")
    if cfg.archive:
        return write_archive(docs, cfg.archive)
    held = split_by_hash(list(docs), cfg.val_fraction)
    train = [(n, t) for n, t in docs.items() if n not in held]
    val = [(n, t) for n, t in docs.items() if n in held]
    if cfg.tokenizer == "bpe":
        # merges from the training files alone
        tok = train_bpe((t for _, t in train), cfg.vocab_size)
    else:
        tok = CharTokenizer.from_texts(docs.values(), ascii_only=True)
    source = {
        "corpus": "pystdlib",
        "root": where,
        "files": len(docs),
        "python_version": sys.version.split()[0],
        "stdlib_version": version,
        "skipped_dirs": sorted(SKIP_DIRS),
    }
    out = cfg.out_dir or (
        HERE.parent / f"pystdlib_bpe{cfg.vocab_size}" if cfg.tokenizer == "bpe" else HERE
    )
    write_dataset(out, train, val, tok, source)


if __name__ == "__main__":
    run_main(main)
