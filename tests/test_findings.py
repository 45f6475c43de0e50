"""findings.py's criteria on small hand-made study folders: what passes, what fails, ties."""

import json
import os

import numpy as np
import pytest

from study.findings import check_run, lambda_grows, measures

L = 100


def study(tmp_path, best=(1.1, 1.2, 1.3), losses=None, a=0.3, r2=0.95):
    """A study folder with only the files findings.py reads. losses: {method: [loss at L, 2L, 4L]}."""
    lengths = [L, 2 * L, 4 * L]
    losses = losses or {"nope": [2.0, 2.3, 2.6], "rope": [1.95, 2.5, 3.0], "nope_window_L": [2.0, 2.1, 2.0],
                        "nope_uniform_4L": [2.02, 2.2, 2.4], "nope_headscale_4L": [2.03, 2.15, 2.3]}
    methods = {m: {"lengths": lengths, "loss": v, "tail_loss": v} for m, v in losses.items()}
    (tmp_path / "eval").mkdir(parents=True)
    (tmp_path / "scales").mkdir()
    (tmp_path / "eval" / "results.json").write_text(json.dumps({"train_len": L, "methods": methods}))
    x = (np.arange(64) + 0.5) * 400 / 64 + 0.5
    curve = lambda onset: np.where(x > onset, 2.0 + (x - onset) / 100, 2.0).tolist()  # noqa: E731
    pos = {"nope": {"positions": x.tolist(), "loss": curve(150)}, "rope": {"positions": x.tolist(), "loss": curve(120)}}
    (tmp_path / "eval" / "positions.json").write_text(json.dumps(pos))
    ent = np.log2(x) + np.where(x > 150, (x - 150) / 50, 0)  # bends up at 1.5L, like the loss
    (tmp_path / "eval" / "entropy.json").write_text(json.dumps(
        {"nope": {"positions": x.tolist(), "entropy_bits": [[ent.tolist()]]}}))
    uni = {"lengths": {k: {"best_lam": v} for k, v in zip(("2L", "4L", "8L"), best)}, "fit": {"a": a, "r2": r2}}
    (tmp_path / "scales" / "uniform.json").write_text(json.dumps(uni))
    return str(tmp_path)


def with_kinds(run):
    """Add what evaluate.py records and reference_of reads to the study's rows; returns them."""
    path = os.path.join(run, "eval", "results.json")
    res = json.loads(open(path).read())
    for name, m in res["methods"].items():  # this test's rows: named by the study's rules
        m |= {"model": name[:4], "bos": True, "context": 100 if name.endswith("window_L") else None,
              "scales": 1.2 if "uniform" in name or "headscale" in name else None}
    open(path, "w").write(json.dumps(res))
    return res


def test_a_study_that_shows_the_paper_passes_every_finding(tmp_path):
    f = check_run(study(tmp_path))
    assert {k: ok for k, (ok, _) in f.items()} == {1: True, 2: True, 3: True, 4: True, 5: True, 6: True, 7: True}
    assert f[2][1] == "onset NoPE 1.66L, RoPE 1.35L"  # 0.1 nats above the loss at L/2..L


@pytest.mark.parametrize("best, grows", [
    ((1.1, 1.2, 1.3), True),
    ((1.1, 1.1, 1.2), True),    # a tie between two lengths, larger at 8L: still grows
    ((1.05, 1.1, 1.1), True),   # likewise (the cpu preset before the start token), by this definition
    ((1.1, 1.1, 1.1), False),   # a tie all along does not grow
    ((1.0, 1.0, 1.0), False),
    ((1.2, 1.1, 1.3), False),   # smaller at 4L than at 2L
    ((1.0, 1.0, 1.05), False),  # not above 1 at 4L
])
def test_lambda_grows_means_never_smaller_and_larger_at_8L(best, grows):
    assert lambda_grows(dict(zip(("2L", "4L", "8L"), best))) is grows


def test_ties_and_misses_fail(tmp_path):
    losses = {"nope": [2.2, 2.3, 2.6], "rope": [2.0, 2.5, 3.0], "nope_window_L": [2.2, 2.1, 2.0],
              "nope_uniform_4L": [2.22, 2.2, 2.6], "nope_headscale_4L": [2.3, 2.15, 2.3]}
    f = check_run(study(tmp_path, best=(1.1, 1.1, 1.1), losses=losses, r2=0.89))
    assert not f[1][0] and "+10.0%" in f[1][1]          # 10% behind RoPE at L
    assert not f[4][0] and not f[5][0]                  # a flat best lambda; R^2 just under 0.9
    assert not f[6][0]                                  # uniform ties lambda = 1 at 4L: not "<"
    assert not f[7][0] and "+0.100" in f[7][1]          # HeadScale costs 0.1 nats at L


