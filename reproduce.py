"""
The paper's study in one command:

    python reproduce.py               # the gpu preset where CUDA is available, else cpu; out/study
    python reproduce.py --preset=cpu  # the laptop study (its times: docs/laptop.md)
    python reproduce.py --preset=gpu --out_dir=out/study_gpu   # minutes on one card
    python reproduce.py --dataset=NAME --max_iters=400   # any prepared dataset, any preset override

Stages, each a run of the project's own scripts, each skipped when its outputs exist for the
same settings (rerun after an interruption and nothing finished is lost; --force redoes all):
  1. prepare the data (the built-in Python standard library corpus needs no download; the
     default preset reads it through a 2048-token BPE vocabulary learned on it)
  2. train the NoPE model and its RoPE twin, both with the start token, and NoPE without it
     (nope_notoken: the paper's bare windows, to show what the token does; the cpu preset leaves
     it out, --notoken=true adds it)                                            (train.py)
  3. grid-search the uniform lambda at 2L, 4L, 8L; fit HeadScale at 2L and 4L,
     and at 4L the paper's two ablations: no clamp, no initialisation  (search_scales.py)
  3b. the RoPE baselines (the cpu preset leaves them out, --rope_baselines=true adds them):
     the best zero-shot factor of PI, NTK-aware and YaRN per length
     (study/rope_grid.py), and PI and YaRN fine-tuned at 4L with HeadScale's budget
     of steps and sequences (train.py --init_from)
  4. evaluate every variant at L..8L (the presets; cpu_long to 16L), plus each model reading
     only its last L positions (evaluate.py; a row's excess over that reference is what the long
     context costs it)
  5. passkey retrieval (presets cpu_long and cpu_char, or --passkey=true; the cpu preset leaves it
     out to save time): both models fine-tuned on text mixed with passkey examples at L, the
     uniform lambda, HeadScale and its ablations fitted on that NoPE at 4L, accuracy over
     length x depth for each (train.py --passkey_frac, search_scales.py, passkey.py)
  5b. with --slopes: lambda that follows the position,
     lam_h(i) = head_scale_h (1 + a_h ln(max(i, L) / L)): nope_logn (Qwen's logn attention,
     a = 1/ln L), nope_slope_grid (one a, the grid's lambda(i) fit at its longest length),
     nope_headslope_4L (a_h fitted at 4L), and HeadScale fitted at 8L (nope_headscale_8L),
     evaluated like every row (the issue's L..16L: add --lengths=1,2,4,8,16).
     Last but one, so adding it to a finished study runs only these stages
  5c. with --modern: NoPE as production models use it since the paper (docs/modern.md): hybrids of
     RoPE and NoPE layers (hybrid; hybrid_swa, its RoPE layers windowed), Llama 4's temperature on
     their NoPE layers (*_llama4), DroPE (RoPE dropped from the RoPE twin: drope_zeroshot, and
     recalibrated at L: drope_short, drope), each with the uniform lambda and HeadScale at 4L
  5d. with --beyond: the two other families of answer to "attend past L", trained as NoPE is:
     ALiBi (alibi; UniformScale's grid on it) and NoPE with Scalable-Softmax (nope_ssmax;
     the uniform lambda and HeadScale on it, its learned s kept), each with its last-L
     reference and, with --passkey, taught retrieval and scored (docs/beyond.md)
  5e. with --beyond2025: 2025's answers, trained as NoPE is (only --family differs): FoX's forget
     gate (fox), the head-wise output gate (nope_gated) and a learned sink (nope_sink), each with
     the uniform lambda and HeadScale at 4L, its last-L reference, the attention entropy and the
     sink share on every row, and with --passkey taught retrieval and scored (docs/beyond2025.md)
  6. write out_dir/report.md: the table, the fitted lambda(i), the passkey table, the plots
A stage's stamp records its command and the measurement protocol (evaluate.PROTOCOL), so a study
finished before the protocol changed is rerun, not reported as new.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

from common import (ROOT, UserError, atomic_write_text, format_seconds, length_name, load_preset,
                    parse_config, read_json, run_main)
from data import Dataset, dataset_dir
from model import GPT, GPTConfig
from study import findings
from study.beyond import FAMILIES_2025
from study.bench import flops_per_token, matmul_rate
from study.plot import ENTROPY_ROWS
from study.stages import Stages, resume_or_restart, run_script
from study.tables import write_all
from train import TrainConfig


@dataclass
class StudyConfig:
    dataset: str = ""                   # a prepared dataset ('' = the preset's)
                                        # pystdlib and pystdlib_bpeN are prepared automatically
    out_dir: str = "out/study"          # everything goes here
    preset: str = "auto"                # config/NAME.py (cpu, gpu, tiny, ...), or auto
                                        # (gpu where CUDA is available, else cpu)
    force: bool = False                 # redo every stage even if its outputs exist
    device: str = "auto"                # auto | cpu | cuda | mps, passed to each script if not auto
                                        # (the gpu preset without CUDA runs only with --device=cpu)
    # overrides of the preset's training settings (0 = the preset's value)
    block_size: int = 0                 # training length L
    max_iters: int = 0                  # training steps
    n_layer: int = 0                    # layers
    n_head: int = 0                     # heads
    n_embd: int = 0                     # width
    batch_size: int = 0                 # training batch
    learning_rate: float = 0.0          # peak learning rate
    seed: int = 0                       # training seed (0 = the preset's)
    train_args: list[str] = field(default_factory=list)  # more train.py settings, KEY=VALUE,...
                                        # for the three models (e.g. beta2=0.95,weight_decay=0)
    # the study
    grid_lengths: list[float] = field(  # UniformScale targets (units of L)
        default_factory=lambda: [2.0, 4.0, 8.0])
    fit_lengths: list[float] = field(default_factory=lambda: [2.0, 4.0])  # HeadScale targets
    ablation_length: float = 4.0        # where the no-clamp and no-init ablations are fitted
    lengths: list[float] = field(       # evaluation lengths (units of L)
        default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    windows: int = 0                    # evaluation windows per length (0 = the scripts' default)
    fit_steps: int = 0                  # HeadScale steps (0 = the preset's, else 200)
    notoken: bool = True                # also train and evaluate nope_notoken (no start token)
    rope_baselines: bool = True         # RoPE with PI, NTK-aware, YaRN: zero-shot, fine-tuned rows
    finetune_length: float = 4.0        # fine-tuned PI and YaRN: trained at this length, units of L
    finetune_lr: float = 2e-4           # their learning rate (all weights, HeadScale's budget)
    # passkey retrieval (stage 5): both models fine-tuned on text + passkey examples, then remedies
    passkey: bool = True                # run the passkey stage (the cpu preset sets it false)
    passkey_steps: int = 600            # fine-tuning steps, batch 32 at L
    passkey_frac: float = 0.5           # share of each batch that is passkey examples
    passkey_lr: float = 1e-3            # their peak learning rate
    passkey_lengths: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])  # units of L
    passkey_keys: int = 5               # keys per (length, depth) cell; 10 depths
    # length-following lambda (stage 5b): lam_h(i) = head_scale_h * (1 + a_h ln(max(i, L) / L))
    slopes: bool = False                # add nope_logn, nope_slope_grid, nope_headslope_4L
                                        # and nope_headscale_8L
    slopes_length: float = 4.0          # where the slopes a_h are fitted
                                        # (from the grid's lambda(i) fit there)
    slopes_fit_lengths: list[float] = field(  # HeadScale also fitted here, with --slopes only
        default_factory=lambda: [8.0])        # (from the grid's best lambda there)
    # NoPE since the paper (stage 5c, docs/modern.md): hybrid RoPE/NoPE layers and DroPE
    modern: bool = False                # add the hybrid, hybrid_swa, drope* rows and their remedies
    nope_every: int = 4                 # hybrids: every k-th layer NoPE, the others RoPE
                                        # (Llama 4, SmolLM3)
    modern_window: float = 0.25         # hybrid_swa: RoPE layers' sliding window, units of L (<= 1)
    llama4_scale: float = 0.1           # Llama 4's attn_scale of its NoPE-layer temperature
                                        # (floor scale L)
    drope_steps: int = 400              # DroPE's larger recalibration at L: steps of batch 32
                                        # (half the cpu preset's training tokens); the short one
                                        # has HeadScale's budget
    drope_lr: float = 1e-3              # DroPE recalibration's peak learning rate (all weights)
    # beyond the paper (stage 5d, docs/beyond.md): ALiBi and Scalable-Softmax trained beside NoPE
    beyond: bool = False                # add alibi, nope_ssmax, their remedies at
                                        # ablation_length and their last-L references
    # 2025's answers (stage 5e, docs/beyond2025.md): a forget gate, an output gate, a learned sink
    beyond2025: bool = False            # add fox, nope_gated, nope_sink, their uniform lambda and
                                        # HeadScale at ablation_length and last-L references


def entropy_args(rows):
    """evaluate.py's attention entropy only for the rows (NAME=PATH) a figure draws: each costs an
    explicit-softmax pass at the longest length."""
    names = [m.split("=")[0] for m in rows if m.split("=")[0] in ENTROPY_ROWS]
    return [f"--entropy_rows={','.join(names)}"] if names else ["--entropy=false"]


def auto_preset():
    """--preset=auto: the study the machine can run. Returns (preset, the line that says why)."""
    if torch.cuda.is_available():
        return "gpu", (f"preset gpu: CUDA is available ({torch.cuda.get_device_name()}); "
                       "--preset=cpu runs the laptop study instead")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "cpu", ("preset cpu: no CUDA card; Apple's MPS runs the cpu preset (not measured "
                       "in this repository: compare with --device=cpu timings of your own)")
    return "cpu", "preset cpu: no CUDA card here (--preset=gpu needs one)"


def choose_preset(argv):
    """An explicit --preset=NAME wins; none, or --preset=auto, picks by auto_preset(). Returns the
    arguments with one --preset=NAME, and the line that says why (None when given)."""
    given = [a.partition("=")[2] for a in argv if a.split("=")[0] == "--preset"]
    preset, why = given[-1] if given else "auto", None
    if not preset:
        raise UserError("--preset needs a name: --preset=NAME (cpu, gpu, tiny, ...) "
                        "or --preset=auto")
    if preset == "auto":
        preset, why = auto_preset()
    return [f"--preset={preset}", *[a for a in argv if a.split("=")[0] != "--preset"]], why


def main():
    # the preset's own `reproduce` section applies too
    argv, why = choose_preset(sys.argv[1:])
    cfg = parse_config(StudyConfig, argv, section="reproduce", description=__doc__)
    if why:
        print(why, flush=True)
    check(cfg)
    t_start = time.time()
    study = Study(cfg)
    prepare_data(cfg)               # 1. the data (the built-in corpus is prepared the first time)
    train_models(study)             # 2. NoPE, its RoPE twin (and NoPE without the start token)
    nope_remedies(study)            # 3. UniformScale grid, HeadScale fits, the two ablations
    if cfg.rope_baselines:
        rope_baselines(study)       # 3b. PI, NTK-aware, YaRN: zero-shot and fine-tuned
    evaluate_rows(study)            # 4. every row on the same windows, and the last-L references
    if cfg.passkey:
        passkey_rows(study)         # 5. passkey retrieval
    if cfg.slopes:
        slope_rows(study)           # 5b. lambda that follows the position
    if cfg.modern:
        modern_rows(study)          # 5c. NoPE as production models use it since the paper
    if cfg.beyond:
        beyond_rows(study)          # 5d. ALiBi and Scalable-Softmax trained beside NoPE
    if cfg.beyond2025:
        beyond2025_rows(study)      # 5e. FoX, the output gate and a learned sink beside NoPE
    # 6. the tables and figures, from the saved files (cheap: always redrawn), and the report
    write_all(study.ev)
    plot = ["study/plot.py", f"--study={study.out}"]
    if (code := run_script(plot)) != 0:  # a fork, as the stages are, where they are
        raise subprocess.CalledProcessError(code, plot)
    write_report(cfg, study.out, study.L, study.stages.seconds, time.time() - t_start)


def check(cfg):
    """Every input that a later stage would refuse, refused before any work."""
    if cfg.device not in ("auto", "cpu", "cuda", "mps"):
        raise UserError(f"--device must be auto, cpu, cuda or mps, got {cfg.device!r}")
    if cfg.preset == "gpu" and cfg.device == "auto":
        if not torch.cuda.is_available():
            raise UserError("the gpu preset needs a CUDA card and none is here: its trainings "
                            f"alone would take {gpu_preset_estimate(cfg)} on this machine (an "
                            "estimate from its matmul rate); --preset=cpu runs the laptop study, "
                            "--device=cpu runs this one anyway")
    if cfg.slopes:
        missing = [k for k in [cfg.slopes_length, *cfg.slopes_fit_lengths]
                   if k not in cfg.grid_lengths]
        if missing:
            raise UserError(f"--slopes fits at {', '.join(length_name(k) for k in missing)} from "
                            f"the grid there: add {','.join(f'{k:g}' for k in missing)} to "
                            f"--grid_lengths (now {','.join(f'{k:g}' for k in cfg.grid_lengths)})")
    if cfg.modern:
        n_layer = (cfg.n_layer
                   or load_preset(cfg.preset, "train").get("n_layer", GPTConfig.n_layer))
        if not 1 <= cfg.nope_every <= n_layer:
            raise UserError(f"--modern's hybrids make every k-th of the {n_layer} layers NoPE: "
                            f"--nope_every must be 1..{n_layer}, got {cfg.nope_every}")
        if not 0 < cfg.modern_window <= 1:
            raise UserError("--modern_window is the RoPE layers' window in units of L, "
                            f"0 < it <= 1; got {cfg.modern_window}")
    for a in cfg.train_args:
        if "=" not in a or a.startswith("-"):
            raise UserError(f"--train_args takes KEY=VALUE pairs of train.py settings, got {a!r}")


def gpu_preset_estimate(cfg):
    """Roughly how long the gpu preset's trainings take on this machine's CPU: their FLOPs
    (study.bench.flops_per_token) over the rate of a float32 matmul measured here (study/bench.py).
    A lower bound: a model never runs at its matmul rate."""
    t = load_preset("gpu", "train")
    keys = ("n_layer", "n_head", "n_embd", "block_size")
    model = GPT(GPTConfig(**{k: getattr(cfg, k) or t[k] for k in keys}, vocab_size=256))
    L = model.config.block_size
    tokens = (cfg.max_iters or t["max_iters"]) * (cfg.batch_size or t["batch_size"]) * L
    models = 2 + cfg.notoken  # NoPE, its RoPE twin, NoPE without the start token
    rate = matmul_rate("cpu", 1024, "float32")  # FLOP/s
    return format_seconds(models * tokens * flops_per_token(model, L) / rate)


def lengths(xs):
    return ",".join(f"{x:g}" for x in xs)


class Study:
    """One study folder: its paths, its stages, and the arguments several stages share."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.out = cfg.out_dir = os.path.abspath(cfg.out_dir)
        os.makedirs(self.out, exist_ok=True)
        self.stages = Stages(self.out, cfg.force, cfg.device)
        cfg.dataset = cfg.dataset or load_preset(cfg.preset, "train").get("dataset", "pystdlib")
        # the training settings given to reproduce.py, passed on to every model trained from scratch
        self.overrides = [f"--{k}={getattr(cfg, k)}"
                          for k in ("block_size", "max_iters", "n_layer", "n_head", "n_embd",
                                    "batch_size", "learning_rate", "seed")
                          if getattr(cfg, k)]
        self.overrides += [f"--{a}" for a in cfg.train_args]  # train.py checks the keys and values
        self.scales = self.path("scales")  # the NoPE model's grid and fits
        self.search = [f"--ckpt={self.ckpt('nope')}", f"--out_dir={self.scales}",
                       f"--preset={cfg.preset}"]
        self.search += [f"--steps={cfg.fit_steps}"] if cfg.fit_steps else []
        self.search += [f"--windows={cfg.windows}"] if cfg.windows else []
        self.ev = self.path("eval")
        self.evaluate = [f"--out_dir={self.ev}", f"--lengths={lengths(cfg.lengths)}",
                         f"--preset={cfg.preset}"]
        self.evaluate += [f"--windows={cfg.windows}"] if cfg.windows else []
        self.ab = length_name(cfg.ablation_length)  # "4L": where the ablations are fitted
        self.L = None  # the training length, read from the NoPE model once trained

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def ckpt(self, run):
        return self.path(run, "ckpt.pt")

    def train(self, stage, args, outputs, resume_dir=None):
        """A train.py stage at the study's preset and dataset. resume_dir: a training from scratch
        there, continued (--resume) after an interruption."""
        self.stages.run(stage, ["train.py", f"--preset={self.cfg.preset}",
                                f"--dataset={self.cfg.dataset}", *args],
                        outputs,
                        resume_or_restart(resume_dir, self.cfg.force) if resume_dir else None)


