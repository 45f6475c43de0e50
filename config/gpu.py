"""GPU preset: one CUDA card, bf16, same steps as the CPU study at a larger scale.
Not yet measured on a GPU in this repository: treat the step count as a starting point."""

train = dict(
    n_layer=6, n_head=8, n_embd=512,
    block_size=512,          # training length L; 16L = 8192 still fits one card at evaluation
    batch_size=64,
    max_iters=4000,
    learning_rate=1e-3,
    min_lr=1e-4,
    warmup_iters=200,
    dropout=0.1,             # the built-in corpus is ~9M characters: ~15 passes at this budget
    eval_interval=500,
    val_windows=512,         # fixed validation windows of L tokens
    log_interval=50,
    compile=True,
)
