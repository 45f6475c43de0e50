"""The long CPU preset: the CPU preset's BPE corpus with twice its training tokens (batch 64),
evaluation up to 16L, nope_notoken, the RoPE baselines and the passkey stage. Its whole study has
not been timed: each training takes about twice the cpu preset's."""

train = dict(
    dataset="pystdlib_bpe2048",  # as the CPU preset
    n_layer=4, n_head=4, n_embd=128,
    block_size=128,          # training length L: 8L and 16L stay cheap to evaluate on a CPU
    batch_size=64,
    max_iters=800,
    learning_rate=2e-3,      # NoPE wants more than 1e-3 here (at 1e-3 its gradient norm climbs)
    min_lr=2e-4,
    warmup_iters=100,
    eval_interval=250,
    log_interval=25,
)

reproduce = dict(
    lengths=[1, 2, 4, 8, 16],  # evaluation lengths, units of L
    passkey=True,              # passkey retrieval over length x depth
)