def prepare_data(cfg):
    if (dataset_dir(cfg.dataset) / "meta.json").exists():
        return
    builtin = re.fullmatch(r"pystdlib(?:_bpe(\d+))?", cfg.dataset)  # built-in corpus, char or BPE
    if not builtin:
        Dataset(cfg.dataset, bos=True)  # not prepared: raises, saying what to do
    bpe = ["--tokenizer=bpe", f"--vocab_size={builtin.group(1)}"] if builtin.group(1) else []
    subprocess.run([sys.executable, str(ROOT / "data" / "pystdlib" / "prepare.py"), *bpe],
                   cwd=ROOT, check=True)


def train_models(study):
    cfg = study.cfg
    preset = load_preset(cfg.preset, "train")
    defaults = {"max_iters": TrainConfig.max_iters, "batch_size": TrainConfig.batch_size,
                "block_size": GPTConfig.block_size}
    steps, batch, T = (getattr(cfg, k) or preset.get(k, defaults[k])
                       for k in ("max_iters", "batch_size", "block_size"))
    text = len(Dataset(cfg.dataset).tokens["train"])
    print(f"each model reads {steps * batch * T / text:.3g} passes over the {text:,} training "
          f"tokens of {cfg.dataset} (train.py warns if one memorises them)", flush=True)
    runs = ([("nope", "nope", True), ("rope", "rope", True)]
            + ([("nope_notoken", "nope", False)] if cfg.notoken else []))
    for run, pe, bos in runs:
        run_dir = study.path(run)
        study.train(f"train_{run}", [f"--pos_encoding={pe}", f"--bos={str(bos).lower()}",
                                     f"--out_dir={run_dir}", *study.overrides],
                    [os.path.join(run_dir, "summary.json")], resume_dir=run_dir)
    study.L = read_json(study.path("nope", "summary.json"))["train_len"]


