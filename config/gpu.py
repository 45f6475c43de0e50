"""GPU preset: one CUDA card, character level, 19 M parameters at L = 512.
What `python reproduce.py` runs where CUDA is available; sized on one NVIDIA H200 (what it
measured there: docs/gpu/). bf16 where the card computes it natively, else float16 with a
gradient scaler."""

train = dict(
    n_layer=6, n_head=8, n_embd=512,
    block_size=512,          # training length L; 16L = 8192 still fits one card at evaluation
    batch_size=64,           # 32k tokens a step; if memory is short, halve it with
                             # gradient_accumulation_steps=2
    max_iters=2000,          # 2000 x 32,768 = 65.5 M tokens
    learning_rate=1e-3,
    min_lr=1e-4,
    warmup_iters=200,
    dropout=0.1,             # built-in corpus: ~9 M characters; 2000 steps are ~7 passes over it
    eval_interval=500,
    val_windows=512,         # fixed validation windows of L tokens
    log_interval=50,
    compile=True,
)

reproduce = dict(
    lengths=[1, 2, 4, 8],    # evaluation lengths, units of L (16L = 8192 also runs:
                             # add it with --lengths)
    passkey=False,           # passkey fine-tuning: --passkey=true adds it
    beyond=True,             # ALiBi and Scalable-Softmax beside NoPE (docs/beyond.md): on a card
                             # two trainings cost about a minute; study/gpu_check.py's budgeted
                             # study leaves them out unless --study_args=beyond=true
)
