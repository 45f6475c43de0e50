"""data/: preparing corpora, reading them back, batches and evaluation windows."""

import importlib.util
import json
import math
import random
import shutil
import socket

import numpy as np
import pytest
import tiktoken
import torch

from common import UserError
from conftest import ROOT, run_script
from data import BPE_FILE, BpeTokenizer, CharTokenizer, Dataset, TiktokenTokenizer, train_bpe, write_dataset


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
    assert meta["vocab_size"] == len(tok.itos) + 1 and meta["bos_id"] == len(tok.itos)  # the start token on top
    assert len(meta["sha256"]) == 64


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
    assert meta["source"]["stdlib_version"] == "unknown"  # a folder named lib, with no patchlevel.h


# a script run with PyTorch made unimportable: sys.modules['torch'] = None
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")


def without_torch(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", NO_TORCH, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          encoding="utf-8")


def test_the_shipped_corpus_is_the_text_every_number_was_made_on_and_needs_no_torch(tmp_path):
    """data/pystdlib/prepare.py reads the files shipped from Python 3.11.7's library: the same
    text, split and hash as 3.11.7's own library gave (the meta.json of the README's studies),
    on any Python, without PyTorch."""
    out = tmp_path / "pystdlib"
    done = without_torch("data/pystdlib/prepare.py", f"--out_dir={out}")
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert meta["sha256"] == "2067fc931339f78f1c7e03964afe46b5b419936988f55b2fed42871349a772e8"
    train, val = meta["splits"]["train"], meta["splits"]["val"]
    assert (train["tokens"], train["documents"], val["tokens"], val["documents"]) == (8983166, 437, 666283, 39)
    assert train["doc_names"][:3] == ["__future__.py", "__hello__.py", "_aix_support.py"]
    assert all("\\" not in n for n in train["doc_names"] + val["doc_names"])  # POSIX names
    assert meta["source"]["stdlib_version"] == "3.11.7" and meta["vocab_size"] == 98
    assert (ROOT / "data" / "pystdlib" / "LICENSE-PSF.txt").exists()


def test_data_scripts_and_the_kits_answers_need_no_torch(tmp_path):
    texts = tmp_path / "texts"
    texts.mkdir()
    for i in range(6):
        (texts / f"t{i}.txt").write_text(f"story number {i}\n" * 40, encoding="utf-8")
    (tmp_path / "input.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50,
                                        encoding="utf-8")
    runs = [("data/text/prepare.py", f"--input={texts}", f"--out_dir={tmp_path / 'ds'}"),
            ("data/shakespeare_char/prepare.py", f"--input={tmp_path / 'input.txt'}", f"--out_dir={tmp_path / 'sh'}")]
    for args in runs:
        done = without_torch(*args)
        assert done.returncode == 0 and "wrote" in done.stdout, (args, done.stderr)
    for script in ("data/pystdlib/prepare.py", "data/text/prepare.py", "data/shakespeare_char/prepare.py",
                   "classroom/__main__.py"):
        assert without_torch(script, "-h").returncode == 0, script
        refused = without_torch(script, *(["grade", "x"] if "classroom" in script else []), "--colour=red")
        assert refused.returncode == 2 and refused.stderr.startswith("error: unknown option --colour"), \
            (script, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1


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
    # no <|endoftext|> in this encoding: the start token is the id after its last
    assert meta["vocab_size"] == 259 and meta["bos_id"] == 258
    assert meta["tokenizer"] == {"kind": "tiktoken", "name": "small"}
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


# -----------------------------------------------------------------------------
# The start token

def test_text_never_encodes_to_the_start_token_and_decoding_drops_it():
    text = "hello \x00\x02 <|endoftext|> world\n"  # control characters and tiktoken's special text
    tok = CharTokenizer.from_texts([text])
    ids = tok.encode(text)
    assert tok.bos_id not in ids and tok.decode(ids) == text
    assert tok.decode([tok.bos_id, *ids]) == text  # prints as nothing
    ranks = {bytes([i]): i for i in range(256)}
    enc = tiktoken.Encoding(name="eot", pat_str=r"""\S+|\s+""", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 256})
    tt = TiktokenTokenizer(enc)
    assert tt.bos_id == 256 and tt.vocab_size == 257
    ids = tt.encode(text)
    assert 256 not in ids and tt.decode(ids) == text and tt.decode([256, *ids]) == text


def test_batches_windows_and_prompts_begin_with_the_start_token(tiny_dataset):
    plain, ds = Dataset(str(tiny_dataset)), Dataset(str(tiny_dataset), bos=True)
    bos = ds.bos_id
    x, y = ds.get_batch("train", 4, 16, torch.Generator().manual_seed(5))
    x0, y0 = plain.get_batch("train", 4, 16, torch.Generator().manual_seed(5))
    assert x.shape == (4, 16) and (x[:, 0] == bos).all() and (x0[:, 0] != bos).all()
    assert torch.equal(x[:, 1:], x0[:, 1:]) and torch.equal(y, y0)  # the same text, the same targets
    assert (y != bos).all()  # the start token is never a target
    w, w0 = ds.windows(50, 6, seed=2), plain.windows(50, 6, seed=2)
    assert w.shape == (6, 51) and (w[:, 0] == bos).all() and torch.equal(w[:, 1:], w0[:, 1:])
    assert (w0 != bos).all()
    ids = ds.prompt_ids("def f")
    assert ids[0] == bos and ds.decode(ids) == "def f" and len(plain.prompt_ids("def f")) == 5


def test_eval_and_search_windows_are_disjoint(tiny_dataset):
    ds = Dataset(str(tiny_dataset))
    for n in (32, 100):
        ev, se = ds.windows(n, 1000, seed=1, subset="eval"), ds.windows(n, 1000, seed=1, subset="search")
        assert not {tuple(r) for r in ev.tolist()} & {tuple(r) for r in se.tolist()}
        assert len(ev) + len(se) == len(ds.windows(n, 10_000, seed=1))  # together: every window


def test_a_shortfall_of_windows_is_said_in_one_line(tiny_dataset, capsys):
    ds = Dataset(str(tiny_dataset))
    w = ds.windows(2000, 1000, seed=1)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"only {len(w)}" in out[0] and "1000 asked" in out[0]


def test_old_datasets_say_what_to_redo(tiny_dataset, tmp_path):
    import shutil
    old = tmp_path / "old"
    shutil.copytree(tiny_dataset, old)
    meta = json.loads((old / "meta.json").read_text())
    del meta["bos_id"]  # as prepared before the start token existed
    meta["vocab_size"] -= 1
    (old / "meta.json").write_text(json.dumps(meta))
    for bos in (False, True):
        with pytest.raises(UserError, match="prepared before the start token.*prepare it again"):
            Dataset(str(old), bos=bos)
    (old / "meta.json").write_text("{not json")
    with pytest.raises(UserError, match="damaged; prepare the dataset again"):
        Dataset(str(old))


def test_for_model_checks_vocabulary_hash_and_mode(tiny_dataset):
    from model import GPTConfig
    ds = Dataset(str(tiny_dataset))
    ok = {"dataset": {"name": str(tiny_dataset), "sha256": ds.meta["sha256"]}}
    assert Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size, bos=True), ok).bos
    assert not Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size, bos=False), ok).bos  # no token
    with pytest.raises(UserError, match="token ids, the checkpoint"):
        Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size + 3, bos=False), ok)
    with pytest.raises(UserError, match="token ids, the checkpoint"):
        Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size - 1, bos=True), ok)
    other = {"dataset": {"name": str(tiny_dataset), "sha256": "0" * 64}}
    with pytest.raises(UserError, match="other text than the checkpoint"):
        Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size, bos=False), other)
    with pytest.raises(UserError, match="pass --dataset"):
        Dataset.for_model(GPTConfig(vocab_size=ds.vocab_size, bos=False), {})


