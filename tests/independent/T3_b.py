def uniform_scale(lams, loss, tail, width):
    """Pick the best lambda by plain loops: over all positions, over the tail, and per bin of positions."""
    grid = [float(value) for value in np.asarray(lams, dtype=np.float64).reshape(-1)]
    table = np.asarray(loss, dtype=np.float64)
    n_lam = len(grid)
    n_pos = table.shape[1]

    def mean_of(row, lo, hi):
        total = 0.0
        for j in range(lo, hi):
            total += float(table[row, j])
        return total / (hi - lo)

    def first_best(means):
        best_index = 0
        for r in range(1, len(means)):
            if means[r] < means[best_index]:     # strict: a tie keeps the earlier (smaller) lambda
                best_index = r
        return best_index

    all_means = [mean_of(r, 0, n_pos) for r in range(n_lam)]
    i_all = first_best(all_means)

    tail_start = n_pos - tail if 0 < tail < n_pos else 0
    tail_means = [mean_of(r, tail_start, n_pos) for r in range(n_lam)]
    i_tail = first_best(tail_means)

    n_bins = n_pos // width
    centres = []
    per_bin = []
    for b in range(n_bins):
        lo = b * width
        hi = lo + width
        centres.append(lo + (width + 1) / 2.0)   # positions count from 1
        bin_means = [mean_of(r, lo, hi) for r in range(n_lam)]
        per_bin.append(grid[first_best(bin_means)])

    return {
        "best_lam": float(grid[i_all]),
        "best_loss": float(all_means[i_all]),
        "best_lam_tail": float(grid[i_tail]),
        "best_tail_loss": float(tail_means[i_tail]),
        "positions": np.array(centres, dtype=np.float64),
        "best_lam_per_position": np.array(per_bin, dtype=np.float64),
    }
