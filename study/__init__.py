"""The study's machinery, above the lesson (model.py, search_scales.py, evaluate.py, train.py)
and below reproduce.py and the classroom kit.

    stages.py     a study's stages: run once, skipped while their inputs are unchanged
    findings.py   which of the paper's findings hold in a study (criteria fixed before any result)
    plot.py       every figure, drawn from saved files alone
    passkey.py    passkey retrieval: accuracy over length x depth
    beyond.py     the tables of ALiBi and Scalable-Softmax beside NoPE, over seeds
                  (--rows=2025: FoX, the output gate, a learned sink)
    sweep.py      recipe screens and multi-seed studies
    bench.py      speed and memory of every stage against the device's matmul rate
    overlap.py    how much text the scale search's windows share with the evaluation's,
                  length by length
    gpu_check.py  the project's check for a CUDA card (--trial: the same steps on a CPU)
    tables.py     evaluate.py's results as tables: table.md, results.csv, samples.md
    rope_grid.py  RoPE's zero-shot factors per length (PI, NTK-aware, YaRN)
    set_slope.py  a slope of lambda(i) set without a fit (Qwen's logn, the grid's a)
    add_facts.py  the facts of a results.json written before rows recorded them

Run the scripts from the repository: python study/NAME.py -h
"""
import os

from common import UserError


def finished_studies(args, script, makes="python reproduce.py"):
    """The study folders among a script's arguments (those not starting with '-'), each holding a
    finished study (eval/results.json); one line saying what to give or run otherwise."""
    studies = [a for a in args if not a.startswith("-")]
    if not studies:
        raise UserError(f"give one or more study folders: python {script} out/study "
                        "[out/study_s1338 ...]")
    for s in studies:
        if not os.path.exists(os.path.join(s, "eval", "results.json")):
            raise UserError(f"{s} holds no finished study (eval/results.json missing): run "
                            f"{makes} first")
    return studies
