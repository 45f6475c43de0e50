def written_out_attention(q, k, v, lam=None, window=None, sink=False, chunk=256):
    """Causal attention with the softmax written out, lambda on the query logits, entropy in bits."""
    B, nh, T, hs = q.shape
    dev = q.device
    ys = []
    Hs = []
    with torch.autocast(device_type=q.device.type, enabled=False):
        qf = q.float()
        kf = k.float()
        vf = v.float()
        kt = kf.transpose(-2, -1)
        cols = torch.arange(T, device=dev).view(1, T)
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            scores = (qf[:, :, s:e] @ kt) / math.sqrt(hs)
            if lam is not None:
                lam_f = lam.float().to(dev)
                if lam_f.shape[2] == 1:
                    scores = scores * lam_f
                else:
                    scores = scores * lam_f[:, :, s:e]
            rows = torch.arange(s, e, device=dev).view(e - s, 1)
            visible = cols <= rows
            if window is not None:
                if sink:
                    visible = visible & ((cols > rows - window + 1) | (cols == 0))
                else:
                    visible = visible & (cols > rows - window)
            scores = scores.masked_fill(~visible, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            ys.append(p @ vf)
            Hs.append(torch.special.entr(p).sum(dim=-1) / math.log(2))
        y = torch.cat(ys, dim=2)
        H = torch.cat(Hs, dim=2)
    return y.to(v.dtype), H.float()