def nope_remedies(study):
    """UniformScale's grid at grid_lengths and HeadScale at fit_lengths, then at ablation_length the
    paper's two ablations: no clamp, no initialisation."""
    cfg, scales = study.cfg, study.scales
    study.stages.run("search", ["search_scales.py", *study.search,
                                f"--lengths={lengths(cfg.grid_lengths)}",
                                f"--fit_lengths={lengths(cfg.fit_lengths)}"],
                     [os.path.join(scales, "uniform.json")]
                     + [os.path.join(scales, f"head_{length_name(k)}.pt") for k in cfg.fit_lengths])
    for tag, extra in (("_noclamp", ["--min_scale=0"]), ("_noinit", ["--init=1"])):
        study.stages.run(f"ablation{tag}", ["search_scales.py", *study.search, "--grid=false",
                                            f"--fit_lengths={cfg.ablation_length:g}",
                                            f"--tag={tag}", *extra],
                         [os.path.join(scales, f"head_{study.ab}{tag}.pt")])


def rope_baselines(study):
    """The best zero-shot factor per length, and PI / YaRN fine-tuned with HeadScale's budget (its
    steps and sequences, at its length) but all weights trained."""
    cfg, L, rope = study.cfg, study.L, study.ckpt("rope")
    rope_scales, ft = study.path("scales_rope"), length_name(cfg.finetune_length)
    study.stages.run("rope_grid", ["study/rope_grid.py", f"--ckpt={rope}",
                                   f"--out_dir={rope_scales}", f"--preset={cfg.preset}",
                                   # the evaluated lengths past L
                                   f"--lengths={lengths([k for k in cfg.lengths if k > 1])}"]
                     + ([f"--windows={cfg.windows}"] if cfg.windows else []),
                     [os.path.join(rope_scales, "rope_factors.json")])
    search_preset = load_preset(cfg.preset, "search_scales")
    steps, batch = (cfg.fit_steps or search_preset.get("steps", 200),
                    search_preset.get("fit_batch_size", 4))
    for method in ("pi", "yarn"):
        run_dir = study.path(f"rope_{method}_ft_{ft}")
        study.train(f"rope_{method}_ft", [
            f"--init_from={rope}", f"--out_dir={run_dir}",
            f"--block_size={int(cfg.finetune_length * L)}", "--family=rope_scaled",
            f"--rope_scaling={method}",
            f"--rope_factor={cfg.finetune_length:g}", f"--max_iters={steps}",
            f"--batch_size={batch}", f"--learning_rate={cfg.finetune_lr:g}",
            f"--min_lr={cfg.finetune_lr / 10:g}",
            f"--warmup_iters={max(1, steps // 10)}", f"--eval_interval={steps}", "--overwrite"],
            [os.path.join(run_dir, "summary.json")])


