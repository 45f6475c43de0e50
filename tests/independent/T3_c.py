def uniform_scale(lams, loss, tail, width):
    """Pick the lambda with the lowest mean loss overall, over the tail, and per position bin."""
    grid = np.array(lams, dtype=np.float64).reshape(-1)
    table = np.array(loss, dtype=np.float64)
    n_lam, n = table.shape
    overall = table.mean(axis=1)
    i_all = int(np.argmin(overall))
    last = table[:, max(n - tail, 0):]
    tail_mean = last.mean(axis=1)
    i_tail = int(np.argmin(tail_mean))
    nb = n // width
    chunks = table[:, :nb * width].reshape(n_lam, nb, width).mean(axis=2)
    centres = np.arange(nb, dtype=np.float64) * width + (width + 1) / 2.0
    if nb:
        per_bin = grid[np.argmin(chunks, axis=0)].astype(np.float64)
    else:
        per_bin = np.zeros(0, dtype=np.float64)
    return {
        "best_lam": float(grid[i_all]),
        "best_loss": float(overall[i_all]),
        "best_lam_tail": float(grid[i_tail]),
        "best_tail_loss": float(tail_mean[i_tail]),
        "positions": centres,
        "best_lam_per_position": per_bin,
    }
