"""
The classic tiny Shakespeare corpus (about 1 M characters), character level.

    python data/shakespeare_char/prepare.py                    # downloads it once
    python data/shakespeare_char/prepare.py --input=input.txt  # offline: a copy you have

The text is one document: the first 90% is train, the last 10% val (as in nanoGPT).
"""

import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import UserError, parse_config, run_main  # noqa: E402
from data import CharTokenizer, read_text, write_dataset  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


@dataclass
class PrepareConfig:
    input: str = ""             # a copy of input.txt ('' = download it to data/shakespeare_char/)
    out_dir: str = ""           # where to write ('' = data/shakespeare_char)
    val_fraction: float = 0.1   # the last part of the text held out for validation


def main():
    cfg = parse_config(PrepareConfig, description=__doc__)
    here = Path(__file__).parent
    path = Path(cfg.input) if cfg.input else here / "input.txt"
    if not path.exists():
        if cfg.input:
            raise UserError(f"--input={cfg.input} does not exist")
        print(f"downloading {URL}")
        try:
            with urllib.request.urlopen(URL, timeout=30) as r:
                text = r.read().decode("utf-8")
        except Exception as e:
            raise UserError(f"could not download tiny Shakespeare ({type(e).__name__}); offline, "
                            "pass --input=PATH to a copy of input.txt") from None
        path.write_text(text, encoding="utf-8")
    text = read_text(path)
    if not 0 < cfg.val_fraction < 1:
        raise UserError(f"--val_fraction must be between 0 and 1, got {cfg.val_fraction}")
    n = int(len(text) * (1 - cfg.val_fraction))
    write_dataset(cfg.out_dir or here, [("train", text[:n])], [("val", text[n:])],
                  CharTokenizer.from_texts([text]),
                  {"corpus": "shakespeare_char", "input": str(path)})


if __name__ == "__main__":
    run_main(main)