def evaluate_rows(study):
    """Every row on the same windows at every length, then each model reading only its last L."""
    cfg, L, scales, out, ev = study.cfg, study.L, study.scales, study.out, study.ev
    # evaluate.py's NAME=PATH
    named = lambda name, *path: f"{name}={os.path.join(*path)}"  # noqa: E731
    methods = [named("nope", study.ckpt("nope")), named("rope", study.ckpt("rope"))]
    methods += [named("nope_notoken", study.ckpt("nope_notoken"))] if cfg.notoken else []
    methods += [named(f"nope_uniform_{length_name(k)}", scales, f"uniform_grid_{length_name(k)}.pt")
                for k in cfg.grid_lengths]
    methods += [named(f"nope_headscale_{length_name(k)}", scales, f"head_{length_name(k)}.pt")
                for k in cfg.fit_lengths]
    methods += [named(f"nope_headscale_{study.ab}{tag}", scales, f"head_{study.ab}{tag}.pt")
                for tag in ("_noclamp", "_noinit")]
    ft = length_name(cfg.finetune_length)
    methods += ([named(f"rope_{m}_ft_{ft}", study.ckpt(f"rope_{m}_ft_{ft}"))
                 for m in ("pi", "yarn")] if cfg.rope_baselines else [])

    def fresh_eval(done, cmd):  # results.json merges by method: start it afresh
        shutil.rmtree(ev, ignore_errors=True)
        return cmd
    results = [os.path.join(ev, "results.json")]
    study.stages.run("evaluate", ["evaluate.py", f"--ckpts={','.join(methods)}",
                                  *entropy_args(methods), *study.evaluate], results, fresh_eval)
    if cfg.rope_baselines:
        for m in ("pi", "ntk", "yarn"):
            study.stages.run(f"evaluate_rope_{m}", [
                "evaluate.py", f"--ckpts=rope_{m}_zeroshot={study.ckpt('rope')}",
                f"--rope_scaling={m}",
                f"--rope_factors={os.path.join(out, 'scales_rope', 'rope_factors.json')}",
                "--samples=false", "--entropy=false", *study.evaluate], results)
    window = f"nope_window_L={study.ckpt('nope')},rope_window_L={study.ckpt('rope')}"
    window += f",nope_notoken_window_L={study.ckpt('nope_notoken')}" if cfg.notoken else ""
    study.stages.run("evaluate_window", ["evaluate.py", f"--ckpts={window}", f"--context={L}",
                                         "--samples=false", "--entropy=false", *study.evaluate],
                     results)


def passkey_finetune(study, run):
    """OUT/passkey/run: the model OUT/run fine-tuned at L on text mixed with passkey examples."""
    cfg, pk = study.cfg, study.path("passkey")
    study.train(f"passkey_train_{run}", [
        f"--init_from={study.ckpt(run)}", f"--out_dir={os.path.join(pk, run)}",
        f"--block_size={study.L}", f"--passkey_frac={cfg.passkey_frac:g}", "--batch_size=32",
        f"--max_iters={cfg.passkey_steps}", f"--learning_rate={cfg.passkey_lr:g}",
        f"--min_lr={cfg.passkey_lr / 10:g}", f"--warmup_iters={max(1, cfg.passkey_steps // 10)}",
        f"--eval_interval={cfg.passkey_steps}", "--overwrite"],
        [os.path.join(pk, run, "summary.json")])


