def fit_log_law(positions, lam, L):
    """Least-squares slope a of lambda - 1 = a ln(i / L) through the origin, over i >= L, with R^2."""
    pos = np.asarray(positions, dtype=np.float64).reshape(-1)
    val = np.asarray(lam, dtype=np.float64).reshape(-1)
    keep = pos >= L
    if keep.sum() < 2:
        return float("nan"), float("nan")
    xs = np.log(pos[keep] / L)
    ys = val[keep] - 1.0
    if not np.any(xs != 0.0):
        return float("nan"), float("nan")
    coef = np.linalg.lstsq(xs[:, None], ys, rcond=None)[0]
    a = float(coef[0])
    resid = ys - a * xs
    centred = ys - ys.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1.0 - np.dot(resid, resid) / np.dot(centred, centred)
    return a, float(r2)
