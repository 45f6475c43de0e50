def last_L_losses(model, x, y, context, batch_size, ctx=contextlib.nullcontext(), entropy=False, chunk=256):
    """Per-token losses (and entropies) with each token read from only its last ~context tokens, sub-window by sub-window."""
    B, T = x.shape
    losses_out = torch.zeros(B, T, dtype=torch.float32, device=x.device)
    ent_out = None
    use_bos = bool(getattr(model.config, "bos", False))
    per_pass = max(1, int(batch_size))

    def run(xs, ys):
        got_loss, got_ent = _losses(model, xs, ys, ctx, None, entropy, chunk)
        return got_loss, got_ent

    # the first pass: positions 0 ... min(context, T) - 1, read as they are
    head = min(context, T)
    for r0 in range(0, B, per_pass):
        r1 = min(r0 + per_pass, B)
        part_loss, part_ent = run(x[r0:r1, :head].clone(), y[r0:r1, :head].clone())
        losses_out[r0:r1, :head] = part_loss.float()
        if entropy:
            if ent_out is None:
                n_layer, n_head = part_ent.shape[1], part_ent.shape[2]
                ent_out = torch.zeros(B, n_layer, n_head, T, dtype=torch.float32, device=x.device)
            ent_out[r0:r1, :, :, :head] = part_ent.float()

    # the later positions: sub-windows of `context` positions with stride s
    stride = max(1, context // 8)
    jobs = []                       # (row, start, end, how many scored at the end)
    prev_end = context
    k = 0
    while prev_end < T:
        end = min(context + (k + 1) * stride, T)
        start = end - context
        for row in range(B):
            jobs.append((row, start, end, end - prev_end))
        prev_end = end
        k += 1

    for j0 in range(0, len(jobs), per_pass):
        group = jobs[j0:j0 + per_pass]
        xs_list = []
        ys_list = []
        for row, start, end, n_new in group:
            if use_bos:
                tokens = torch.cat([x[row, 0:1], x[row, start + 1:end]]).clone()
            else:
                tokens = x[row, start:end].clone()
            xs_list.append(tokens)
            ys_list.append(y[row, start:end].clone())
        part_loss, part_ent = run(torch.stack(xs_list), torch.stack(ys_list))
        for g, (row, start, end, n_new) in enumerate(group):
            losses_out[row, end - n_new:end] = part_loss[g, context - n_new:].float()
            if entropy:
                if ent_out is None:
                    n_layer, n_head = part_ent.shape[1], part_ent.shape[2]
                    ent_out = torch.zeros(B, n_layer, n_head, T, dtype=torch.float32, device=x.device)
                ent_out[row, :, :, end - n_new:end] = part_ent[g, :, :, context - n_new:].float()
    return losses_out, ent_out


def excess(results, name, key="loss"):
    """A row's value minus its reference's, at every length both were measured at."""
    ref_name = reference_of(results, name)
    if ref_name is None:
        return {}
    row = results["methods"][name]
    ref = results["methods"][ref_name]
    ref_at = {}
    for n, value in zip(ref["lengths"], ref[key]):
        ref_at[n] = value
    out = {}
    for n, value in zip(row["lengths"], row[key]):
        if n in ref_at:
            out[n] = float(value - ref_at[n])
    return out
