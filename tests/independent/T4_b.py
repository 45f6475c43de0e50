def fit_log_law(positions, lam, L):
    """Least-squares a in lambda = 1 + a ln(i / L), no intercept, over the positions i >= L; returns (a, R^2)."""
    xs = []
    ys = []
    for i, value in zip(list(positions), list(lam)):
        i = float(i)
        if i >= L:
            xs.append(math.log(i / L))
            ys.append(float(value) - 1.0)
    if len(xs) < 2:
        return float("nan"), float("nan")
    sxx = 0.0
    sxy = 0.0
    for xv, yv in zip(xs, ys):
        sxx += xv * xv
        sxy += xv * yv
    if sxx == 0.0:
        return float("nan"), float("nan")
    slope_a = sxy / sxx
    y_mean = sum(ys) / len(ys)
    ss_res = 0.0
    ss_tot = 0.0
    for xv, yv in zip(xs, ys):
        ss_res += (yv - slope_a * xv) ** 2
        ss_tot += (yv - y_mean) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        r_squared = 1.0 - np.float64(ss_res) / np.float64(ss_tot)
    return float(slope_a), float(r_squared)
