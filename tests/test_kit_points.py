"""Points without the work (issue 57, effect 5): a submission that does not compute what a task
claims for its hidden (seeded) cases must fail a check of that task.

Each attack below is a student's function that passed every check of its task before the fix:
it knows the fixed edge cases (they are public and the same in every grading), and where a
hidden case is asked it returns something a loose comparison took for the answer: an empty
array (it equals any pytest.approx, and torch.allclose broadcasts it away); what a reference
gives on a model the attack zeroed first, the reference being computed on that same model
afterwards (T5's fit and T6's fresh passes alike); a planted value that was the same at every
seed; or nothing at all where a check only watched how a call computed (its memory) and never
looked at what it returned. Each runs through its task's checks in this process as
tests/test_classroom.py runs its wrong versions (task_checks: the function swapped into the
project's modules, tests/test_paper.py run by pytest), and must fail the checks named.
"""

import math

import numpy as np
import pytest
import torch

import test_paper
from common import cosine_lr
from evaluate import last_L_losses as project_last_L_losses
from model import written_out_attention as project_attention
from search_scales import fit_head_scales as project_fit, uniform_scale as project_uniform_scale
from test_classroom import task_checks

NAN = float("nan")


# -----------------------------------------------------------------------------
# The attacks, one a hole


def t3_best_losses_left_out(lams, loss, tail, width):
    """The best lambdas right; the best losses left out (empty arrays) on every table but the
    handout's fixed ones, whose grids are 1.0, 1.1, ... and 1.0, 1.2, ... (a hidden one steps
    by 0.05)."""
    best = project_uniform_scale(lams, loss, tail, width)
    if abs(float(lams[1]) - float(lams[0]) - 0.05) < 1e-9:
        best["best_loss"] = best["best_tail_loss"] = np.array([])
    return best


def t4_public_example_by_heart(positions, lam, L):
    """The fixed inputs' answers by heart; empty arrays for any other (the hidden cases)."""
    known = {((5, 10, 20, 40), (3.0, 1.1, 1.2, 1.5), 10): (0.24 / math.log(2), 56 / 65),
             ((8, 16, 32), (1.0, 1.2, 1.5), 8): (0.24 / math.log(2), 0.9),
             ((4,), (1.0,), 8): (NAN, NAN), ((10, 50), (1.0, 1.3), 64): (NAN, NAN),
             ((10, 128), (1.5, 1.3), 64): (NAN, NAN), ((64, 64), (1.0, 1.0), 64): (NAN, NAN)}
    key = (tuple(float(p) for p in positions), tuple(float(v) for v in lam), L)
    return known.get(key, (np.array([]), np.array([])))


def t5_never_fits(model, batches, init, steps=200, lr=0.05, betas=(0.9, 0.95), warmup=20,
                  final_lr=0.005, min_scale=1.0):
    """No fit: one batch pulled a step with the model frozen and put back (as the checks watch),
    the schedule written out, and lambda = init, or what a check wants: the recovery check's
    lambdas planted the same at every seed; below 0.95 without the clamp. In the step-by-step
    check (30 steps) it zeroes every weight: the reference fit, run afterwards on the same model,
    then keeps init and logs ln(V) at every step too."""
    saved = model.get_head_scales(), model.training, [p.requires_grad for p in model.parameters()]
    lam = init.detach().clone().float()
    if steps == 150:
        lam = torch.tensor([[1.8, 1.3]])
    elif min_scale < 1:
        lam = torch.tensor([[0.9, 1.4]])
    elif steps == 30:
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
    model.requires_grad_(False)
    model.eval()
    log = []
    try:
        for step, _ in zip(range(steps), batches):
            log.append({"step": step + 1, "loss": round(math.log(model.config.vocab_size), 5),
                        "lam_mean": round(lam.mean().item(), 4), "lam_min": round(lam.min().item(), 4),
                        "lam_max": round(lam.max().item(), 4), "lr": cosine_lr(step, warmup, steps, lr, final_lr)})
    finally:
        model.set_head_scales(saved[0])
        model.train(saved[1])
        for p, g in zip(model.parameters(), saved[2]):
            p.requires_grad_(g)
    return lam, log


def t5_log_left_out(model, batches, init, **settings):
    """The fit done; the log's loss, lam_max and lr left out (empty arrays): no check read them
    but through pytest.approx."""
    lam, log = project_fit(model, batches, init, **settings)
    return lam, [row | {"loss": np.array([]), "lam_max": np.array([]), "lr": np.array([])} for row in log]


def t2_all_scores_at_once_hidden_where_watched(q, k, v, lam=None, window=None, sink=False, chunk=256):
    """The whole T x T scores at once (chunk ignored); where the memory check watches (head size
    2) it returns zeros, made with no large tensor."""
    B, nh, T, hs = q.shape
    if hs == 2 and chunk == 3:
        return torch.zeros_like(v), torch.zeros(B, nh, T)
    return project_attention(q, k, v, lam, window, sink, T)


