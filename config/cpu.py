"""CPU preset: a 2-core laptop. Each script reads its own section; --key=value wins.
Chosen by measurement (docs/sweep.md has the screen): the built-in corpus through a 2048-token BPE
learned on it, where NoPE comes closest to RoPE at L for the time. nope_notoken, the RoPE baselines
and passkey are one flag each, left out to keep the study short (its times: docs/laptop.md)."""

train = dict(
    dataset="pystdlib_bpe2048",  # ~3 characters a token: L tokens hold 3x the text of char level
    n_layer=4, n_head=4, n_embd=128,
    block_size=128,          # training length L: 8L stays cheap to evaluate on a CPU
    batch_size=32,           # 4k tokens a step: the long preset (cpu_long) has 64
    max_iters=800,
    learning_rate=2e-3,      # NoPE wants more than 1e-3 here (at 1e-3 its gradient norm climbs)
    min_lr=2e-4,
    warmup_iters=100,
    eval_interval=250,
    log_interval=25,
)

reproduce = dict(
    lengths=[1, 2, 4, 8],    # evaluation lengths, units of L (cpu_long adds 16L)
    passkey=False,           # passkey fine-tuning, the longest stage:
                             # --passkey=true (or cpu_long) adds it
    notoken=False,           # NoPE without the start token, one more training:
                             # --notoken=true adds it
    rope_baselines=False,    # PI, NTK-aware, YaRN zero-shot and PI, YaRN fine-tuned:
                             # --rope_baselines=true
)
