"""
Sample from a trained model, in nanoGPT's manner.

    python sample.py --ckpt=out/study/nope/ckpt.pt                         # from the start token
    python sample.py --ckpt=out/study/nope/ckpt.pt --start="def main():"   # continue a prompt
    python sample.py --ckpt=out/study/nope/ckpt.pt --start=FILE:prompt.py --max_new_tokens=1000
    python sample.py --ckpt=out/study/nope/ckpt.pt --scales=out/study/scales/head_4L.pt

A model trained with the start token (train.py's default) reads it before every prompt, as it
did in training; the token prints as nothing. Generation does not stop at the training length
L: write past it and watch where the text stops looking like the corpus, with and without the
scales that search_scales.py fitted (--scales takes any checkpoint it wrote, or a fit's .json).
"""

import os
from dataclasses import dataclass

import torch

import families  # noqa: F401  (registers the families past the paper: their checkpoints load)
from common import UserError, parse_config, pick_device, read_json, run_main
from data import Dataset, read_text
from model import load_checkpoint


@dataclass
class SampleConfig:
    ckpt: str = "out/nope/ckpt.pt"      # a checkpoint from train.py or search_scales.py
    start: str = ""                     # the prompt, or FILE:path to read it from ('' = none)
    num_samples: int = 2                # samples to draw
    max_new_tokens: int = 500           # tokens generated per sample
    temperature: float = 0.8            # 1 = the model's own, lower = more conservative, 0 = greedy
    top_k: int = 50                     # keep only the k most likely tokens (0 = all)
    scales: str = ""                    # lambda and its slopes from search_scales.py (.pt or .json)
    context: int = 0                    # read only the last `context` positions (0 = all so far)
                                        # (the start token among them)
    dataset: str = ""                   # '' = the checkpoint's training dataset (for its tokenizer)
    seed: int = 1337                    # the same seed gives the same samples
    device: str = "auto"                # auto | cpu | cuda | mps
    preset: str = ""                    # the preset used (set by --preset=NAME)


def load_scales(path, device):
    """The lambda table and the slope table (zeros: a constant lambda) of a search_scales.py
    output: (n_layer, n_head) tensors, or numbers from a study/set_slope.py .json."""
    if not os.path.exists(path):
        raise UserError(f"--scales={path} does not exist; run search_scales.py first")
    if path.endswith(".json"):
        info = read_json(path)
        if "lam" not in info and "a" not in info:
            raise UserError(f"{path} holds no fitted scales ('lam') or slopes ('a'); give a fit's "
                            ".json or a checkpoint")
        return torch.tensor(info.get("lam", 1.0)), torch.tensor(info.get("a", 0.0))
    model = load_checkpoint(path, device)[0]
    return model.get_head_scales(), model.get_head_slopes()


def main():
    cfg = parse_config(SampleConfig, section="sample", description=__doc__)
    if (cfg.num_samples <= 0 or cfg.max_new_tokens <= 0
            or cfg.top_k < 0 or cfg.temperature < 0 or cfg.context < 0):
        raise UserError("--num_samples and --max_new_tokens must be > 0; "
                        "--top_k, --temperature, --context >= 0")
    device = pick_device(cfg.device)
    model, ckpt = load_checkpoint(cfg.ckpt, device)
    ds = Dataset.for_model(model.config, ckpt, cfg.dataset)
    if cfg.scales:
        lam, a = load_scales(cfg.scales, device)
        try:  # the model's own shape rules (a number, one per layer, or one per head)
            model.set_head_scales(lam)
            model.set_head_slopes(a)
        except ValueError as e:
            raise UserError(f"--scales={cfg.scales}: {e}") from None
    text = read_text(cfg.start[5:]) if cfg.start.startswith("FILE:") else cfg.start
    ids = ds.prompt_ids(text)  # the start token first, if the model was trained with it
    if len(ids) == 0:
        raise UserError("this model was trained without the start token: give a prompt with "
                        "--start=TEXT")
    model.eval()
    g = torch.Generator(device=device).manual_seed(cfg.seed)
    x = torch.tensor(ids, dtype=torch.long, device=device)
    x = x.unsqueeze(0).repeat(cfg.num_samples, 1)  # (B, T): the prompt once per sample
    y = model.generate(x, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k or None,
                       window=cfg.context or None, generator=g)
    L = model.config.block_size
    print(f"# {cfg.ckpt}: L = {L}, prompt {len(ids)} tokens "
          f"(start token {'included' if ds.bos else 'not used'}), {cfg.max_new_tokens} new; "
          f"past position {L} the model is beyond its training length")
    for row in y.tolist():
        print(ds.decode(row))
        print("---------------")


if __name__ == "__main__":
    run_main(main)
