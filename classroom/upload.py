"""
A student's upload, read as data (classroom/grade.py reads it before any sandbox, as the
teacher): the student controls the names, links and bytes of its files.

  - Only regular files inside the upload are read. A symbolic link, a device, a fifo or a
    socket, anywhere on the way, is refused in one line (its tasks score 0): nothing is followed
    outside the upload, nothing blocks, nothing is read without end.
  - Each file read is at most FILE_BYTES; the search for the task files visits at most
    FOLDERS folders, DEPTH deep, and skips dot-folders, __MACOSX and the like.
  - The text is decoded as Python decodes a source file (PEP 263, tokenize.detect_encoding):
    UTF-8, with or without a byte-order mark, or the encoding a coding line in its first two
    lines declares (`# -*- coding: latin-1 -*-`). An encoding Python does not know, one that
    is not a text encoding, or bytes not valid in the declared one: refused in one line. Only
    the task's functions are taken from the text, into the project's own UTF-8 file, so the
    student's coding line never reaches the worker's copy. Two codecs Python accepts are
    refused: punycode and idna, whose decoders take time quadratic in the length (a 1 MB file,
    about a minute of the teacher's unsandboxed process).
"""

import codecs
import io
import os
import stat
import tokenize
from pathlib import Path

FILE_BYTES = 1 << 20  # a task file (the project's largest is about 40 KB)
FOLDERS = 2000
DEPTH = 8
SKIP = ("__MACOSX", "__pycache__", "node_modules")
SLOW_CODECS = ("punycode", "idna")  # decoding quadratic in the length


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
    return decoded(data, rel)


def decoded(data, rel):
    """A source file's bytes as Python reads them (PEP 263); UploadError (one line) where
    Python would not."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        if "unknown encoding" in str(e):  # "unknown encoding for 'x': NAME"
            raise UploadError(f"{rel} declares an encoding Python does not know "
                              f"({str(e).rpartition(': ')[2][:40]}): save it as UTF-8") from None
        if "encoding problem: utf-8" in str(e):
            raise UploadError(f"{rel} has a UTF-8 byte-order mark and a coding line declaring "
                              "another encoding: save it as UTF-8") from None
        raise UploadError(f"{rel} is not UTF-8 text and declares no other encoding (a PEP 263 "
                          "coding line): save it as UTF-8") from None
    name = codecs.lookup(encoding).name
    if name in SLOW_CODECS:
        raise UploadError(f"{rel} declares the encoding {name}, which the grader does not "
                          "decode (too slow on a large file): save it as UTF-8")
    try:
        text = data.decode(encoding)
    except LookupError:  # a codec that is not a text encoding (rot13, zlib ...)
        raise UploadError(f"{rel} declares the encoding {name}, which is not a text encoding: "
                          "save it as UTF-8") from None
    except UnicodeDecodeError as e:
        said = ("and declares no other encoding" if encoding in ("utf-8", "utf-8-sig")
                else "as its coding line declares")
        what = "UTF-8" if encoding in ("utf-8", "utf-8-sig") else name
        raise UploadError(f"{rel} is not {what} text (byte {e.start + 1}), {said}: save it as "
                          "UTF-8") from None
    return text.removeprefix("\ufeff")


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
