def last_L_losses(model, x, y, context, batch_size, ctx=contextlib.nullcontext(), entropy=False, chunk=256):
    """Per-token loss (and entropy) of each position read with only its last `context` tokens."""
    B, T = x.shape
    dev = x.device
    L = context
    first = min(L, T)
    loss_out = torch.empty(B, T, dtype=torch.float32, device=dev)
    ent_out = None

    def run(xs, ys):
        got = _losses(model, xs, ys, ctx, None, entropy, chunk)
        lo, en = got[0], got[1]
        return lo.float(), (en.float() if entropy else None)

    for r0 in range(0, B, batch_size):
        lo, en = run(x[r0:r0 + batch_size, :first], y[r0:r0 + batch_size, :first])
        loss_out[r0:r0 + batch_size, :first] = lo
        if entropy:
            if ent_out is None:
                ent_out = torch.empty(B, en.shape[1], en.shape[2], T, dtype=torch.float32, device=dev)
            ent_out[r0:r0 + batch_size, :, :, :first] = en
    if T > L:
        stride = max(1, L // 8)
        ends = torch.clamp(L + stride * torch.arange(1, (T - L + stride - 1) // stride + 1, device=dev), max=T)
        prev = torch.cat([torch.tensor([L], device=dev), ends[:-1]])
        starts = ends - L
        K = ends.numel()
        col = torch.arange(L, device=dev)
        where = starts[:, None] + col[None, :]                 # (K, L) positions each sub-window covers
        tok_at = where.clone()
        if getattr(model.config, "bos", False):
            tok_at[:, 0] = 0                                   # start token, then the last L - 1 tokens
        kept = col[None, :] >= (L - (ends - prev))[:, None]    # (K, L) the positions each scores
        sub_x = x[:, tok_at].reshape(B * K, L)
        sub_y = y[:, where].reshape(B * K, L)
        row_b = torch.arange(B, device=dev).repeat_interleave(K)
        row_k = torch.arange(K, device=dev).repeat(B)
        for r0 in range(0, B * K, batch_size):
            r1 = min(r0 + batch_size, B * K)
            lo, en = run(sub_x[r0:r1], sub_y[r0:r1])
            bk, kk = row_b[r0:r1], row_k[r0:r1]
            sel = kept[kk]                                     # (n, L)
            dst_b = bk[:, None].expand(-1, L)[sel]
            dst_t = where[kk][sel]
            loss_out[dst_b, dst_t] = lo[sel]
            if entropy:
                if ent_out is None:
                    ent_out = torch.empty(B, en.shape[1], en.shape[2], T, dtype=torch.float32, device=dev)
                ent_out[dst_b, :, :, dst_t] = en.permute(0, 3, 1, 2)[sel]
    return loss_out, ent_out


def excess(results, name, key="loss"):
    """Row minus its reference row, at every length both were measured at."""
    ref = reference_of(results, name)
    if ref is None:
        return {}
    methods = results["methods"]
    if name not in methods or ref not in methods:
        return {}
    mine, theirs = methods[name], methods[ref]
    if key not in mine or key not in theirs:
        return {}
    ref_at = {n: val for n, val in zip(theirs["lengths"], theirs[key]) if val is not None}
    return {n: float(val) - float(ref_at[n])
            for n, val in zip(mine["lengths"], mine[key])
            if val is not None and n in ref_at}
