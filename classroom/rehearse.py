"""
A made-up class to rehearse grading on (and to time it): STUDENTS folders, a third holding the
project's own task functions (full marks), a third a blank student copy (0), a third the
project's with one task wrong (a known mistake, the task cycling T1 ... T6).

    python classroom/rehearse.py ../class --students=100
    NANONOPE_SECRET=... python -m classroom grade-all ../class --csv=gradebook.csv

Each folder holds model.py, search_scales.py and evaluate.py, as an upload would. expected.csv
beside them gives each student's expected total, for comparing with the gradebook.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import UserError, parse_config, run_main, write_csv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FILES = ("model.py", "search_scales.py", "evaluate.py")
MISTAKES = [  # (task, points lost, file, the project's text, the wrong text)
    ("T1", 10, "model.py", "torch.log(i.clamp(min=L) / L)", "torch.log(i / L)"),
    ("T2", 20, "model.py", ".sum(-1) / math.log(2)", ".sum(-1)"),
    ("T3", 10, "search_scales.py", '"best_lam": float(lams[mean.argmin()])',
     '"best_lam": float(lams[mean.argmax()])'),
    ("T4", 10, "search_scales.py", "keep = x >= 0", "keep = x > 0"),
    ("T5", 30, "search_scales.py", "weight_decay=0.0)", "weight_decay=0.01)"),
    ("T6", 20, "evaluate.py", "s = max(1, context // 8)", "s = context // 8"),
]


@dataclass
class RehearseConfig:
    students: int = 30  # folders to write (a third full, a third blank, a third one task wrong)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]  # -h and --key=value aside
    cfg = parse_config(RehearseConfig, [a for a in sys.argv[1:] if a.startswith("-")],
                       description=__doc__)
    if len(args) != 1:
        raise UserError("usage: python classroom/rehearse.py OUT_DIR [--students=N]")
    out = Path(args[0])
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not empty: name a new folder (nothing was written)")
    if cfg.students < 1:
        raise UserError(f"--students must be at least 1, got {cfg.students}")
    with tempfile.TemporaryDirectory(prefix="nanonope_rehearse_") as tmp:
        blank = Path(tmp) / "copy"
        done = subprocess.run([sys.executable, "-m", "classroom", "student", str(blank)],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise UserError(f"the student copy failed: {done.stderr.strip()[-300:]}")
        rows = []
        for n in range(cfg.students):
            folder = out / f"student_{n + 1:03d}"
            folder.mkdir(parents=True)
            kind = ("full", "blank", "wrong")[n % 3]
            source = blank if kind == "blank" else ROOT
            for f in FILES:
                shutil.copy2(source / f, folder / f)
            total = {"full": 100, "blank": 0, "wrong": 100}[kind]
            if kind == "wrong":
                tid, points, path, old, new = MISTAKES[(n // 3) % len(MISTAKES)]
                text = (folder / path).read_text(encoding="utf-8")
                assert text.count(old) == 1, old
                (folder / path).write_text(text.replace(old, new), encoding="utf-8")
                total -= points
                kind = f"wrong {tid}"
            rows.append([folder.name, kind, total])
    write_csv(os.path.join(out, "expected.csv"), rows, ["student", "kind", "total"])
    print(f"wrote {cfg.students} students into {out}, "
          f"and their expected totals in {out}/expected.csv")


if __name__ == "__main__":
    run_main(main)
