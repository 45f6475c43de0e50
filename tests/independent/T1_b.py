def query_scale(head_scale, slope, T, L):
    """Per-head, per-query-position lambda, built one head at a time from the log law."""
    n_heads = head_scale.shape[0]
    if T <= L:
        # nobody sits past the training length: the scales themselves, untouched
        return head_scale.view(1, n_heads, 1, 1)
    # ln(max(i, L) / L) for the positions i = 1 ... T, written out one by one
    log_terms = []
    for i in range(1, T + 1):
        if i <= L:
            log_terms.append(0.0)
        else:
            log_terms.append(math.log(i / L))
    log_terms = torch.tensor(log_terms, dtype=head_scale.dtype, device=head_scale.device)
    rows = []
    for h in range(n_heads):
        growth = 1.0 + slope[h] * log_terms          # exactly 1 wherever the log term is 0
        rows.append((head_scale[h] * growth).to(head_scale.dtype))
    return torch.stack(rows, dim=0).view(1, n_heads, T, 1)