def passkey_rows(study):
    """The models learn retrieval by fine-tuning on text mixed with passkey examples at L; then, as
    in the paper, the NoPE remedies are fitted on the LM loss alone (uniform grid and HeadScale with
    its two ablations, at ablation_length) and every variant is tested on the same prompts."""
    cfg, L, ab = study.cfg, study.L, study.ab
    need = Dataset(cfg.dataset, bos=True).passkey().shortest()
    if L < need:
        print(f"[passkey] skipped: L = {L} is shorter than a passkey example ({need} tokens); "
              f"use --block_size={need} or more to run it")
        return
    pk = study.path("passkey")
    for pe in ("nope", "rope"):
        passkey_finetune(study, pe)
    pk_nope, pk_scales = os.path.join(pk, "nope", "ckpt.pt"), os.path.join(pk, "scales")
    pk_common = [f"--ckpt={pk_nope}", f"--out_dir={pk_scales}", f"--preset={cfg.preset}"]
    pk_common += [f"--steps={cfg.fit_steps}"] if cfg.fit_steps else []
    study.stages.run("passkey_search", ["search_scales.py", *pk_common,
                                        f"--lengths={cfg.ablation_length:g}",
                                        f"--fit_lengths={cfg.ablation_length:g}"],
                     [os.path.join(pk_scales, f"head_{ab}.pt")])
    for tag, extra in (("_noclamp", ["--min_scale=0"]), ("_noinit", ["--init=1"])):
        study.stages.run(f"passkey_ablation{tag}", ["search_scales.py", *pk_common, "--grid=false",
                                                    f"--fit_lengths={cfg.ablation_length:g}",
                                                    f"--tag={tag}", *extra],
                         [os.path.join(pk_scales, f"head_{ab}{tag}.pt")])
    pk_methods = [f"nope={pk_nope}", f"rope={os.path.join(pk, 'rope', 'ckpt.pt')}",
                  f"nope_uniform_{ab}={os.path.join(pk_scales, f'uniform_grid_{ab}.pt')}"]
    pk_methods += [f"nope_headscale_{ab}{tag}={os.path.join(pk_scales, f'head_{ab}{tag}.pt')}"
                   for tag in ("", "_noclamp", "_noinit")]
    study.stages.run("passkey_eval", [
        "study/passkey.py", f"--ckpts={','.join(pk_methods)}", f"--out_dir={pk}",
        f"--lengths={lengths(cfg.passkey_lengths)}", f"--keys={cfg.passkey_keys}",
        f"--avg_up_to={max(cfg.passkey_lengths):g}", "--plots=false"],  # step 6 draws them
        [os.path.join(pk, "passkey.json")])


def slope_rows(study):
    """Slopes set (Qwen's logn, the grid's a) and fitted, and HeadScale at the longer lengths, to
    compare what holds past the length a fit was made at."""
    cfg, scales = study.cfg, study.scales
    lg = length_name(cfg.slopes_length)
    # the lengths not fitted already (nope_remedies fits HeadScale at fit_lengths)
    more = [k for k in cfg.slopes_fit_lengths if k not in cfg.fit_lengths]
    if more:
        study.stages.run("search_slopes_headscale", [
            "search_scales.py", *study.search, "--grid=false", f"--fit_lengths={lengths(more)}"],
            [os.path.join(scales, f"head_{length_name(k)}.pt") for k in more])
    study.stages.run("search_slopes", [
        "search_scales.py", *study.search, "--grid=false", "--fit=slope",
        f"--fit_lengths={cfg.slopes_length:g}"], [os.path.join(scales, f"headslope_{lg}.pt")])
    study.stages.run("set_slopes", ["study/set_slope.py", f"--ckpt={study.ckpt('nope')}",
                                    f"--out_dir={scales}", "--values=logn,grid"],
                     [os.path.join(scales, f) for f in ("slope_logn.pt", "slope_grid.pt")])
    log_methods = [f"nope_logn={os.path.join(scales, 'slope_logn.pt')}",
                   f"nope_slope_grid={os.path.join(scales, 'slope_grid.pt')}",
                   f"nope_headslope_{lg}={os.path.join(scales, f'headslope_{lg}.pt')}"]
    log_methods += [f"nope_headscale_{length_name(k)}="
                    f"{os.path.join(scales, f'head_{length_name(k)}.pt')}" for k in more]
    study.stages.run("evaluate_slopes", ["evaluate.py", f"--ckpts={','.join(log_methods)}",
                                         "--samples=false", *entropy_args(log_methods),
                                         *study.evaluate],
                     [os.path.join(study.ev, "results.json")])


def modern_rows(study):
    """Hybrid RoPE/NoPE layers (Llama 4, SmolLM3, Cohere's RNoPE-SWA) and DroPE (RoPE dropped after
    training), trained, fitted and evaluated like every row. A hybrid's lambda and Llama 4's
    temperature act on its NoPE layers alone; each model's reference is itself reading its last
    L."""
    cfg, L, ab, out = study.cfg, study.L, study.ab, study.out
    join, rope = os.path.join, study.ckpt("rope")
    steps = cfg.fit_steps or load_preset(cfg.preset, "search_scales").get("steps", 200)
    window = max(1, int(cfg.modern_window * L))
    models = {"hybrid": [f"--nope_every={cfg.nope_every}"],
              "hybrid_swa": [f"--nope_every={cfg.nope_every}", f"--rope_window={window}"]}
    for name, extra in models.items():  # trained from scratch as the NoPE and RoPE twins are
        run_dir = study.path(name)
        study.train(f"train_{name}", ["--family=hybrid", "--pos_encoding=rope", "--bos=true",
                                      *extra,
                                      f"--out_dir={run_dir}", *study.overrides],
                    [join(run_dir, "summary.json")], resume_dir=run_dir)
    # DroPE: the RoPE twin without RoPE, as is (no step), then recalibrated at L with the text of
    # HeadScale's budget (its steps, its sequences' tokens) and with a larger budget (drope)
    batch = int(load_preset(cfg.preset, "search_scales").get("fit_batch_size", 4)
                * cfg.ablation_length)
    drope = {"drope_zeroshot": (0, batch), "drope_short": (steps, batch),
             "drope": (cfg.drope_steps, 32)}
    for name, (n_steps, b) in drope.items():
        study.train(f"train_{name}", [
            f"--init_from={rope}", "--pos_encoding=nope", f"--out_dir={join(out, name)}",
            f"--block_size={L}", f"--max_iters={n_steps}", f"--batch_size={b}",
            f"--learning_rate={cfg.drope_lr:g}", f"--min_lr={cfg.drope_lr / 10:g}",
            f"--warmup_iters={max(1, n_steps // 10)}", f"--eval_interval={max(1, n_steps)}",
            "--overwrite"], [join(out, name, "summary.json")])
    # Llama 4's temperature on the hybrids' NoPE layers: a setting, no training (converted, 0 steps)
    for name in models:
        run_dir = join(out, f"{name}_llama4")
        study.train(f"convert_{name}_llama4", [
            f"--init_from={study.ckpt(name)}", f"--nope_temp={cfg.llama4_scale:g}", "--max_iters=0",
            f"--block_size={L}", f"--out_dir={run_dir}", "--overwrite"],
            [join(run_dir, "summary.json")])
    # the paper's remedies on the NoPE layers of each hybrid, and on DroPE
    rows = [f"{n}={study.ckpt(n)}" for n in [*models, *drope, *(f"{m}_llama4" for m in models)]]
    for name in [*models, "drope"]:
        sc = join(out, f"scales_{name}")
        study.stages.run(f"search_{name}", ["search_scales.py", f"--ckpt={study.ckpt(name)}",
                                            f"--out_dir={sc}", f"--preset={cfg.preset}",
                                            f"--lengths={cfg.ablation_length:g}",
                                            f"--fit_lengths={cfg.ablation_length:g}"]
                         + ([f"--steps={cfg.fit_steps}"] if cfg.fit_steps else [])
                         + ([f"--windows={cfg.windows}"] if cfg.windows else []),
                         [join(sc, f"head_{ab}.pt")])
        rows += [f"{name}_uniform_{ab}={join(sc, f'uniform_grid_{ab}.pt')}",
                 f"{name}_headscale_{ab}={join(sc, f'head_{ab}.pt')}"]
    results = [join(study.ev, "results.json")]
    study.stages.run("evaluate_modern", ["evaluate.py", f"--ckpts={','.join(rows)}",
                                         "--samples=false", *entropy_args(rows), *study.evaluate],
                     results)
    refs = [f"{n}_window_L={study.ckpt(n)}" for n in [*models, *drope]]
    study.stages.run("evaluate_modern_window", ["evaluate.py", f"--ckpts={','.join(refs)}",
                                                f"--context={L}", "--samples=false",
                                                "--entropy=false", *study.evaluate], results)
    if cfg.passkey:  # retrieval: loss alone flatters a row that ignores distant text
        modern_passkey(study, [*models, "drope"])


