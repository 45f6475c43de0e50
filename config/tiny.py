"""A seconds-long configuration for smoke tests and for trying the scripts out."""

train = dict(
    n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8,
    max_iters=20, warmup_iters=2, eval_interval=10, val_windows=16, log_interval=5,
)

search_scales = dict(windows=4, lam_step=0.25, steps=10, log_interval=5)

rope_grid = dict(windows=4, factors=[1, 2, 4])

evaluate = dict(windows=4, sample_tokens=20)
