"""python -m classroom: the kit's one command (classroom/command.py says what it does)."""

from classroom.command import main
from common import run_main

run_main(main)