def modern_passkey(study, names):
    """The hybrids and DroPE taught passkey retrieval as NoPE and RoPE are (passkey_rows), then
    scored on the same prompts, into the same passkey folder."""
    cfg, L = study.cfg, study.L
    if L < Dataset(cfg.dataset, bos=True).passkey().shortest():
        return  # passkey_rows said why
    pk = study.path("passkey")
    for name in names:
        passkey_finetune(study, name)
    rows = [f"{n}={os.path.join(pk, n, 'ckpt.pt')}" for n in names]
    study.stages.run("passkey_eval_modern", [
        "study/passkey.py", f"--ckpts={','.join(rows)}", f"--out_dir={pk}",
        f"--lengths={lengths(cfg.passkey_lengths)}", f"--keys={cfg.passkey_keys}",
        f"--avg_up_to={max(cfg.passkey_lengths):g}", "--plots=false"],  # step 6 draws them
        [os.path.join(pk, "passkey.json")])


def beyond_rows(study):
    """ALiBi and NoPE with Scalable-Softmax, trained from scratch as the NoPE and RoPE twins are;
    the paper's remedies where they apply, at ablation_length: the uniform lambda on both (on
    ALiBi it scales q.k, its bias stays as trained), HeadScale on nope_ssmax (only lambda is
    fitted, s stays as trained); each model's reference is itself reading its last L."""
    cfg, ab, join = study.cfg, study.ab, os.path.join
    models = {"alibi": ["--family=alibi", "--pos_encoding=alibi"], "nope_ssmax": ["--family=ssmax"]}
    rows = []
    for name, extra in models.items():
        run_dir = study.path(name)
        study.train(f"train_{name}", ["--bos=true", *extra, f"--out_dir={run_dir}",
                                      *study.overrides],
                    [join(run_dir, "summary.json")], resume_dir=run_dir)
        sc, fit = study.path(f"scales_{name}"), name == "nope_ssmax"
        fits = [join(sc, f"head_{ab}.pt")] if fit else []
        study.stages.run(f"search_{name}", [
            "search_scales.py", f"--ckpt={study.ckpt(name)}", f"--out_dir={sc}",
            f"--preset={cfg.preset}", f"--lengths={cfg.ablation_length:g}",
            f"--fit_lengths={cfg.ablation_length:g}" if fit else "--fit_lengths="]
            + ([f"--steps={cfg.fit_steps}"] if cfg.fit_steps else [])
            + ([f"--windows={cfg.windows}"] if cfg.windows else []),
            [join(sc, f"uniform_grid_{ab}.pt"), *fits])
        rows += [f"{name}={study.ckpt(name)}",
                 f"{name}_uniform_{ab}={join(sc, f'uniform_grid_{ab}.pt')}"]
        rows += [f"{name}_headscale_{ab}={fits[0]}"] if fit else []
    results = [join(study.ev, "results.json")]
    study.stages.run("evaluate_beyond", ["evaluate.py", f"--ckpts={','.join(rows)}",
                                         "--samples=false", *entropy_args(rows), *study.evaluate],
                     results)
    refs = [f"{n}_window_L={study.ckpt(n)}" for n in models]
    study.stages.run("evaluate_beyond_window", ["evaluate.py", f"--ckpts={','.join(refs)}",
                                                f"--context={study.L}", "--samples=false",
                                                "--entropy=false", *study.evaluate], results)
    if cfg.passkey:
        beyond_passkey(study, list(models))


def beyond_passkey(study, names):
    """ALiBi and nope_ssmax taught passkey retrieval as NoPE and RoPE are (passkey_rows); HeadScale
    fitted on the LM loss of the taught nope_ssmax, as on the taught NoPE; scored on the same
    prompts, into the same passkey folder."""
    cfg, ab, join = study.cfg, study.ab, os.path.join
    if study.L < Dataset(cfg.dataset, bos=True).passkey().shortest():
        return  # passkey_rows said why
    pk = study.path("passkey")
    for name in names:
        passkey_finetune(study, name)
    sc = join(pk, "scales_nope_ssmax")
    study.stages.run("passkey_search_nope_ssmax", [
        "search_scales.py", f"--ckpt={join(pk, 'nope_ssmax', 'ckpt.pt')}", f"--out_dir={sc}",
        f"--preset={cfg.preset}", f"--lengths={cfg.ablation_length:g}",
        f"--fit_lengths={cfg.ablation_length:g}"]
        + ([f"--steps={cfg.fit_steps}"] if cfg.fit_steps else []), [join(sc, f"head_{ab}.pt")])
    rows = [f"{n}={join(pk, n, 'ckpt.pt')}" for n in names]
    rows += [f"nope_ssmax_headscale_{ab}={join(sc, f'head_{ab}.pt')}"]
    study.stages.run("passkey_eval_beyond", [
        "study/passkey.py", f"--ckpts={','.join(rows)}", f"--out_dir={pk}",
        f"--lengths={lengths(cfg.passkey_lengths)}", f"--keys={cfg.passkey_keys}",
        f"--avg_up_to={max(cfg.passkey_lengths):g}", "--plots=false"],  # step 6 draws them
        [join(pk, "passkey.json")])


