def fit_log_law(positions, lam, L):
    """Least-squares slope a of lambda(i) = 1 + a ln(i / L) over positions i >= L, with its R^2."""
    pos = np.asarray(positions, dtype=np.float64)
    lv = np.asarray(lam, dtype=np.float64)
    keep = pos >= L
    if keep.sum() < 2:
        return float("nan"), float("nan")
    x = np.log(pos[keep] / L)
    y = lv[keep] - 1.0
    sxx = float(np.sum(x * x))
    if sxx == 0.0:
        return float("nan"), float("nan")
    a = float(np.sum(x * y)) / sxx
    ss_res = float(np.sum((y - a * x) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1.0 - np.float64(ss_res) / np.float64(ss_tot)
    return a, float(r2)
