def last_L_losses(model, x, y, context, batch_size, ctx=contextlib.nullcontext(), entropy=False, chunk=256):
    """Per-token losses (and entropies) with each token read from only its last ~context tokens."""
    B, T = x.shape
    bos = bool(getattr(model.config, "bos", False))
    losses = torch.zeros(B, T, dtype=torch.float32, device=x.device)
    ents = None
    first = min(context, T)
    # the first pass: positions 0 .. context-1, batch_size rows at a time
    for r in range(0, B, batch_size):
        l, h = _losses(model, x[r:r + batch_size, :first].clone(), y[r:r + batch_size, :first].clone(),
                       ctx, None, entropy, chunk)
        losses[r:r + batch_size, :first] = l.float()
        if entropy:
            if ents is None:
                ents = torch.zeros(B, h.shape[1], h.shape[2], T, dtype=torch.float32, device=x.device)
            ents[r:r + batch_size, :, :, :first] = h.float()
    if T > context:
        s = max(1, context // 8)
        # every sub-window of every row: (row, start, end, previous end)
        jobs = []
        prev = context
        k = 0
        while prev < T:
            e = min(context + (k + 1) * s, T)
            for b in range(B):
                jobs.append((b, e - context, e, prev))
            prev = e
            k += 1
        for j in range(0, len(jobs), batch_size):
            part = jobs[j:j + batch_size]
            xs = []
            ys = []
            for b, st, e, pe in part:
                if bos:
                    xs.append(torch.cat([x[b, :1], x[b, st + 1:e]]))
                else:
                    xs.append(x[b, st:e].clone())
                ys.append(y[b, st:e].clone())
            xb = torch.stack(xs)
            yb = torch.stack(ys)
            l, h = _losses(model, xb, yb, ctx, None, entropy, chunk)
            for n, (b, st, e, pe) in enumerate(part):
                keep = e - pe
                losses[b, pe:e] = l[n, context - keep:].float()
                if entropy:
                    if ents is None:
                        ents = torch.zeros(B, h.shape[1], h.shape[2], T, dtype=torch.float32, device=x.device)
                    ents[b, :, :, pe:e] = h[n, :, :, context - keep:].float()
    return losses, ents


def excess(results, name, key="loss"):
    """A row's value minus its reference's, at every length both were measured at."""
    ref = reference_of(results, name)
    if ref is None:
        return {}
    row = results["methods"][name]
    base = results["methods"][ref]
    base_at = dict(zip(base["lengths"], base[key]))
    out = {}
    for n, val in zip(row["lengths"], row[key]):
        if n in base_at:
            out[n] = float(val - base_at[n])
    return out
