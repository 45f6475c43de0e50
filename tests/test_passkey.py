"""data/passkey.py examples, train.py --passkey_frac, and passkey.py end to end."""

import csv

import pytest
import torch

from common import UserError
from conftest import TINY_TRAIN, run_script
from data import CharTokenizer
from data.passkey import FILLER, KEY_SENTENCE, QUESTION, Passkey

TOK = CharTokenizer.from_texts([FILLER + KEY_SENTENCE.format(key="0123456789") + QUESTION + " "])


def test_prompt_has_the_exact_length_and_the_key_at_its_depth():
    pk = Passkey(TOK)
    for depth in (0.0, 0.3, 0.9):
        ids = pk.prompt(400, depth, 48213)
        text = TOK.decode(ids)
        assert len(ids) == 400 and text.endswith(QUESTION)
        key_at = text.index("The pass key is 48213.")
        assert abs(key_at / (400 - pk.template_len()) - depth) < 0.2  # between two sentences, near depth
        assert key_at == 0 or text[key_at - 2:key_at] == ". "
    assert TOK.decode(pk.answer(48213)) == " 48213"


def test_bad_input():
    pk = Passkey(TOK)
    with pytest.raises(UserError, match="shorter than the passkey template"):
        pk.prompt(50, 0.5, 12345)
    with pytest.raises(UserError, match=r"depth must be in \[0, 1\)"):
        pk.prompt(300, 1.0, 12345)
    with pytest.raises(UserError, match="cannot spell"):
        Passkey(CharTokenizer.from_texts(["abc"]))


def test_training_rows_are_reproducible_and_end_with_their_key():
    pk = Passkey(TOK)
    a, mask = pk.training_rows(3, 129, torch.Generator().manual_seed(1))
    b, _ = pk.training_rows(3, 129, torch.Generator().manual_seed(1))
    assert a.shape == mask.shape == (3, 129) and torch.equal(a, b)
    ends = set()
    for row, m in zip(a, mask):
        answer = TOK.decode(row[m].tolist())  # the mask marks exactly the answer...
        key = answer.strip()
        assert answer == f" {key}" and key.isdigit() and len(key) == 5
        end = int(m.nonzero()[-1]) + 1
        prompt = TOK.decode(row[:end].tolist())
        assert f"The pass key is {key}." in prompt and prompt.endswith(f"{QUESTION} {key}")  # ...after its question
        ends.add(end)
    assert len(ends) == 3  # the answer's position varies from row to row


@pytest.mark.slow
def test_passkey_training_and_evaluation(tmp_path):
    """A corpus that can spell the template trains with passkey rows and is scored over
    length x depth."""
    from data import write_dataset
    text = (FILLER * 40 + "\n" + KEY_SENTENCE.format(key="0123456789") + QUESTION + "\n") * 3
    ds = tmp_path / "pk"
    write_dataset(ds, [("a", text)], [("b", text)], CharTokenizer.from_texts([text]), {"corpus": "test"})
    run_script("train.py", f"--dataset={ds}", f"--out_dir={tmp_path / 'run'}", *TINY_TRAIN, "--block_size=128",
               "--passkey_frac=0.5", "--max_iters=4", "--eval_interval=4")
    tok = CharTokenizer.from_texts([text])
    shortest = Passkey(tok, bos_id=tok.bos_id).shortest()  # the dataset's start token counts
    edge = [f"--dataset={ds}", *TINY_TRAIN, "--passkey_frac=0.5", "--max_iters=1", "--eval_interval=1"]
    run_script("train.py", *edge, f"--out_dir={tmp_path / 'edge'}", f"--block_size={shortest - 1}")
    proc = run_script("train.py", *edge, f"--out_dir={tmp_path / 'short'}", f"--block_size={shortest - 2}",
                      check=False)
    assert proc.returncode == 2 and f"--block_size={shortest - 1} or more" in proc.stderr
    out = tmp_path / "eval"
    ck = tmp_path / "run" / "ckpt.pt"
    run_script("study/passkey.py", f"--ckpts=a={ck},b={ck}", f"--out_dir={out}", "--lengths=4,8", "--depths=2",
               "--keys=2", f"--dataset={ds}")
    with open(out / "passkey.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 2 and {r["method"] for r in rows} == {"a", "b"}
    assert all(0 <= float(r["accuracy"]) <= 1 and r["n"] == "2" for r in rows)
    assert (out / "passkey_a.png").exists() and "mean up to" in (out / "passkey.md").read_text()
    proc = run_script("study/passkey.py", f"--ckpts=a={ck}", f"--out_dir={out}", "--lengths=0.5", f"--dataset={ds}",
                      check=False)
    assert proc.returncode == 2 and "shorter than the passkey template" in proc.stderr


def test_with_the_start_token_prompts_and_rows_begin_with_it():
    bos = len(TOK.itos)
    pk = Passkey(TOK, bos_id=bos)
    ids = pk.prompt(300, 0.5, 48213)
    assert len(ids) == 300 and ids[0] == bos and (ids[1:] != bos).all()  # n positions, the token included
    assert TOK.decode(ids[1:]).endswith(QUESTION)
    assert pk.shortest() == Passkey(TOK).shortest() + 1
    rows, mask = pk.training_rows(4, 129, torch.Generator().manual_seed(2))
    assert (rows[:, 0] == bos).all() and not mask[:, 0].any()


def test_the_shortest_example_is_one_number_for_every_check():
    """shortest(): the fewest positions a prompt and its answer take; a row of that length
    works, one token less is refused (train.py and passkey.py check this same number)."""
    for pk in (Passkey(TOK), Passkey(TOK, bos_id=len(TOK.itos))):
        n = pk.shortest()
        rows, mask = pk.training_rows(3, n, torch.Generator().manual_seed(0))
        assert rows.shape == (3, n) and mask.sum(1).eq(len(pk.answer(12345))).all()
        with pytest.raises(UserError, match="cannot hold a passkey example"):
            pk.training_rows(1, n - 1, torch.Generator().manual_seed(0))
        answer = len(pk.answer(12345))
        assert len(pk.prompt(n - answer, 0.0, 12345)) == n - answer  # the prompt with no filler at all
