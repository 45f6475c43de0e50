"""data/: preparing corpora, reading them back, batches and evaluation windows."""

import json

import numpy as np
import pytest
import tiktoken
import torch

from common import UserError
from conftest import ROOT, run_script
from data import CharTokenizer, Dataset, TiktokenTokenizer, write_dataset


def test_char_prepare_round_trips_text(tmp_path):
    docs = [("a.txt", "hello world\n" * 30), ("b.txt", "caf\u00e9 na\u00efve \u2603\n" * 20), ("c.txt", "xyz\n" * 40)]
    tok = CharTokenizer.from_texts(t for _, t in docs)
    write_dataset(tmp_path, docs[:2], docs[2:], tok, {"corpus": "test"})
    ds = Dataset(str(tmp_path))
    names, starts, lengths = ds.docs("train")
    assert names == ["a.txt", "b.txt"]
    for (name, text), s, n in zip(docs[:2], starts, lengths):
        assert ds.decode(ds.tokens["train"][s:s + n]) == text
    assert ds.decode(ds.tokens["val"]) == docs[2][1]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["vocab_size"] == len(tok.itos) and len(meta["sha256"]) == 64


def test_ascii_only_vocabulary_maps_the_rest_to_one_placeholder():
    tok = CharTokenizer.from_texts(["ab\u00e9\u2603"], ascii_only=True)
    assert len(tok.itos) == 3
    assert tok.decode(tok.encode("b\u00e9a\u2603")) == "b\ufffda\ufffd"


def test_pystdlib_prepare_skips_tests_and_records_the_version(tmp_path):
    root = tmp_path / "lib"
    for rel, text in {"os.py": "import sys\n" * 50, "json/decoder.py": "x = 1\n" * 60,
                      "test/test_os.py": "assert 1\n" * 50, "site-packages/pkg.py": "y\n" * 50,
                      "encodings/cp1252.py": "'\\x00'\n" * 50, "notes.txt": "not python\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    out = tmp_path / "out"
    run_script("data/pystdlib/prepare.py", f"--root={root}", f"--out_dir={out}")
    meta = json.loads((out / "meta.json").read_text())
    names = meta["splits"]["train"]["doc_names"] + meta["splits"]["val"]["doc_names"]
    assert sorted(names) == ["json/decoder.py", "os.py"]
    assert meta["source"]["python_version"].count(".") == 2 and len(meta["sha256"]) == 64


def test_text_prepare_folder_and_non_utf8_error(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(6):
        (folder / f"t{i}.txt").write_text(f"story number {i}\n" * 40)
    (folder / ".hidden").write_bytes(b"\xff\xfe")  # hidden files are skipped
    out = tmp_path / "ds"
    run_script("data/text/prepare.py", f"--input={folder}", f"--out_dir={out}")
    ds = Dataset(str(out))
    assert ds.meta["splits"]["train"]["documents"] + ds.meta["splits"]["val"]["documents"] == 6
    (folder / "bad.txt").write_bytes(b"caf\xe9\n")
    proc = run_script("data/text/prepare.py", f"--input={folder}", f"--out_dir={out}", check=False)
    assert proc.returncode == 2
    assert "bad.txt is not UTF-8" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert Dataset(str(out)).meta == ds.meta  # the earlier dataset is untouched


def test_bpe_path_with_a_small_tiktoken_encoding(tmp_path):
    """GPT-2's vocabulary cannot be downloaded here: build a small byte-level Encoding."""
    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"th"] = 256
    ranks[b"the"] = 257
    enc = tiktoken.Encoding(name="small", pat_str=r"""'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+""",
                            mergeable_ranks=ranks, special_tokens={})
    import importlib.util
    spec = importlib.util.spec_from_file_location("text_prepare", ROOT / "data/text/prepare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = tmp_path / "in.txt"
    text = "the theory of the thing\n" * 100
    src.write_text(text)
    cfg = mod.PrepareConfig(input=str(src), out_dir=str(tmp_path / "bpe"), tokenizer="gpt2")
    meta = mod.prepare(cfg, tokenizer=TiktokenTokenizer(enc))
    assert meta["vocab_size"] == 258 and meta["tokenizer"] == {"kind": "tiktoken", "name": "small"}
    ids = np.fromfile(tmp_path / "bpe" / "train.bin", dtype=np.uint16)
    assert 257 in ids and enc.decode(ids.tolist()) == text[: int(len(text) * 0.9)]


def test_missing_gpt2_encoding_says_what_to_do(monkeypatch):
    import data
    def refuse(name):
        raise ConnectionError("offline")
    monkeypatch.setattr(tiktoken, "get_encoding", refuse)
    with pytest.raises(UserError, match="--tokenizer=char"):
        data.gpt2_encoding()


def test_windows_are_inside_documents_fixed_and_non_overlapping(tiny_dataset):
    ds = Dataset(str(tiny_dataset))
    a = ds.windows(100, 20, seed=3)
    assert a.shape == (20, 101)
    assert torch.equal(a, ds.windows(100, 20, seed=3))
    assert not torch.equal(a, ds.windows(100, 20, seed=4))
    names, starts, lengths = ds.docs("val")
    val = torch.from_numpy(ds.tokens["val"].astype(np.int64))
    # locate each window: it must lie inside one document
    text = ds.tokens["val"].tobytes()
    for w in a:
        off = text.find(w.numpy().astype(np.uint16).tobytes()) // 2
        doc = np.searchsorted(starts, off, side="right") - 1
        assert off + 101 <= starts[doc] + lengths[doc]
        assert torch.equal(val[off:off + 101], w)


def test_windows_too_long_name_the_longest_document(tiny_dataset):
    ds = Dataset(str(tiny_dataset))
    longest = int(ds.docs("val")[2].max())
    assert ds.windows(longest - 1, 5).shape[1] == longest
    with pytest.raises(UserError, match=f"longest length available is {longest - 1}"):
        ds.windows(longest, 5)
    with pytest.raises(UserError, match="> 0"):
        ds.windows(0, 5)


def test_missing_dataset_says_how_to_prepare_it():
    with pytest.raises(UserError, match="data/text/prepare.py --input=PATH --name=no_such_dataset_xyz"):
        Dataset("no_such_dataset_xyz")


def test_batches_are_reproducible(tiny_dataset):
    ds = Dataset(str(tiny_dataset))
    g = torch.Generator()
    g.manual_seed(5)
    x1, y1 = ds.get_batch("train", 4, 16, g)
    g.manual_seed(5)
    x2, _ = ds.get_batch("train", 4, 16, g)
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1])
