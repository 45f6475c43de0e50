def written_out_attention(q, k, v, lam=None, window=None, sink=False, chunk=256):
    """Causal softmax attention written out chunk by chunk, returning y and entropy in bits."""
    B, nh, T, hs = q.shape
    dev = q.device
    inv_sqrt_d = 1.0 / math.sqrt(hs)
    out_y = torch.empty(B, nh, T, v.shape[-1], dtype=v.dtype, device=dev)
    out_h = torch.empty(B, nh, T, dtype=torch.float32, device=dev)
    keys_at = torch.arange(T, device=dev)
    with torch.autocast(device_type=dev.type, enabled=False):
        kf = k.float()
        vf = v.float()
        lamf = None if lam is None else lam.float()
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            rows = keys_at[s:e].unsqueeze(1)           # (c, 1) query index
            cols = keys_at[:e].unsqueeze(0)            # (1, e) key index
            visible = cols <= rows
            if window is not None:
                if sink:
                    visible = visible & ((cols > rows - window + 1) | (cols == 0))
                else:
                    visible = visible & (cols > rows - window)
            logits = torch.matmul(q[:, :, s:e].float(), kf[:, :, :e].transpose(-1, -2)) * inv_sqrt_d
            if lamf is not None:
                part = lamf if lamf.shape[2] == 1 else lamf[:, :, s:e]
                logits = logits * part
            logits = logits.masked_fill(~visible, float("-inf"))
            logp = torch.log_softmax(logits, dim=-1)
            p = logp.exp()
            plogp = torch.where(visible, p * logp, torch.zeros((), device=dev))
            out_h[:, :, s:e] = plogp.sum(-1) / -math.log(2.0) + 0.0
            out_y[:, :, s:e] = torch.matmul(p, vf[:, :, :e]).to(v.dtype)
    return out_y, out_h
