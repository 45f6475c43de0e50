"""
A student's upload, read as data (classroom/grade.py reads it before any sandbox, as the
teacher): the student controls the names, links and bytes of its files.

  - Only regular files inside the upload are read. A symbolic link, a device, a fifo or a
    socket, anywhere on the way, is refused in one line (its tasks score 0): nothing is followed
    outside the upload, nothing blocks, nothing is read without end.
  - Each file read is at most FILE_BYTES; the search for the task files visits at most
    FOLDERS folders, DEPTH deep, and skips dot-folders, __MACOSX and the like.
  - The text is UTF-8, with or without a byte-order mark, as Python reads a source file.
"""

import os
import stat
from pathlib import Path

FILE_BYTES = 1 << 20  # a task file (the project's largest is about 40 KB)
FOLDERS = 2000
DEPTH = 8
SKIP = ("__MACOSX", "__pycache__", "node_modules")


class UploadError(ValueError):
    """A file of the upload that is not read, and why (one line)."""


def kind(mode):
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a fifo"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def read_upload(folder, rel, limit=FILE_BYTES):
    """The text of folder/rel, a regular file inside folder, no link on the way; UploadError
    (why, one line) otherwise. FileNotFoundError where it does not exist."""
    here = Path(folder)
    parts = Path(rel).parts
    for i, part in enumerate(parts):
        here = here / part
        mode = os.lstat(here).st_mode  # FileNotFoundError: the caller says "missing"
        last = i == len(parts) - 1
        if (last and not stat.S_ISREG(mode)) or (not last and not stat.S_ISDIR(mode)):
            raise UploadError(f"{'/'.join(parts[:i + 1])} is {kind(mode)}: upload plain files")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(here, flags | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # changed since it was looked at
            raise UploadError(f"{rel} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UploadError(f"{rel} is over {limit >> 10} KB: upload the project's file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UploadError(f"{rel} is not UTF-8 text") from None


def folders(sub):
    """The folders of an upload, shallowest first: no link followed, at most FOLDERS, DEPTH
    deep, without dot-folders and SKIP."""
    queue, seen = [(Path(sub), 0)], 0
    while queue and seen < FOLDERS:
        here, depth = queue.pop(0)
        seen += 1
        yield here
        if depth >= DEPTH:
            continue
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        queue += [(Path(e.path), depth + 1) for e in entries
                  if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                  and e.name not in SKIP]


def holds(folder, name):
    """Whether folder/name is there, as a name (a link or a device counts: it is refused when
    read, with its reason, instead of the folder being passed over)."""
    try:
        os.lstat(Path(folder) / name)
        return True
    except OSError:
        return False