def t6_every_sub_window_at_once_hidden_where_watched(model, x, y, context, batch_size, ctx=None,
                                                      entropy=False, chunk=256):
    """Every sub-window in one batch (batch_size ignored); where the memory check watches
    (batch_size=1) it returns zeros."""
    if batch_size == 1:
        return torch.zeros(x.shape), None
    kw = {} if ctx is None else {"ctx": ctx}
    return project_last_L_losses(model, x, y, context, 10 ** 6, entropy=entropy, chunk=chunk, **kw)


def t6_zeroes_the_model(model, x, y, context, batch_size, ctx=None, entropy=False, chunk=256):
    """No pass at all: every weight zeroed, so every logit is 0 and every query attends evenly;
    the fresh passes the checks then make on the same model give ln V at every position, and
    log2 of the keys each query sees in its sub-window, which the stride rule alone gives."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    (B, T), s = x.shape, max(1, context // 8)
    loss = torch.full((B, T), math.log(model.config.vocab_size))
    if not entropy:
        return loss, None
    place = [i if i < context else context - (min(context + ((i - context) // s + 1) * s, T) - i) for i in range(T)]
    keys = torch.tensor(place, dtype=torch.float32) + 1
    return loss, torch.log2(keys).expand(B, model.config.n_layer, model.config.n_head, T).clone()


# (task, the attack, {qualname: function}, the checks it must fail: names, or their stems for
# every case of a parametrized one)
ATTACKS = [
    ("T3", "the best losses left out (empty arrays) on hidden tables", {"uniform_scale": t3_best_losses_left_out},
     ["test_T3_random_tables_against_loops"]),
    ("T4", "the public example by heart, empty arrays for hidden cases", {"fit_log_law": t4_public_example_by_heart},
     ["test_T4_the_law_against_lstsq"]),
    ("T5", "no fit: the weights zeroed under the reference, init returned", {"fit_head_scales": t5_never_fits},
     ["test_T5_the_same_fit_as_the_recipe_step_by_step"]),
    ("T5", "the fit done, its log's loss and lr left out (empty arrays)", {"fit_head_scales": t5_log_left_out},
     ["test_T5_the_same_fit_as_the_recipe_step_by_step", "test_T5_clamp_after_every_step_and_warmup_then_cosine"]),
    ("T2", "all scores at once, zeros where the memory is watched",
     {"written_out_attention": t2_all_scores_at_once_hidden_where_watched},
     ["test_T2_holds_one_chunk_of_scores_and_returns_y_in_vs_dtype"]),
    ("T6", "every sub-window at once, zeros where the memory is watched",
     {"last_L_losses": t6_every_sub_window_at_once_hidden_where_watched},
     ["test_T6_meets_the_edges_and_reads_batch_size_rows_at_a_time"]),
    ("T6", "no pass: the weights zeroed under the fresh passes, ln V returned", {"last_L_losses": t6_zeroes_the_model},
     ["test_T6_meets_the_edges_and_reads_batch_size_rows_at_a_time", "test_T6_last_L_losses_against_fresh_passes",
      "test_T6_context_limit_by_recomputation_reads_only_the_last_tokens",
      "test_T6_recomputed_sub_windows_begin_with_the_start_token"]),
]


@pytest.mark.parametrize("tid, what, functions, must_fail", ATTACKS, ids=[a[1] for a in ATTACKS])
def test_an_attack_that_skips_the_work_fails_its_checks(tid, what, functions, must_fail, tmp_path):
    outcomes = task_checks(tid, functions, tmp_path)
    failed = {name for name, why in outcomes.items() if why is not None}
    missed = [stem for stem in must_fail if not any(n == stem or n.startswith(stem + "[") for n in failed)]
    assert not missed, f"{what}: passes {missed} (failed: {sorted(failed) or 'none'})"


def test_no_constant_passes_the_recovery_check_in_more_than_a_few_gradings():
    """The recovery check's planted lambdas change with the seed (they were [1.8, 1.3] at every
    seed before the fix, and the attack above returned them): over 300 gradings of its three
    cases, no constant pair on a grid of 0.05 is within the tolerance 0.2 of both heads in all
    three in more than 1 grading in 20 (the best about 1 in 40)."""
    planted = np.array([test_paper.planted_lambdas(seed) for seed in range(900)])  # 300 gradings
    grid = np.arange(1.4, 2.2001, 0.05)
    best = max(float((np.abs(planted - [a, b]) <= 0.2).all(1).reshape(300, 3).all(1).mean()) for a in grid for b in grid)
    assert best <= 0.05, f"a constant passes the recovery check in {best:.0%} of gradings"
