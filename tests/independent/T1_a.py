def query_scale(head_scale, slope, T, L):
    """Per-head, per-query-position lambda: head_scale * (1 + slope * ln(max(i, L) / L))."""
    nh = head_scale.shape[0]
    if T <= L:
        return head_scale.view(1, nh, 1, 1)
    i = torch.arange(1, T + 1, device=head_scale.device, dtype=torch.float64)
    x = torch.log(torch.clamp(i, min=float(L)) / float(L)).to(head_scale.dtype)
    hs = head_scale.view(1, nh, 1, 1)
    a = slope.to(device=head_scale.device, dtype=head_scale.dtype).view(1, nh, 1, 1)
    return hs * (1 + a * x.view(1, 1, T, 1))