# -----------------------------------------------------------------------------
# A BPE vocabulary learned on the corpus (rustbpe), encoded with tiktoken

needs_rustbpe = pytest.mark.skipif(importlib.util.find_spec("rustbpe") is None,
                                   reason="rustbpe is not installed (pip install -r requirements.txt)")


def text_prepare():
    spec = importlib.util.spec_from_file_location("text_prepare", ROOT / "data/text/prepare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def made_up_text(lines, seed=0):
    """Words of random syllables, some non-ASCII: enough distinct pairs for a few hundred merges."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "zu", "fa", "gre", "ven", "\u00e9", "\u2603", "\U0001f600"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) + "\n" for _ in range(lines))


@pytest.fixture(scope="module")
def bpe_dataset(tmp_path_factory):
    """A 300-id vocabulary learned on ~20 KB, prepared with every socket refused (no network)."""
    folder = tmp_path_factory.mktemp("bpe")
    src = folder / "in.txt"
    src.write_text(made_up_text(600))
    mp = pytest.MonkeyPatch()
    def offline(*args, **kwargs):
        raise OSError("network is off in this test")
    mp.setattr(socket, "socket", offline)
    try:
        prep = text_prepare()
        prep.prepare(prep.PrepareConfig(input=str(src), out_dir=str(folder / "ds"), tokenizer="bpe", vocab_size=300))
        ds = Dataset(str(folder / "ds"))  # a fresh Dataset rebuilds the vocabulary from disk
        ds.decode(ds.encode("x"))
    finally:
        mp.undo()
    return src, folder / "ds"


@needs_rustbpe
def test_bpe_round_trips_and_reloads_the_same_ids(bpe_dataset):
    src, out = bpe_dataset
    text = src.read_text()
    n = int(len(text) * 0.9)
    ds = Dataset(str(out))
    assert ds.meta["tokenizer"]["kind"] == "bpe" and ds.meta["tokenizer"]["learned"] == 300
    assert ds.vocab_size == 301 and ds.bos_id == 300  # 256 bytes + 44 merges, the start token on top
    assert ds.decode(ds.tokens["train"]) == text[:n] and ds.decode(ds.tokens["val"]) == text[n:]
    assert int(ds.tokens["train"].max()) == 299  # the last merge is used
    assert np.array_equal(ds.encode(text[:n]), ds.tokens["train"])  # the same ids as when prepared
    odd = "caf\u00e9 \U0001f600 never seen: \u4e2d\u6587 \x00\n"  # bytes outside the training text
    assert ds.decode(ds.encode(odd)) == odd


@needs_rustbpe
def test_bpe_text_never_encodes_to_the_start_token(bpe_dataset):
    ds = Dataset(str(bpe_dataset[1]), bos=True)
    text = "<|bos|> kalo <|bos|><|endoftext|>"
    ids = ds.encode(text)
    assert ds.bos_id not in ids and ds.decode(ids) == text
    assert ds.decode(ds.prompt_ids(text)) == text and ds.prompt_ids(text)[0] == ds.bos_id


@needs_rustbpe
def test_bpe_merges_come_from_the_training_split_alone(tmp_path):
    prep = text_prepare()
    text = made_up_text(600)
    n = int(len(text) * 0.9)
    files = []
    for i, tail in enumerate([text[n:], made_up_text(60, seed=9)[: len(text) - n]]):
        src = tmp_path / f"in{i}.txt"
        src.write_text(text[:n] + tail)  # the same 90% (training split), another 10%
        prep.prepare(prep.PrepareConfig(input=str(src), out_dir=str(tmp_path / f"ds{i}"), tokenizer="bpe",
                                        vocab_size=300))
        files.append((tmp_path / f"ds{i}" / BPE_FILE).read_bytes())
    assert files[0] == files[1]
    vals = [np.fromfile(tmp_path / f"ds{i}" / "val.bin", dtype=np.uint16) for i in range(2)]
    assert not np.array_equal(vals[0], vals[1])  # the val text did differ


def test_bits_per_byte_on_a_hand_checked_example(tmp_path):
    # character level: "a" is 1 byte, "\u00e9" 2, "\u2603" 3; the start token 0
    tok = CharTokenizer(["a", "\u00e9", "\u2603"])
    write_dataset(tmp_path / "c", [("t", "a\u00e9\u2603" * 4)], [("v", "a\u00e9\u2603" * 4)], tok, {"corpus": "test"})
    ds = Dataset(str(tmp_path / "c"))
    w = torch.tensor([[3, 1, 0], [0, 2, 1]])  # targets (e, a) and (snowman, e): 3 + 5 = 8 bytes in 4 tokens
    # 4 tokens at 3 bits each = 12 bits over 8 bytes = 1.5 bits per byte
    assert ds.bits_per_byte(3 * math.log(2), w) == pytest.approx(1.5)
    # BPE: a merged token counts every byte it stands for
    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    ranks[b"abc"] = 257
    write_dataset(tmp_path / "b", [("t", "abc ab c " * 4)], [("v", "abc ab " * 4)],
                  BpeTokenizer(ranks, r"""\S+|\s+"""), {"corpus": "test"})
    ds = Dataset(str(tmp_path / "b"))
    assert ds.encode("abc ab").tolist() == [257, 32, 256]
    w = torch.tensor([[258, 257, 32, 256]])  # start token, then "abc", " ", "ab": 6 bytes in 3 tokens
    assert ds.bits_per_byte(2 * math.log(2), w) == pytest.approx(2 * 3 / 6)


@needs_rustbpe
def test_bpe_bad_vocab_sizes_and_a_too_small_corpus_say_what_to_do(bpe_dataset, tmp_path):
    src, out = bpe_dataset
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = run_script("data/text/prepare.py", f"--input={src}", f"--out_dir={out}", "--tokenizer=bpe",
                      "--vocab_size=256", check=False)  # once through the script: exit 2, one line
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--vocab_size must be 257..65535" in proc.stderr
    for bad in (0, 256, 65536):  # 65536 learned ids would put the start token at 65536, past uint16
        with pytest.raises(UserError, match="--vocab_size must be 257..65535"):
            train_bpe(["some text"], bad)
    prep = text_prepare()
    with pytest.raises(UserError, match=r"runs out of pairs to merge at \d+ tokens.*at most"):
        prep.prepare(prep.PrepareConfig(input=str(src), out_dir=str(out), tokenizer="bpe", vocab_size=5000))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier dataset is untouched


@needs_rustbpe
def test_bpe_dataset_with_a_missing_or_damaged_vocabulary_says_prepare_again(bpe_dataset, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(bpe_dataset[1], copy)
    vocab = copy / BPE_FILE
    vocab.write_text(vocab.read_text().replace('"AA=="', '"AQ=="', 1))
    with pytest.raises(UserError, match=r"bpe.json \(the vocabulary.*missing or damaged; prepare the dataset again"):
        Dataset(str(copy))
    vocab.unlink()
    with pytest.raises(UserError, match="--tokenizer=bpe --vocab_size=300"):
        Dataset(str(copy))


@needs_rustbpe
def test_pystdlib_bpe_learns_on_raw_utf8_without_a_placeholder(tmp_path):
    root = tmp_path / "lib"
    root.mkdir()
    for i in range(8):
        (root / f"m{i}.py").write_text(f"# caf\u00e9 \u2603 module {i}\n" + made_up_text(80, seed=i))
    out = tmp_path / "out"
    run_script("data/pystdlib/prepare.py", f"--root={root}", f"--out_dir={out}", "--tokenizer=bpe", "--vocab_size=280")
    ds = Dataset(str(out))
    assert ds.vocab_size == 281 and ds.meta["source"]["corpus"] == "pystdlib"
    names, starts, lengths = ds.docs("train")
    for name, s, n in zip(names, starts, lengths):
        assert ds.decode(ds.tokens["train"][s:s + n]) == (root / name).read_text()  # no placeholder


def test_bpe_without_rustbpe_says_how_to_install_it(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "rustbpe", None)  # import rustbpe now raises ImportError
    with pytest.raises(UserError, match="pip install rustbpe"):
        train_bpe(["some text"], 300)


def test_prepare_counts_the_evaluation_windows_it_can_give(tiny_dataset):
    from data import Dataset, eval_windows
    ds = Dataset(str(tiny_dataset))
    names, lengths = ds.meta["splits"]["val"]["doc_names"], ds.meta["splits"]["val"]["doc_lengths"]
    for n in (16, 100, 1000):  # as many as Dataset.windows hands the evaluation, never more
        assert eval_windows(names, lengths, n) == len(ds.windows(n, 10_000, subset="eval"))


def test_protocol_3_no_evaluated_token_is_read_by_a_search_or_the_monitor(tiny_dataset):
    """The validation documents go to the search or to the evaluation, once for every length: no
    window of any length of one reads a token of the other, and study/overlap.py prints 0.0%."""
    from data import doc_sides
    from study.overlap import tokens
    ds = Dataset(str(tiny_dataset))
    names, starts, lengths = ds.docs("val")
    side = doc_sides(names, lengths)
    assert set(side) == {0, 1} and abs(lengths[side == 0].sum() - lengths[side == 1].sum()) <= lengths.max()
    searched = np.zeros(len(ds.tokens["val"]) + 1, dtype=bool)
    for n in (32, 64, 128, 256):
        searched |= tokens(ds, n, 64, 4321, "search")
    searched |= tokens(ds, 32, 256, 1234, "search")  # train.py's monitor at L
    for n in (32, 64, 128, 256):
        assert not (searched & tokens(ds, n, 64, 1234, "eval")).any()
        for o in ds.window_offsets(n, 64, 1234, "val", "eval"):  # inside an eval document
            d = np.searchsorted(starts, o, side="right") - 1
            assert side[d] == 0 and o + n < starts[d] + lengths[d]
    offsets = ds.window_offsets(64, 8, seed=3)
    w = ds.windows(64, 8, seed=3)  # the windows are the tokens at those offsets
    assert torch.equal(w[:, 1:], torch.from_numpy(np.stack([ds.tokens["val"][o + 1:o + 65] for o in offsets]).astype(np.int64)))
    proc = run_script("study/overlap.py", f"--dataset={tiny_dataset}", "--L=32", "--search_lengths=2,4",
                      "--eval_lengths=1,2,4")
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| search at", "| monitor at"))]
    assert len(rows) == 3 and all(line.count("0.0% / 0.0%") == 3 for line in rows), proc.stdout


def test_headscale_rows_stay_inside_one_document(tiny_dataset):
    """get_batch(within_documents=True), HeadScale's sampler: no row crosses a file boundary, as
    no evaluation window does; reproducible; a length no document holds is one clear error."""
    ds = Dataset(str(tiny_dataset), bos=True)
    names, starts, lengths = ds.docs("train")
    n = int(lengths.min()) + 50  # longer than the shortest documents: they can hold no row
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        ix = ds._starts_within_documents("train", 64, n + 1, g)
        d = np.searchsorted(starts, ix, side="right") - 1
        assert (np.array(ix) + n + 1 <= starts[d] + lengths[d]).all()  # the row's n + 1 tokens in document d
        x, y = ds.get_batch("train", 8, n, torch.Generator().manual_seed(seed), within_documents=True)
        x2, _ = ds.get_batch("train", 8, n, torch.Generator().manual_seed(seed), within_documents=True)
        assert torch.equal(x, x2) and (x[:, 0] == ds.bos_id).all() and x.shape == (8, n)
    with pytest.raises(UserError, match="no train document holds"):
        ds.get_batch("train", 2, int(lengths.max()) + 5, torch.Generator(), within_documents=True)


def test_a_validation_split_of_one_document_is_read_as_two_halves(tmp_path):
    """A single file's validation text is one document: protocol 3 gives one half to the search
    and train.py's monitor, the other to the evaluation."""
    from data import eval_windows
    text = "".join(f"line {i} of one file\n" for i in range(400))
    write_dataset(tmp_path / "one", [("a.txt", text)], [("a.txt", text)], CharTokenizer.from_texts([text]),
                  {"corpus": "test"})
    ds = Dataset(str(tmp_path / "one"))
    names, starts, lengths = ds.docs("val")
    assert len(names) == 2 and lengths.sum() == len(ds.tokens["val"]) and starts[1] == starts[0] + lengths[0]
    ev, se = ds.window_offsets(100, 1000, subset="eval"), ds.window_offsets(100, 1000, subset="search")
    assert len(ev) and len(se) and (max(ev) + 101 <= starts[1] or min(ev) >= starts[1])
    assert eval_windows([names[0]], [int(lengths.sum())], 100) == len(ev)