def test_rise_and_recovered_share_use_the_reference_row_at_4L(tmp_path):
    m = measures(with_kinds(study(tmp_path)))
    assert m["rise_4L"] == pytest.approx(0.6)                        # 2.6 - 2.0
    assert m["recovered_nope_uniform_4L"] == pytest.approx(0.2 / 0.6)  # (2.6 - 2.4) / (2.6 - 2.0)
    assert m["recovered_nope_headscale_4L"] == pytest.approx(0.5)


def test_each_row_is_compared_with_a_model_of_its_own_kind():
    from evaluate import excess, reference_of
    row = lambda model, bos, ctx=None, scales=None, loss=(2.0, 2.5): {  # noqa: E731
        "model": model, "bos": bos, "context": ctx, "scales": scales, "lengths": [100, 200], "loss": list(loss)}
    res = {"train_len": 100, "methods": {
        "nope": row("nope", True), "nope_headscale_4L": row("nope", True, scales=[[1.5]], loss=(2.1, 2.2)),
        "nope_notoken": row("nope_notoken", False), "rope_yarn_zeroshot": row("rope", True, scales=[1.0, 2.0]),
        "nope_window_L": row("nope", True, ctx=100, loss=(2.0, 2.1)),
        "rope_window_L": row("rope", True, ctx=100), "nope_notoken_window_L": row("nope_notoken", False, ctx=100),
        "mine": row("nope", True)}}
    refs = {n: reference_of(res, n) for n in res["methods"]}
    assert refs == {"nope": "nope_window_L", "nope_headscale_4L": "nope_window_L", "mine": "nope_window_L",
                    "nope_notoken": "nope_notoken_window_L", "rope_yarn_zeroshot": "rope_window_L",
                    "nope_window_L": None, "rope_window_L": None, "nope_notoken_window_L": None}
    assert excess(res, "nope_headscale_4L") == pytest.approx({100: 0.1, 200: 0.1})
    assert excess(res, "nope_window_L") == {}


def test_headline_sentences_carry_the_study_numbers(tmp_path):
    from study.findings import headline
    run = study(tmp_path)
    with_kinds(run)
    (tmp_path / "scales" / "uniform.json").write_text(json.dumps(
        {"lengths": {"2L": {"best_lam": 1.1}, "4L": {"best_lam": 1.2}}, "fit": {"a": 0.3, "r2": 0.95}}))
    lines = headline(run)
    assert lines[0] == "At the training length L = 100 tokens, NoPE's loss is 2.000 nats per token against RoPE's 1.950 (+2.6%)."
    assert "+0.20 / +0.60 nats at 2L / 4L" in lines[1]  # nope minus nope_window_L, on the same windows
    assert "1.10 / 1.20 at 2L / 4L" in lines[3] and "a = 0.30, R² = 0.95" in lines[3]
    assert "takes back 50% of that cost and the best uniform λ 33%; HeadScale costs +0.03 nats at L" in lines[4]


def test_readme_table_names_each_value_and_marks_what_a_study_lacks(tmp_path):
    """The README's table (findings.readme_rows/readme_table): each value under its own label,
    a dash where the study has no such row or length (never the next value moved up), and
    'a; b' where two seeds differ."""
    from study.findings import readme_rows, readme_table
    run = study(tmp_path / "a")
    with_kinds(run)
    rows = list(readme_rows(run).values())
    assert rows[1] == "+0.20 / +0.60 / –"  # NoPE minus nope_window_L; no 8L measured
    assert rows[2] == "– / – / –"  # no rope_window_L: RoPE has no reference
    assert rows[4] == "1.10 / 1.20 / 1.30" and rows[5] == "50% / 33%"
    other = study(tmp_path / "b", losses={
        "nope": [2.0, 2.3, 2.6], "rope": [1.95, 2.5, 3.0], "nope_window_L": [2.0, 2.1, 2.0],
        "nope_uniform_4L": [2.02, 2.2, 2.4]})  # no HeadScale row
    with_kinds(other)
    assert list(readme_rows(other).values())[5] == "– / 33%"
    table = readme_table([run, other]).splitlines()
    assert table[5].endswith("| 50% / 33%; – / 33% |") and table[4].endswith("| 1.10 / 1.20 / 1.30 |")
