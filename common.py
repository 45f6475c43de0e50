"""
The ground floor every script stands on, none of it the paper's method:
  - options: a dataclass of defaults, a preset (config/NAME.py), then --key=value, by argparse
  - device and precision (autocast, float16's gradient scaler), and DDP's processes
  - atomic text, JSON and CSV files (always UTF-8) and the one-line progress report
  - one-line errors for bad input (UserError, run_main)
  - the learning-rate schedule, lengths in units of L, position bins
The measurement lives in evaluate.py, the dataset format in data/__init__.py. PyTorch is
imported where a tensor or a device is made, so -h, a refused option and the data scripts
answer without it.
"""

import argparse
import ast
import contextlib
import csv
import dataclasses
import difflib
import gc
import inspect
import io
import json
import math
import os
import re
import sys
import time
import tokenize
import typing
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent  # the repository


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2, nothing written."""

    code = 2  # the exit status (a subclass may say another)


def run_main(main):
    """Run a script's main(), turning user errors (and model.py's CheckpointError, where model.py
    was imported) into one clear line and exit status 2."""
    try:
        main()
    except Exception as e:  # noqa: BLE001  (re-raised unless it is the user's)
        model = sys.modules.get("model")
        if not isinstance(e, UserError) and not (model and isinstance(e, model.CheckpointError)):
            raise
        # one write, newline included: stderr to a pipe is write-through, and print() writes the
        # line and its newline apart, so two DDP ranks' lines could run into one
        sys.stderr.write(f"error: {e}\n")
        sys.exit(getattr(e, "code", 2))
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    finally:
        log_peak_memory()


# Where a script appends its peak CUDA memory when it ends (gpu_check.py sets it for every
# command it runs, so each stage's memory is recorded by the process that used it). Unset:
# nothing is written.
MEMORY_LOG = "NANONOPE_MEMORY_LOG"


def log_peak_memory():
    path = os.environ.get(MEMORY_LOG)
    torch = sys.modules.get("torch")  # a script that never imported PyTorch used no card
    if not path or torch is None:
        return
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    peak = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1) if cuda else None
    line = json.dumps({"script": os.path.basename(sys.argv[0]), "args": sys.argv[1:],
                       "rank": os.environ.get("RANK"), "peak_cuda_mb": peak})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# -----------------------------------------------------------------------------
# Configuration: defaults (dataclass) < preset file (config/NAME.py) < --key=value, parsed by
# argparse from the dataclass's fields; -h shows each field's comment

class Parser(argparse.ArgumentParser):
    """argparse, its errors one line: error: ..., exit status 2 (run_main prints it)."""

    def error(self, message):
        m = re.match(r"argument --(\w+): expected one argument", message)
        raise UserError(f"--{m[1]} needs a value: --{m[1]}=VALUE" if m else message)


class Help(argparse.RawDescriptionHelpFormatter):
    """-h shows each option as it is given: --key=DEFAULT, then its comment."""

    def _format_action_invocation(self, action):
        if action.nargs == 0:  # -h, --help
            return ", ".join(action.option_strings)
        return f"{action.option_strings[-1]}={action.metavar}"


def field_comments(cls):
    """The '# comment' after each field of a dataclass in its source, with the comment lines
    right below it that start in the same column (a comment wrapped at 100 columns)."""
    try:
        source = Path(inspect.getsourcefile(cls)).read_text(encoding="utf-8")
    except (OSError, TypeError):
        return {}
    notes = {}  # line number -> (column, text) of every comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            notes[tok.start[0]] = (tok.start[1], tok.string.lstrip("#").strip())
    lines = source.splitlines()
    node = ast.parse(source)
    for name in cls.__qualname__.split("."):  # the class itself, nested ones included
        node = next((n for n in getattr(node, "body", ()) if isinstance(n, ast.ClassDef)
                     and n.name == name), None)  # None: defined in a function, not found
    out = {}
    for f in node.body if node else ():
        if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name) and f.lineno in notes:
            column, text = notes[f.lineno]
            line = f.end_lineno + 1
            while (line in notes and notes[line][0] == column
                   and not lines[line - 1][:column].strip()):
                text, line = text + " " + notes[line][1], line + 1
            out[f.target.id] = text
    return out


def _convert(name, typ, value):
    """Convert a command-line string (or a preset's Python literal) to the field's type."""
    origin = typing.get_origin(typ)
    if origin is list:
        (item,) = typing.get_args(typ)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise UserError(f"--{name} expects a comma-separated list, got {value!r}")
        return [_convert(name, item, v) for v in value]
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise UserError(f"--{name} expects true or false, got {value!r}")
    if typ is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise UserError(f"--{name} expects an integer, got {value!r}")
        try:
            return int(value) if not isinstance(value, str) else int(value.strip())
        except ValueError:
            raise UserError(f"--{name} expects an integer, got {value!r}") from None
    if typ is float:
        if isinstance(value, bool):
            raise UserError(f"--{name} expects a number, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise UserError(f"--{name} expects a number, got {value!r}") from None
        if not math.isfinite(number):
            raise UserError(f"--{name} expects a finite number, got {value!r}")
        return number
    if typ is str:
        if not isinstance(value, str):
            raise UserError(f"--{name} expects a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config field type {typ} for {name}")


def load_preset(name, section):
    """Read config/NAME.py (or a path): Python literals only, never executed. Each script
    takes its own section, e.g.  train = dict(n_layer=4, learning_rate=2e-3)."""
    path = Path(name) if name.endswith(".py") else ROOT / "config" / f"{name}.py"
    if not path.is_file():
        available = sorted(p.stem for p in (ROOT / "config").glob("*.py"))
        raise UserError(f"no preset {name!r} ({path}); available: {', '.join(available)}")
    sections = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            raise UserError(f"{path}:{node.lineno}: presets hold only assignments "
                            "like  train = dict(key=value)")
        value = node.value
        try:
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "dict" and not value.args):
                sections[node.targets[0].id] = {kw.arg: ast.literal_eval(kw.value)
                                                for kw in value.keywords}
            else:
                sections[node.targets[0].id] = ast.literal_eval(value)
        except ValueError:
            raise UserError(f"{path}:{node.lineno}: only literal values are allowed "
                            "in presets") from None
    return sections.get(section, {})


def parse_config(cls, argv=None, section=None, description=None, more=()):
    """Build a `cls` dataclass from its defaults, an optional --preset=NAME (the preset's
    `section` dict), then --key=value overrides; unknown keys and wrong types are one-line
    errors, a bare --flag sets a bool to true, a list takes commas, -h lists every field with its
    comment. more: other dataclasses whose fields are options too (train.py: the model's);
    with them, returns (cfg, {field: value} of theirs given by the preset or the command line)."""
    argv = sys.argv[1:] if argv is None else argv
    specs = {}  # option -> (its dataclass, the field)
    for c in (cls, *more):
        for f in dataclasses.fields(c):
            specs.setdefault(f.name, (c, f))
    presets = ", ".join(sorted(p.stem for p in (ROOT / "config").glob("*.py")))
    script = f"python {os.path.basename(sys.argv[0]) or 'script'}"
    parser = Parser(prog=script, usage=f"{script} [--preset=NAME] [--key=value ...]",
                    description=description, allow_abbrev=False, formatter_class=Help,
                    epilog=f"presets in config/: {presets} (a preset sets several options; "
                           "--key=value wins)")
    if "preset" not in specs:
        parser.add_argument("--preset", default=argparse.SUPPRESS, metavar="NAME",
                            help="settings from config/NAME.py")
    comments = {}  # read from the source only for -h
    for c in (cls, *more) if {"-h", "--help"} & set(argv) else ():
        comments = field_comments(c) | comments
    for name, (c, f) in specs.items():
        typ = typing.get_type_hints(c)[name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        parser.add_argument(f"--{name}", default=argparse.SUPPRESS, metavar=str(shown),
                            type=lambda v, n=name, t=typ: _convert(n, t, v),
                            **({"nargs": "?", "const": True} if typ is bool else {}),
                            help=f"[{typ.__name__ if isinstance(typ, type) else typ}] "
                                 f"{comments.get(name, '')}".replace("%", "%%"))
    given, rest = parser.parse_known_args(argv)
    for arg in rest:
        key = arg[2:].partition("=")[0]
        if not arg.startswith("--"):
            raise UserError(f"unexpected argument {arg!r}: use --key=value (see -h)")
        close = difflib.get_close_matches(key, specs, n=3)
        hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
        raise UserError(f"unknown option --{key}{hint}; -h lists them")
    given = vars(given)
    preset = given.pop("preset", "")
    values = {}
    if preset:
        for key, value in load_preset(preset, section or cls.__name__).items():
            if key not in specs:
                raise UserError(f"preset {preset!r} sets unknown option {key!r} for this script")
            values[key] = _convert(key, typing.get_type_hints(specs[key][0])[key], value)
    values |= given
    cfg = cls(**{k: v for k, v in values.items() if specs[k][0] is cls})
    if preset and "preset" in specs:
        cfg.preset = preset
    if not more:
        return cfg
    return cfg, {k: v for k, v in values.items() if specs[k][0] is not cls}


def config_dict(cfg):
    return dataclasses.asdict(cfg)


def parse_ckpts(specs):
    """['nope=out/nope/ckpt.pt', 'out/rope/ckpt.pt'] -> {'nope': ..., 'rope': ...}; a bare
    path is named after its folder."""
    out = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq:
            path = name
            name = os.path.basename(os.path.dirname(os.path.abspath(path))) or "model"
        if name in out:
            raise UserError(f"two checkpoints are named {name!r}; name them: --ckpts=a=PATH,b=PATH")
        out[name] = path
    if not out:
        raise UserError("no checkpoints given: --ckpts=NAME=PATH[,NAME=PATH...]")
    return out


# -----------------------------------------------------------------------------
# Device and precision

def pick_device(device="auto"):
    """cuda, then mps, then cpu."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts
    if device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"--device={device} but CUDA is not available here; use --device=auto")
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


DTYPES = ("auto", "float32", "bfloat16", "float16")


def native_bf16():
    """Does this CUDA card compute bfloat16 natively (Ampere, Hopper and later)? PyTorch's
    default check also says yes where bf16 is only emulated (a T4, a V100): slow, so it is not
    used there."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts
    return torch.cuda.is_bf16_supported(including_emulation=False)


def pick_dtype(dtype, device):
    """The precision of autocast. 'auto': bfloat16 on a CUDA card that computes it natively, float16
    on older cards (T4, V100: free Colab's; with a gradient scaler wherever something is trained),
    float32 on CPU and MPS (mixed precision is used only on CUDA here)."""
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    cuda = device.startswith("cuda")
    if dtype == "auto":
        return ("bfloat16" if native_bf16() else "float16") if cuda else "float32"
    if dtype != "float32" and not cuda:
        raise UserError(f"--dtype={dtype} is for CUDA cards; "
                        f"on {device} use --dtype=float32 (or auto)")
    return dtype


def autocast(device, dtype):
    """bf16 or fp16 autocast on CUDA, a no-op context otherwise."""
    if dtype in ("bfloat16", "float16"):
        import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts
        return torch.autocast(device_type="cuda", dtype=getattr(torch, dtype))
    return contextlib.nullcontext()


def grad_scaler(dtype):
    """float16 has 5 exponent bits: small gradients underflow to 0. The scaler multiplies the loss
    before backward and divides the gradients before the step (skipping steps whose gradients
    overflowed). bfloat16 has float32's range and needs none: disabled, every call is a no-op."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts
    return torch.amp.GradScaler("cuda", enabled=dtype == "float16")


def optimizer_step(model, optimizer, scaler, grad_clip):
    """One update from the accumulated gradients, unscaled first under float16 so that the clip
    sees their true norm. Returns the norm, left on the device (reading it would make the CPU
    wait for the card every step), or None without a clip."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts

    norm = None
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)  # skipped if float16 gradients overflowed; the scale then drops
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return norm



# -----------------------------------------------------------------------------
# Processes: one, or one a card under torchrun (DDP)

def start_processes(device_asked):
    """One process, or one per card under torchrun (DDP: each takes cuda:LOCAL_RANK, nccl; or the
    CPU with --device=cpu, gloo). Returns (ddp, rank, world, device)."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts

    if torch.cuda.is_available():  # TF32 matmuls where float32 is asked for (Ampere and later)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if int(os.environ.get("RANK", -1)) == -1:
        return False, 0, 1, pick_device(device_asked)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device_asked not in ("auto", "cuda", "cpu"):
        raise UserError(f"under torchrun --device={device_asked} cannot be honoured: each process "
                        "takes cuda:LOCAL_RANK; use --device=auto, cuda or cpu (choose cards with "
                        "CUDA_VISIBLE_DEVICES)")
    if device_asked == "cuda" and not torch.cuda.is_available():
        raise UserError("--device=cuda but CUDA is not available here; use --device=auto")
    cuda = torch.cuda.is_available() and device_asked != "cpu"
    torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    device = f"cuda:{local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    return True, rank, int(os.environ["WORLD_SIZE"]), device


def wrap(model, compile_it, ddp, device):
    """The model as a training loop calls it: compiled (--compile), then data parallel."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts

    if compile_it:
        model = torch.compile(model)
    if ddp:
        device_ids = [int(device.split(":")[1])] if device.startswith("cuda") else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    return model


def finite_everywhere(value, ddp, device):
    """Whether `value` is finite in every process. Under DDP all stop together: a process that
    raised alone would leave the others waiting for it at the next gradient all-reduce."""
    if not ddp:
        return math.isfinite(value)
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts

    ok = torch.tensor(float(math.isfinite(value)), device=device)
    torch.distributed.all_reduce(ok, op=torch.distributed.ReduceOp.MIN)
    return bool(ok.item())


def end_processes(wait):
    """DDP teardown. After a finished run every rank waits (wait=True) while rank 0 writes its last
    files; after an error none waits, as another process may be gone. The DDP wrapper (its reducer
    holds the process group and gloo's worker threads) must be freed before the group, not at
    interpreter exit, where gloo aborted a process now and then ("terminate called ...")."""
    import torch  # the ground floor without PyTorch: -h, a refused option, the data scripts

    if wait:
        torch.distributed.barrier()
    gc.collect()
    torch.distributed.destroy_process_group()


# -----------------------------------------------------------------------------
# Files: every result is written atomically (temporary file, then rename), in UTF-8 whatever the
# locale (Windows' default would fail on the report's "λ")

def atomic_write_text(path, text):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def write_csv(path, rows, header):
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# -----------------------------------------------------------------------------
# Progress: one plain line per report

def format_seconds(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    """Prints 'step 120/400 | loss 1.8123 | 21.3k tok/s | 412 ms/step | eta 1m55s'."""

    def __init__(self, total, tokens_per_step, start_step=0):
        self.total, self.tokens_per_step = total, tokens_per_step
        self.start_step, self.t0 = start_step, time.time()
        self.last_t, self.last_step = self.t0, start_step

    def line(self, step, **metrics):
        now = time.time()
        steps = max(step - self.last_step, 1)
        dt = (now - self.last_t) / steps
        self.last_t, self.last_step = now, step
        done = max(step - self.start_step, 1)
        eta = (now - self.t0) / done * max(self.total - step, 0)
        parts = [f"step {step}/{self.total}"]
        for k, v in metrics.items():
            parts.append(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}")
        parts += [f"{self.tokens_per_step / max(dt, 1e-9) / 1000:.1f}k tok/s",
                  f"{dt * 1000:.0f} ms/step", f"eta {format_seconds(eta)}"]
        return " | ".join(parts)




# -----------------------------------------------------------------------------
# The learning-rate schedule and lengths in units of L, which every script reads alike

def cosine_lr(it, warmup, decay_iters, lr, min_lr):
    """The learning rate at step `it`: linear warm-up over `warmup` steps, then a cosine from lr
    down to min_lr at decay_iters, held there. The one schedule of the project (train.py's runs
    and search_scales.py's fits of lambda)."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup) / max(decay_iters - warmup, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def length_list(multiples, train_len):
    """Lengths given in units of the training length L (e.g. 1, 1.5, 2, 4) -> tokens, shortest
    first (evaluate.py's per-position curve and entropy come from the last, the longest)."""
    out = []
    for v in multiples:
        if v <= 0:
            raise UserError(f"lengths are multiples of L and must be > 0, got {v:g}")
        n = int(round(v * train_len))
        if n not in out:
            out.append(n)
    return sorted(out)


def length_name(k):
    """2.0 -> '2L', 1.5 -> '1.5L': a length in units of L, as file names and results.json
    name it."""
    return f"{k:g}L"


def default_tail(train_len):
    """The paper scores the last 256 tokens of each window at L = 2048, i.e. L/8;
    for small L we keep that proportion (at least 1 token, at most 256)."""
    return int(min(256, max(1, train_len // 8)))


def binned(values, width):
    """Mean over consecutive bins of `width` positions along the last axis; bin centres (1-based:
    position i is index + 1, and position i's loss is its prediction of token i + 1)."""
    values = np.asarray(values)
    nb = values.shape[-1] // width
    centers = (np.arange(nb) + 0.5) * width + 0.5
    return centers, values[..., :nb * width].reshape(*values.shape[:-1], nb, width).mean(-1)
