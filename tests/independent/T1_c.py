def query_scale(head_scale, slope, T, L):
    """Per-head lambda, growing as 1 + slope * ln(i / L) for query positions i past L."""
    nh = head_scale.shape[0]
    if T <= L:
        return head_scale.view(1, nh, 1, 1)
    idx = torch.arange(1, T + 1, device=head_scale.device, dtype=torch.float64)
    past = idx > L
    # ln(max(i, L)) - ln(L), in float64, then brought to the scales' dtype
    logs = (torch.log(torch.clamp(idx, min=float(L))) - math.log(L)).to(head_scale.dtype)
    base = head_scale.reshape(nh, 1)
    grown = base * (1.0 + slope.to(head_scale.dtype).reshape(nh, 1) * logs.reshape(1, T))
    lam = torch.where(past.reshape(1, T), grown, base.expand(nh, T))
    return lam.reshape(1, nh, T, 1)
