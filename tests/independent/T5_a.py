def fit_head_scales(model, batches, init, steps=200, lr=0.05, betas=(0.9, 0.95), warmup=20, final_lr=0.005, min_scale=1.0):
    """Fit one lambda per head by AdamW on the LM loss with every model weight frozen."""
    lam = torch.as_tensor(init).detach().clone().to(torch.float32).requires_grad_(True)
    opt = torch.optim.AdamW([lam], lr=lr, betas=betas, weight_decay=0.0)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    was_training = model.training
    old_scales = model.get_head_scales()
    if torch.is_tensor(old_scales):
        old_scales = old_scales.detach().clone()
    log = []
    try:
        model.requires_grad_(False)
        model.eval()
        it = iter(batches)
        for step in range(steps):
            try:
                x, y = next(it)
            except StopIteration:
                break
            rate = cosine_lr(step, warmup, steps, lr, final_lr)
            for group in opt.param_groups:
                group["lr"] = rate
            model.set_head_scales(lam)
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                lam.clamp_(min=min_scale)
            log.append({
                "step": step + 1,
                "loss": round(loss.item(), 5),
                "lam_mean": round(lam.mean().item(), 4),
                "lam_min": round(lam.min().item(), 4),
                "lam_max": round(lam.max().item(), 4),
                "lr": rate,
            })
    finally:
        model.set_head_scales(old_scales)
        model.train(was_training)
        for p, flag in flags:
            p.requires_grad_(flag)
    return lam.detach(), log
