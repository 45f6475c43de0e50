"""--key=value parsing against a dataclass, presets, -h."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common import UserError, load_preset, parse_config


@dataclass
class Demo:
    steps: int = 10          # how many steps
    lr: float = 1e-3         # learning rate
    name: str = "x"          # a name
    fast: bool = False       # go fast (100% of the time)
    lengths: list[float] = field(default_factory=lambda: [1.0, 2.0])  # multiples of L
    preset: str = ""         # set by --preset


def test_overrides_are_typed():
    cfg = parse_config(Demo, ["--steps=5", "--lr=0.1", "--name=y", "--fast", "--lengths=1,1.5,4"])
    assert (cfg.steps, cfg.lr, cfg.name, cfg.fast, cfg.lengths) == (5, 0.1, "y", True, [1.0, 1.5, 4.0])
    assert parse_config(Demo, ["--fast=false"]).fast is False


@pytest.mark.parametrize("argv, message", [
    (["--stepz=3"], "unknown option --stepz"),
    (["--steps=3.5"], "expects an integer"),
    (["--lr=fast"], "expects a number"),
    (["--fast=maybe"], "expects true or false"),
    (["--steps"], "needs a value"),
    (["steps=3"], "unexpected argument"),
    (["--preset=no_such_preset"], "no preset"),
    (["--lr=nan"], "expects a finite number"),
    (["--lr=inf"], "expects a finite number"),
    (["--lr=-Infinity"], "expects a finite number"),
])
def test_bad_options_are_one_line_errors(argv, message):
    with pytest.raises(UserError, match=message):
        parse_config(Demo, argv)


def test_presets_are_read_not_executed(tmp_path):
    p = tmp_path / "p.py"
    p.write_text('"""doc"""\nDemo = dict(steps=7, lengths=[1, 3])\nother = dict(steps=1)\n')
    cfg = parse_config(Demo, [f"--preset={p}", "--lr=0.5"])
    assert (cfg.steps, cfg.lengths, cfg.lr, cfg.preset) == (7, [1.0, 3.0], 0.5, str(p))
    # command-line overrides win over the preset, whatever their order
    assert parse_config(Demo, ["--steps=2", f"--preset={p}"]).steps == 2
    p.write_text("import os\nDemo = dict(steps=os.cpu_count())\n")
    with pytest.raises(UserError, match="only assignments"):
        load_preset(str(p), "Demo")
    p.write_text("Demo = dict(steps=1, bogus=2)\n")
    with pytest.raises(UserError, match="unknown option 'bogus'"):
        parse_config(Demo, [f"--preset={p}"])


def test_help_lists_every_option_with_its_comment(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(Demo, ["-h"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.split() == ["--steps=10", "[int]", "how", "many", "steps"] for line in lines), out
    assert any(line.split()[:2] == ["--lengths=1.0,2.0", "[list[float]]"] for line in lines), out
    assert "go fast (100% of the time)" in out  # argparse's %-formatting escaped


def test_a_dataclass_made_in_a_function_parses_and_has_help():
    @dataclass
    class Local:
        n: int = 1  # a number
    assert parse_config(Local, ["--n=2"]).n == 2
    with pytest.raises(SystemExit) as e:
        parse_config(Local, ["-h"])
    assert e.value.code == 0


def test_shipped_presets_fit_the_scripts():
    from evaluate import EvalConfig
    from reproduce import StudyConfig
    from search_scales import SearchConfig
    from study.rope_grid import RopeGridConfig
    from train import TrainConfig, model_options
    names = sorted(p.stem for p in (Path(__file__).parent.parent / "config").glob("*.py"))
    assert {"cpu", "cpu_char", "cpu_long", "gpu", "tiny"} <= set(names)
    for name in names:  # every section of every preset is checked against its script's settings
        parse_config(TrainConfig, [f"--preset={name}"], section="train", more=model_options())
        for cls, section in ((StudyConfig, "reproduce"), (SearchConfig, "search_scales"), (EvalConfig, "evaluate"),
                             (RopeGridConfig, "rope_grid")):
            parse_config(cls, [f"--preset={name}"], section=section)


def test_a_user_error_is_one_write_of_one_line(monkeypatch):
    """stderr to a pipe is write-through: print() would write the line and its newline apart,
    and two DDP ranks' errors ran into one line (seen in CI, 2026-12-07)."""
    from common import run_main

    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    monkeypatch.setattr("sys.stderr", Recorder())

    def main():
        raise UserError("loss is nan")

    with pytest.raises(SystemExit) as e:
        run_main(main)
    assert e.value.code == 2 and writes == ["error: loss is nan\n"]