def beyond2025_rows(study):
    """FoX (NoPE with the forget gate), NoPE with the head-wise output gate and NoPE with a learned
    sink, trained from scratch as NoPE is: the same text, recipe, steps and seed, only --family
    differs. On each, the uniform lambda's grid and HeadScale at ablation_length: lambda scales
    q.k alone, FoX's decay, the gate and the sink logit stay as trained (families.py). Each
    model's reference is itself reading its last L. Every row, the references too, measures the
    attention entropy and the sink share at the longest length."""
    cfg, ab, join = study.cfg, study.ab, os.path.join
    rows, refs = [], []
    for name in FAMILIES_2025:
        run_dir = study.path(name)
        study.train(f"train_{name}", ["--bos=true", f"--family={name}", f"--out_dir={run_dir}",
                                      *study.overrides],
                    [join(run_dir, "summary.json")], resume_dir=run_dir)
        sc = study.path(f"scales_{name}")
        study.stages.run(f"search_{name}", [
            "search_scales.py", f"--ckpt={study.ckpt(name)}", f"--out_dir={sc}",
            f"--preset={cfg.preset}", f"--lengths={cfg.ablation_length:g}",
            f"--fit_lengths={cfg.ablation_length:g}"]
            + ([f"--steps={cfg.fit_steps}"] if cfg.fit_steps else [])
            + ([f"--windows={cfg.windows}"] if cfg.windows else []),
            [join(sc, f"uniform_grid_{ab}.pt"), join(sc, f"head_{ab}.pt")])
        rows += [f"{name}={study.ckpt(name)}",
                 f"{name}_uniform_{ab}={join(sc, f'uniform_grid_{ab}.pt')}",
                 f"{name}_headscale_{ab}={join(sc, f'head_{ab}.pt')}"]
        refs.append(f"{name}_window_L={study.ckpt(name)}")
    results = [join(study.ev, "results.json")]  # entropy (and sink share) on every row
    study.stages.run("evaluate_beyond2025", ["evaluate.py", f"--ckpts={','.join(rows)}",
                                             "--samples=false", *study.evaluate], results)
    study.stages.run("evaluate_beyond2025_window", ["evaluate.py", f"--ckpts={','.join(refs)}",
                                                    f"--context={study.L}", "--samples=false",
                                                    *study.evaluate], results)
    if cfg.passkey and study.L >= Dataset(cfg.dataset, bos=True).passkey().shortest():
        pk = study.path("passkey")  # (passkey_rows said why not, where L is too short)
        for name in FAMILIES_2025:
            passkey_finetune(study, name)
        taught = [f"{n}={join(pk, n, 'ckpt.pt')}" for n in FAMILIES_2025]
        study.stages.run("passkey_eval_beyond2025", [
            "study/passkey.py", f"--ckpts={','.join(taught)}",
            f"--out_dir={pk}", f"--lengths={lengths(cfg.passkey_lengths)}",
            f"--keys={cfg.passkey_keys}", f"--avg_up_to={max(cfg.passkey_lengths):g}",
            "--plots=false"],  # step 6 draws them
            [join(pk, "passkey.json")])


