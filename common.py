"""
The plumbing every script shares, none of it the paper's method:
  - configuration: a dataclass of defaults, a preset file (config/NAME.py), then
    --key=value overrides
  - device and precision (autocast, float16's gradient scaler)
  - atomic text, JSON and CSV files (always UTF-8) and the one-line progress report
  - one-line errors for bad input (UserError, run_main)
The measurement lives in evaluate.py, the dataset format in data/__init__.py. PyTorch is
imported where a tensor or a device is made, so -h, a refused option and the data scripts
answer without it.
"""

import ast
import contextlib
import csv
import dataclasses
import inspect
import io
import json
import math
import os
import re
import sys
import time
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # the repository


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2, nothing written."""


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
        sys.exit(2)
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
# Configuration: defaults (dataclass) < preset file (config/NAME.py) < --key=value

def _field_comments(cls):
    """The '# comment' after each field in the dataclass source, used by -h, with the comment
    lines right below it that start in the same column (a comment wrapped at 100 columns)."""
    comments, last = {}, None  # last: (the field, its comment's column)
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return comments
    for line in src.splitlines():
        field = re.match(r"^\s+(\w+)\s*:[^=\n]*=.*?(#\s*)(.*)$", line)
        more = re.match(r"^(\s*)#\s*(.*)$", line)
        if field:
            comments[field.group(1)] = field.group(3).strip()
            last = (field.group(1), field.start(2))
        elif last and more and len(more.group(1)) == last[1]:
            comments[last[0]] += " " + more.group(2).strip()
        else:
            last = None
    return comments


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


def parse_config(cls, argv=None, section=None, description=None):
    """Build a `cls` dataclass from its defaults, an optional --preset=NAME (the preset's
    `section` dict), then --key=value overrides. Unknown keys and wrong types are errors.
    A bare --flag sets a bool field to True. -h prints every field with its comment."""
    argv = sys.argv[1:] if argv is None else argv
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if any(a in ("-h", "--help") for a in argv):
        print_help(cls, description)
        sys.exit(0)
    overrides, preset = {}, None
    for arg in argv:
        if not arg.startswith("--"):
            raise UserError(f"unexpected argument {arg!r}: use --key=value (see -h)")
        key, eq, value = arg[2:].partition("=")
        if key == "preset":
            preset = value
            continue
        if key not in hints:
            close = [n for n in names if n.startswith(key[:3])]
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            raise UserError(f"unknown option --{key}{hint}; -h lists them")
        if not eq:
            if hints[key] is not bool:
                raise UserError(f"--{key} needs a value: --{key}=VALUE")
            value = "true"
        overrides[key] = value
    values = {}
    if preset:
        for key, value in load_preset(preset, section or cls.__name__).items():
            if key not in hints:
                raise UserError(f"preset {preset!r} sets unknown option {key!r} for this script")
            values[key] = _convert(key, hints[key], value)
    for key, value in overrides.items():
        values[key] = _convert(key, hints[key], value)
    cfg = cls(**values)
    if preset and "preset" in hints:
        cfg.preset = preset
    return cfg


def print_help(cls, description=None):
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    script = os.path.basename(sys.argv[0]) or "script"
    if description:
        print(description.strip() + "\n")
    print(f"usage: python {script} [--preset=NAME] [--key=value ...]\n\n"
          "options (default, then what it is):")
    for f in dataclasses.fields(cls):
        typ = getattr(hints[f.name], "__name__", str(hints[f.name]))
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, list):
            default = ",".join(str(v) for v in default)
        print(f"  --{f.name}={default}  [{typ}]  {comments.get(f.name, '')}")
    presets = sorted(p.stem for p in (ROOT / "config").glob("*.py"))
    print(f"\npresets in config/: {', '.join(presets)}  "
          "(a preset sets several options; --key=value wins)")


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
    import torch
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
    import torch
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
        import torch
        return torch.autocast(device_type="cuda", dtype=getattr(torch, dtype))
    return contextlib.nullcontext()


def grad_scaler(dtype):
    """float16 has 5 exponent bits: small gradients underflow to 0. The scaler multiplies the loss
    before backward and divides the gradients before the step (skipping steps whose gradients
    overflowed). bfloat16 has float32's range and needs none: disabled, every call is a no-op."""
    import torch
    return torch.amp.GradScaler("cuda", enabled=dtype == "float16")


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


