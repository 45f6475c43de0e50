def fit_head_scales(model, batches, init, steps=200, lr=0.05, betas=(0.9, 0.95), warmup=20, final_lr=0.005, min_scale=1.0):
    """HeadScale: fit lambda per (layer, head) by AdamW on the LM loss, weights frozen, model restored after."""

    def rate_at(step_index):
        # linear warm-up to lr, then half a cosine from lr down to final_lr (the handout's schedule)
        if step_index < warmup:
            return lr * (step_index + 1) / (warmup + 1)
        if step_index > steps:
            return final_lr
        fraction = (step_index - warmup) / (steps - warmup)
        return final_lr + 0.5 * (1.0 + math.cos(math.pi * fraction)) * (lr - final_lr)

    lam = torch.as_tensor(init).detach().to(dtype=torch.float32).clone()
    lam.requires_grad_(True)
    optimiser = torch.optim.AdamW([lam], lr=lr, betas=betas, weight_decay=0.0)

    # what we must hand back untouched
    all_params = list(model.parameters())
    saved_flags = []
    for p in all_params:
        saved_flags.append(p.requires_grad)
    was_training = model.training
    saved_scales = model.get_head_scales()
    if torch.is_tensor(saved_scales):
        saved_scales = saved_scales.detach().clone()

    log = []
    try:
        model.requires_grad_(False)
        model.eval()
        source = iter(batches)
        for step in range(steps):
            try:
                x, y = next(source)
            except StopIteration:
                break
            current_lr = rate_at(step)
            for group in optimiser.param_groups:
                group["lr"] = current_lr
            model.set_head_scales(lam)
            _, loss = model(x, y)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            with torch.no_grad():
                lam.clamp_(min=min_scale)     # the focus constraint, every step
            log.append({
                "step": step + 1,
                "loss": round(loss.item(), 5),
                "lam_mean": round(lam.mean().item(), 4),
                "lam_min": round(lam.min().item(), 4),
                "lam_max": round(lam.max().item(), 4),
                "lr": current_lr,
            })
    finally:
        model.set_head_scales(saved_scales)
        if was_training:
            model.train()
        else:
            model.eval()
        for p, flag in zip(all_params, saved_flags):
            p.requires_grad_(flag)
    return lam.detach(), log