def write_report(cfg, out, L, times, wall):
    """out_dir/report.md, printed too: the study's results read back from its files, one section
    after the other."""
    ev, scales = os.path.join(out, "eval"), os.path.join(out, "scales")
    uni = read_json(os.path.join(scales, "uniform.json"))
    tr = {pe: read_json(os.path.join(out, pe, "summary.json"))
          for pe in ("nope", "rope", "nope_notoken") if pe != "nope_notoken" or cfg.notoken}
    lines = report_head(cfg, out, L, tr)
    lines += uniform_section(uni)
    lines += headscale_section(scales)
    lines += fitted_numbers_section(cfg, scales, tr["nope"]["params"])
    lines += rope_factors_section(cfg, out)
    lines += slopes_section(cfg, scales)
    lines += passkey_section(cfg, out)
    lines += beyond_section(cfg, out)
    lines += beyond2025_section(cfg, out)
    lines += findings_section(out)
    lines += ["", "Plots: " + ", ".join(f"[{p}](eval/{p})" for p in sorted(os.listdir(ev))
                                        if p.endswith(".png")),
              "", "Samples: [eval/samples.md](eval/samples.md)", "",
              "Stage times: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in times.items()),
              f"(this run: {format_seconds(wall)}; stages skipped as done count their original "
              "time)."]
    path = os.path.join(out, "report.md")
    atomic_write_text(path, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {path}")


def report_head(cfg, out, L, tr):
    """The report's opening, what a reader sees first: the headline findings, the hero figure,
    the trained models (tr: their summaries) and evaluate.py's table."""
    notoken = (f"; NoPE without the start token: {tr['nope_notoken']['final_val_loss']:.4f}"
               if "nope_notoken" in tr else "")
    nope, rope = tr["nope"], tr["rope"]
    return [f"# nanoNoPE study: {cfg.dataset}, preset {cfg.preset}, L = {L}", "",
            *[f"- {s}" for s in findings.headline(out)], "",
            "![where NoPE breaks, why, and how far each remedy carries it](eval/hero.png)", "",
            f"Validation loss at L (train.py's monitor): NoPE {nope['final_val_loss']:.4f} "
            f"nats/token, RoPE {rope['final_val_loss']:.4f}{notoken} "
            f"({nope['params'] / 1e6:.2f}M parameters, {nope['steps']} steps, "
            f"{nope['wall_seconds']:.0f}s and {rope['wall_seconds']:.0f}s). "
            "Every row reads the start token at position 0 except nope_notoken*.", "",
            open(os.path.join(out, "eval", "table.md"), encoding="utf-8").read(), ""]


def uniform_section(uni):
    """UniformScale's grid (uni: search_scales.py's uniform.json): the best lambda per length,
    and the law 1 + a ln(i/L) fitted to it, beside the paper's."""
    lines = ["**UniformScale: best lambda per target length** (search_scales.py's windows, the "
             "validation split's \"search\" documents: none of the evaluation's text, protocol 3)",
             "",
             "| length | best lambda (mean loss) | loss | loss at lambda=1 | best lambda (tail) |",
             "|---|---:|---:|---:|---:|"]
    for name, s in uni["lengths"].items():
        lines.append(f"| {name} | {s['best_lam']:.2f} | {s['best_loss']:.4f} | "
                     f"{s['loss_at_1']:.4f} | {s['best_lam_tail']:.2f} |")
    fit = uni["fit"]
    return lines + ["", "Best lambda per position fitted to 1 + a ln(i/L) over "
                    f"L <= i <= {fit['length']}: a = {fit['a']:.3f}, R^2 = {fit['r2']:.3f} "
                    "(paper, Appendix B: a = 0.30-0.40, R^2 >= 0.97).", ""]


def headscale_section(scales):
    """One row per HeadScale fit (scales/head_*.json): its settings and the lambda it found."""
    lines = ["**HeadScale fits**", "",
             "| fit | init | clamp | steps | seconds | mean lambda | min | max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for fn in sorted(os.listdir(scales)):
        if fn.startswith("head_") and fn.endswith(".json"):
            s = read_json(os.path.join(scales, fn))
            flat = [v for row in s["lam"] for v in row]
            lines.append(f"| {fn[:-5]} | {s['init']:.2f} | {s['min_scale']:g} | {s['steps']} | "
                         f"{s['seconds']:.0f} | {sum(flat) / len(flat):.3f} | {min(flat):.3f} | "
                         f"{max(flat):.3f} |")
    return lines


def slopes_fit(cfg, scales):
    """The fitted slopes' file when --slopes ran its stages, else None: their rows need it."""
    logfit = os.path.join(scales, f"headslope_{length_name(cfg.slopes_length)}.json")
    return logfit if cfg.slopes and os.path.exists(logfit) else None


def fitted_numbers_section(cfg, scales, n_params):
    """How many numbers each kind of row fits past training (n_params: the model's own), so a
    remedy's gain can be weighed against what it adds."""
    lines = ["", "**Numbers fitted past training** (beside each row of the table)", "",
             "| rows | what is fitted | how many |", "|---|---|---:|",
             "| nope_uniform_* | one lambda, grid search on validation loss | 1 |"]
    if cfg.fit_lengths:
        lam = read_json(os.path.join(scales, f"head_{length_name(cfg.fit_lengths[0])}.json"))["lam"]
        lines.append("| nope_headscale_* | one lambda per (layer, head), gradient fit | "
                     f"{len(lam) * len(lam[0])} |")
    logfit = slopes_fit(cfg, scales)
    if logfit:
        a = read_json(logfit)["a"]
        grid_a = read_json(os.path.join(scales, "slope_grid.json"))
        lines += ["| nope_logn | nothing: a = 1/ln L for every head (Qwen's logn attention) | 0 |",
                  "| nope_slope_grid | one a for every head, the grid's lambda(i) fit "
                  f"({grid_a['source']}) | 1 |",
                  "| nope_headslope_* | one slope a per (layer, head), gradient fit, "
                  f"head_scale 1 | {len(a) * len(a[0])} |"]
    if cfg.rope_baselines:
        lines += ["| rope_*_zeroshot | one factor per length, grid search on validation loss | 1 |",
                  f"| rope_*_ft_* | every weight, fine-tuned | {n_params:,} |"]
    return lines


def rope_factors_section(cfg, out):
    """The RoPE extensions' best zero-shot factor per length (scales_rope/rope_factors.json),
    with --rope_baselines."""
    if not cfg.rope_baselines:
        return []
    rf = read_json(os.path.join(out, "scales_rope", "rope_factors.json"))["methods"]
    lines = ["", "**RoPE zero-shot: best factor per length**", "",
             "| method | " + " | ".join(next(iter(rf.values())).keys()) + " |",
             "|---|" + "---:|" * len(next(iter(rf.values())))]
    for m, by_len in rf.items():
        lines.append(f"| {m} | " + " | ".join(f"{s['best_factor']:g}" for s in by_len.values())
                     + " |")
    return lines


def slopes_section(cfg, scales):
    """The slopes a_h of each lambda that follows the position (scales/*slope_*.json), with
    --slopes: how each was set or fitted."""
    if not slopes_fit(cfg, scales):
        return []
    lines = ["", "**Lambda that follows the position**, lam_h(i) = 1 + a_h ln(max(i, L) / L) "
             "(positions i <= L unchanged)", "", "| slopes | how | a mean | min | max |",
             "|---|---|---:|---:|---:|"]
    for fn in sorted(os.listdir(scales)):
        if fn.endswith(".json") and fn.startswith(("slope_", "headslope_", "layerslope_",
                                                   "uniformslope_")):
            s = read_json(os.path.join(scales, fn))
            flat = [v for row in s["a"] for v in row] if isinstance(s["a"], list) else [s["a"]]
            how = (s.get("source")
                   or f"fitted at n = {s['length']}, {s['steps']} steps from {s['init']:.3f}")
            lines.append(f"| {fn[:-5]} | {how} | {sum(flat) / len(flat):.3f} | {min(flat):.3f} | "
                         f"{max(flat):.3f} |")
    return lines


def passkey_section(cfg, out):
    """study/passkey.py's table and heat maps, when the passkey stage ran."""
    pk_table = os.path.join(out, "passkey", "passkey.md")
    if not (cfg.passkey and os.path.exists(pk_table)):
        return []
    pk = read_json(os.path.join(out, "passkey", "passkey.json"))
    maps = sorted(p for p in os.listdir(os.path.dirname(pk_table)) if p.endswith(".png"))
    return ["", "**Passkey retrieval** (exact match, greedy; 10 depths x "
            f"{cfg.passkey_keys} keys per length; models fine-tuned with passkey examples at L; "
            f"mean over lengths up to {length_name(pk['avg_up_to'])})", "",
            open(pk_table, encoding="utf-8").read().strip(), "",
            "Heat maps: " + ", ".join(f"[{p}](passkey/{p})" for p in maps)]


def beyond_section(cfg, out):
    """study/beyond.py's tables of ALiBi and Scalable-Softmax beside NoPE, with --beyond."""
    if not cfg.beyond:
        return []
    proc = run_script(["study/beyond.py", out], capture=True)
    return ["", "**ALiBi and Scalable-Softmax beside NoPE** "
            f"(`python study/beyond.py {os.path.relpath(out, ROOT)}`; docs/beyond.md)", "",
            proc.stdout.strip() or proc.stderr.strip()]


def beyond2025_section(cfg, out):
    """study/beyond.py --rows=2025's tables of FoX, the output gate and the sink beside NoPE."""
    if not cfg.beyond2025:
        return []
    proc = run_script(["study/beyond.py", "--rows=2025", out], capture=True)
    return ["", "**FoX, the output gate and a learned sink beside NoPE** "
            f"(`python study/beyond.py --rows=2025 {os.path.relpath(out, ROOT)}`; "
            "docs/beyond2025.md)", "", proc.stdout.strip() or proc.stderr.strip()]


def findings_section(out):
    """study/findings.py's verdicts on the paper's findings, run on the study as a reader would."""
    proc = run_script(["study/findings.py", out], capture=True)
    return ["", "**Which of the paper's findings hold here** "
            f"(`python study/findings.py {os.path.relpath(out, ROOT)}`; criteria in its docstring)",
            "", "```", proc.stdout.strip() or proc.stderr.strip(), "```"]


if __name__ == "__main__":
    run_main(main)
