"""The study's machinery, not the lesson (the lesson: model.py, train.py, search_scales.py,
evaluate.py).

    cli.py        the --key=value parser, presets, device and precision, progress,
                  atomic UTF-8 files
    stages.py     a study's stages: run once, skipped while their inputs are unchanged
    findings.py   which of the paper's findings hold in a study (criteria fixed before any result)
    plot.py       every figure, drawn from saved files alone
    passkey.py    passkey retrieval: accuracy over length x depth
    beyond.py     the tables of ALiBi and Scalable-Softmax beside NoPE, over seeds
    sweep.py      recipe screens and multi-seed studies
    bench.py      speed and memory of every stage against the device's matmul rate
    overlap.py    how much text the scale search's windows share with the evaluation's,
                  length by length
    gpu_check.py  the project's check for a CUDA card (--trial: the same steps on a CPU)

Run the scripts from the repository: python tools/NAME.py -h
"""
