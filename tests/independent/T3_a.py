def uniform_scale(lams, loss, tail, width):
    """Pick the lambda with the lowest mean loss overall, over the tail, and per bin of positions."""
    grid = np.asarray(lams, dtype=np.float64)
    table = np.asarray(loss, dtype=np.float64)
    n = table.shape[1]
    means = table.mean(axis=1)
    i_best = int(np.argmin(means))
    start = max(n - tail, 0)
    tail_means = table[:, start:].mean(axis=1)
    i_tail = int(np.argmin(tail_means))
    nb = n // width
    centres = np.array([b * width + (width + 1) / 2.0 for b in range(nb)], dtype=np.float64)
    per_bin = np.zeros(nb, dtype=np.float64)
    for b in range(nb):
        bin_means = table[:, b * width:(b + 1) * width].mean(axis=1)
        per_bin[b] = grid[int(np.argmin(bin_means))]
    return {
        "best_lam": float(grid[i_best]),
        "best_loss": float(means[i_best]),
        "best_lam_tail": float(grid[i_tail]),
        "best_tail_loss": float(tail_means[i_tail]),
        "positions": centres,
        "best_lam_per_position": per_bin,
    }
