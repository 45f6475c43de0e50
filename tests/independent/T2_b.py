def written_out_attention(q, k, v, lam=None, window=None, sink=False, chunk=256):
    """Causal softmax attention written out chunk by chunk of queries; returns (y, entropy in bits)."""
    B, n_heads, T, head_size = q.shape
    T_keys = k.shape[2]
    dev = q.device
    inv_sqrt_d = 1.0 / math.sqrt(head_size)
    ln2 = math.log(2.0)
    step = max(1, int(chunk))
    y_pieces = []
    h_pieces = []
    with torch.autocast(device_type=q.device.type, enabled=False):
        q32 = q.float()
        k32 = k.float()
        v32 = v.float()
        key_idx = torch.arange(T_keys, device=dev).view(1, T_keys)
        first = 0
        while first < T:
            last = min(first + step, T)
            qry_idx = torch.arange(first, last, device=dev).view(last - first, 1)
            # the mask, by hand: key j visible to query i when j <= i ...
            visible = key_idx <= qry_idx
            if window is not None:
                if sink:
                    # ... the last W - 1 keys and the start key
                    in_window = (key_idx > qry_idx - window + 1) | (key_idx == 0)
                else:
                    # ... the last W keys only
                    in_window = key_idx > qry_idx - window
                visible = visible & in_window
            # logits of this slice of queries: (B, nh, rows, T_keys)
            logits = torch.matmul(q32[:, :, first:last, :], k32.transpose(-2, -1)) * inv_sqrt_d
            if lam is not None:
                lam32 = lam.float()
                if lam32.shape[2] == 1:
                    lam_rows = lam32
                else:
                    lam_rows = lam32[:, :, first:last, :]
                logits = logits * lam_rows          # q's side only, before the softmax
            logits = logits.masked_fill(~visible, float("-inf"))
            weights = torch.softmax(logits, dim=-1)
            y_pieces.append(torch.matmul(weights, v32))
            # -sum p log2 p, with 0 log 0 = 0 for the masked keys
            h_pieces.append(torch.special.entr(weights).sum(dim=-1) / ln2)
            first = last
        y = torch.cat(y_pieces, dim=2)
        entropy = torch.cat(h_pieces, dim=2)
    return y.to(v.dtype), entropy.float()
