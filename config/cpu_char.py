"""The character-level CPU preset: the default before the in-distribution issue (README, "Presets").
Every character is a token: the failure past L is sharpest here, but NoPE trails RoPE at L by far
(docs/char/ has the study and its time)."""

train = dict(
    dataset="pystdlib",     # the built-in corpus, one token per character
    n_layer=4, n_head=4, n_embd=128,
    block_size=128,          # training length L: 8L and 16L stay cheap to evaluate on a CPU
    batch_size=32,           # 4k tokens a step: the long preset (cpu_long) has 64
    max_iters=800,
    learning_rate=2e-3,      # NoPE wants more than 1e-3 here (at 1e-3 its gradient norm climbs)
    min_lr=2e-4,
    warmup_iters=100,
    eval_interval=250,
    log_interval=25,
)

reproduce = dict(
    lengths=[1, 2, 4, 8],    # evaluation lengths, units of L
    passkey=True,            # the passkey stage
)
