"""The judge's own bound (issue 57, effect 3): nothing a student's worker sends makes the judge
(classroom/wire.py's Reader, receive and from_wire, run as the teacher, unsandboxed) hold more
than wire.py's docstring states. Each hostile message is built here by hand and is small; none
makes this process allocate more than about 100 MB, with the defence or without it."""

import contextlib
import gc
import io
import os
import struct
import subprocess
import sys
import threading
import time
import zipfile
import zlib

import numpy as np
import pytest
import torch

from classroom import wire


# -----------------------------------------------------------------------------
# Messages built by hand


def files_of(obj):
    """torch.save's zip of obj, as its files [(name, bytes)] in order."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(buf) as z:
        return [(info.filename, z.read(info)) for info in z.infolist()]


def stored(name, data):
    return (name, data, zipfile.ZIP_STORED, len(data), zlib.crc32(data))


def zip_of(files, aliases=()):
    """A zip of files [(name, bytes as written, method, size, crc)], each after its local
    header, then its directory, which also names file i's bytes again for each (name, i) of
    aliases."""
    out, where = bytearray(), []
    for name, payload, method, size, crc in files:
        where.append(len(out))
        out += struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(payload),
                           size, len(name), 0) + name.encode() + payload
    directory = bytearray()
    for name, i in [(f[0], i) for i, f in enumerate(files)] + list(aliases):
        _, payload, method, size, crc = files[i]
        directory += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc,
                                 len(payload), size, len(name), 0, 0, 0, 0, 0,
                                 where[i]) + name.encode()
    count = len(files) + len(aliases)
    return bytes(out + directory + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, count, count,
                                               len(directory), len(out), 0))


def repacked(obj, pickle=None, replace=None):
    """torch.save's zip of obj, written again by zip_of: its pickle replaced by pickle, and
    replace(name, data) -> the file (zip_of's tuple) for each of its files."""
    out = []
    for name, data in files_of(obj):
        if name.endswith("/data.pkl") and pickle is not None:
            data = pickle
        out.append(replace(name, data) if replace else stored(name, data))
    return out


def pickle_of(obj):
    return dict(files_of(obj))["archive/data.pkl"]


def received(data):
    """What wire.receive makes of data sent as a message down a pipe (by a thread: the reader
    holds only so much ahead of the reads)."""
    r, w = os.pipe()
    reader = wire.Reader(r)

    def write():
        with contextlib.suppress(OSError):  # refused before the end: the reading end closed
            os.write(w, struct.pack("<Q", len(data)) + data)
        os.close(w)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        return wire.receive(reader, deadline=time.monotonic() + 10)
    finally:
        reader.close()
        os.close(r)
        writer.join(5)


def refused_before_torch_load(data, monkeypatch, match):
    """data is refused (WireError, its reason matching match) before torch.load reads it."""
    calls = []

    def load(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("torch.load read it")

    monkeypatch.setattr(torch, "load", load)
    with pytest.raises(wire.WireError, match=match):
        received(data)
    assert not calls, "torch.load read a message that should have been refused"


def sized(pickle, old, new):
    """pickle with the BININT1 `old` of a storage's size and of its tensor's shape made `new`."""
    big = b"J" + struct.pack("<i", new)
    out = pickle.replace(b"K" + bytes([old]) + b"t", big + b"t")
    out = out.replace(b"K" + bytes([old]) + b"\x85", big + b"\x85")
    assert out.count(big) == 2 * pickle.count(b"K" + bytes([old]) + b"t") > 0
    return out


# -----------------------------------------------------------------------------
# 1. A numpy scalar type of gigabytes: only what to_wire sends


@pytest.mark.parametrize("payload", [
    ("|V1000000000", 0),  # a void type of a gigabyte
    ("|V1", 50_000_000),  # np.void(50_000_000): 50 MB from a few bytes
    ("<f16", 1.0), ("<c8", 1.0), ("|S5", 1), ("O", 1),  # types to_wire never sends
    (["|b1"], 1), ("|u1", -1), ("<i2", 1 << 40),  # not a string; out of range
])
def test_a_numpy_scalar_is_only_one_to_wire_sends(payload):
    with pytest.raises(wire.WireError):
        wire.from_wire((wire.TAG, "npscalar", payload))


def test_every_numpy_scalar_to_wire_sends_comes_back():
    for dtype in sorted(wire.NPSCALARS):
        value = np.dtype(dtype).type(1)
        back = wire.from_wire(wire.to_wire(value))
        assert type(back) is type(value) and back == value, dtype
    with pytest.raises(wire.WireError, match="not data"):
        wire.to_wire(np.longdouble(1))  # 16 bytes: refused where it is sent, not half-way


# -----------------------------------------------------------------------------
# 2. What torch.load builds: torch.save's zip, STORED, and a pickle of data


def test_what_torch_save_writes_for_data_passes():
    import model  # the project's GPT: a model's state crosses in calls and replies

    state = wire.model_state(model.GPT(model.GPTConfig(n_layer=1, n_embd=32)))
    a = torch.arange(10.0)
    for obj in [
        ("result", wire.to_wire({"a": (1, 2.5, None, "x"), 3: [torch.ones(2, dtype=torch.bfloat16)],
                                 "n": np.arange(3.0), "s": np.float32(1.5), "big": 10 ** 40,
                                 "t": torch.ones(3, requires_grad=True), "e": torch.zeros(0),
                                 "u": torch.ones(3, dtype=torch.uint16),  # _rebuild_tensor_v3
                                 "tokens": np.arange(3, dtype=np.uint16)}),
         {}, {0: state}, None),
        ("error", "ValueError", "a NUL \x00 in a message", {}),
        [a, a[2:], a],  # one storage, its key memoized (BINGET)
        ("end", None),
    ]:
        wire.check_archive(zip_of([stored(n, d) for n, d in files_of(obj)]))  # no zip64 records
        got = received(_saved(obj))  # torch.save's own, with them
        assert str(got) == str(obj)


def _saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_a_compressed_file_is_refused_before_anything_inflates_it(monkeypatch):
    # a 4-byte tensor's file made 80 MB of zeros, deflated to about 370 KB, and the pickle's
    # sizes made to match: torch.load alone inflates it into an 80 MB tensor
    size = 80 << 20
    block, deflate, crc = bytes(1 << 20), zlib.compressobj(1, zlib.DEFLATED, -15), 0
    payload = b"".join(deflate.compress(block) for _ in range(size >> 20)) + deflate.flush()
    for _ in range(size >> 20):
        crc = zlib.crc32(block, crc)

    def replace(name, data):
        if name == "archive/data/0":
            return (name, payload, zipfile.ZIP_DEFLATED, size, crc)
        return stored(name, data)

    obj = torch.zeros(4, dtype=torch.uint8)
    data = zip_of(repacked(obj, sized(pickle_of(obj), 4, size), replace))
    assert len(data) < 1 << 20
    refused_before_torch_load(data, monkeypatch, match="compressed")


def test_files_that_share_their_bytes_count_each_time(monkeypatch):
    # one 1 MB file named 70 times in the directory: 70 MB declared, and read, from 1 MB
    obj = [torch.zeros(3, dtype=torch.uint8) for _ in range(70)]
    files = repacked(obj, sized(pickle_of(obj), 3, 1 << 20))
    first = next(i for i, f in enumerate(files) if f[0] == "archive/data/0")
    files[first] = stored("archive/data/0", bytes(1 << 20))
    aliases = [(f[0], first) for f in files
               if f[0].startswith("archive/data/") and f[0] != "archive/data/0"]
    files = [f for f in files if f[0] not in dict(aliases)]
    data = zip_of(files, aliases)
    assert len(data) < 2 << 20
    refused_before_torch_load(data, monkeypatch, match="unpacks to over")


def test_only_a_zip_from_its_first_byte_reaches_torch_load(monkeypatch):
    buf = io.BytesIO()
    torch.save(torch.arange(3.0), buf, _use_new_zipfile_serialization=False)  # the legacy format
    legacy = buf.getvalue()
    zipped = _saved(torch.arange(3.0))
    for data in (legacy, legacy + zipped, b"\0" * 16 + zipped, zipped + b"\0"):
        refused_before_torch_load(data, monkeypatch, match="not a message")


def _calls(*ops):
    return b"\x80\x02" + b"".join(ops) + b"."


BYTEARRAY = _calls(b"cbuiltins\nbytearray\n", b"J" + struct.pack("<i", 50 << 20), b"\x85R")
# _codecs.encode(x, "hex") again and again on the last result: 2^19 times 32 bytes from 600
HEX = _calls(b"c_codecs\nencode\nq\x00", b"X\x20\x00\x00\x00" + b"a" * 32,
             b"X\x06\x00\x00\x00latin1\x86Rq\x01",
             *[b"h\x00h\x01X\x03\x00\x00\x00hex\x86Rq\x01"] * 19)


@pytest.mark.parametrize("how, why", [
    ("bytearray", "calls builtins.bytearray"), ("hex", "calls _codecs.encode"),
    ("key with a NUL", "storage"), ("key an int", "storage"), ("storage on cuda", "storage"),
    ("protocol 4", "protocol 4")])
def test_a_pickle_that_does_more_than_data_is_refused(how, why, monkeypatch):
    obj = [torch.arange(4.0), torch.arange(4.0)]
    pickle = pickle_of(obj)
    # a second key for the first tensor's file: torch.load reads it once for each such key
    second = {"key with a NUL": b"X\x03\x00\x00\x000\x00x", "key an int": b"K\x00"}.get(how)
    if second:
        pickle = pickle.replace(b"X\x01\x00\x00\x001", second)
    pickle = {"bytearray": BYTEARRAY, "hex": HEX}.get(how, pickle)
    if how == "storage on cuda":
        pickle = pickle.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    if how == "protocol 4":
        pickle = b"\x80\x04" + pickle[2:]
    files = [f for f in repacked(obj, pickle) if not (second and f[0] == "archive/data/1")]
    refused_before_torch_load(zip_of(files), monkeypatch, why)


def test_the_zip_and_its_pickle_are_bounded(monkeypatch):
    obj = [torch.arange(4.0)]
    files = repacked(obj)
    twice = files + [stored("archive/DATA.PKL", pickle_of(list(range(10))))]  # miniz: ignoring case
    refused_before_torch_load(zip_of(twice), monkeypatch, match="names")
    many = files + [stored(f"archive/x{i}", b"") for i in range(wire.ENTRIES)]
    refused_before_torch_load(zip_of(many), monkeypatch, match="files, over the limit")
    big = pickle_of(list(range(wire.PICKLE // 2)))  # about 2.5 bytes an int
    assert len(big) > wire.PICKLE
    refused_before_torch_load(zip_of(repacked(obj, big)), monkeypatch, match="pickle of")


def test_damaged_messages_are_refused_as_messages():
    import random

    rng = random.Random(57)
    data = _saved(("result", wire.to_wire({"a": [1, 2.5, "x"], "t": torch.arange(6.0)}), {}, {},
                   None))
    for _ in range(300):
        bad = bytearray(data)
        for _ in range(rng.choice([1, 2, 4])):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            wire.check_archive(bytes(bad))
        except wire.WireError:
            pass


# -----------------------------------------------------------------------------
# 3. A flooded pipe: the reader holds at most its bound, and the writer blocks


def test_a_flooded_pipe_blocks_the_writer_and_not_the_judges_memory():
    r, w = os.pipe()
    reader = wire.Reader(r)
    written, cap = [0], 32 << 20  # without the bound, all 32 MB end up queued

    def flood():
        block = bytes(1 << 20)
        with contextlib.suppress(OSError):  # the reading end closed: the test is over
            while written[0] < cap:
                written[0] += os.write(w, block)

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    seen, still, deadline = -1, 0, time.monotonic() + 10
    while still < 6 and written[0] < cap and time.monotonic() < deadline:  # 0.3 s still
        time.sleep(0.05)
        still, seen = (still + 1, seen) if written[0] == seen else (0, written[0])
    queued = sum(map(len, list(reader.chunks.queue)))
    try:
        assert queued <= wire.AHEAD * wire.CHUNK
        # the queue, one chunk in the reader's hand, the pipe's own buffer (the kernel's)
        assert written[0] <= (wire.AHEAD + 2) * wire.CHUNK < cap
        assert writer.is_alive()  # blocked on its own write
        start = time.monotonic()
        reader.close()  # a full queue, a chunk in hand: the thread still ends at once
        assert time.monotonic() - start < 1 and not reader.thread.is_alive()
    finally:
        reader.close(timeout=1)
        os.close(r)  # the writer's next write fails: it ends
        writer.join(5)
        os.close(w)


def test_the_readers_thread_ends_when_its_worker_is_killed_with_the_queue_full():
    # Pool.kill: the worker killed mid-flood, then the reader closed (the thread joined)
    flood = "import os\nwhile True: os.write(1, bytes(1 << 20))"
    proc = subprocess.Popen([sys.executable, "-c", flood], stdout=subprocess.PIPE)
    reader = wire.Reader(proc.stdout.fileno())
    try:
        deadline = time.monotonic() + 10
        while not reader.chunks.full() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reader.chunks.full()
        proc.kill()
        proc.wait()
        start = time.monotonic()
        reader.close()
        assert time.monotonic() - start < 1 and not reader.thread.is_alive()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_dropped_reader_ends_its_thread_and_reads_keep_their_rules():
    r, w = os.pipe()
    try:
        reader = wire.Reader(r)
        os.write(w, b"abc")
        assert reader.read(2, deadline=time.monotonic() + 5) == b"ab"
        with pytest.raises(TimeoutError):  # nothing more comes yet: the deadline holds
            reader.read(2, deadline=time.monotonic() + 0.2)
        thread = reader.thread
        del reader
        gc.collect()
        os.write(w, b"d")  # the thread wakes, sees it is no longer wanted, and ends
        thread.join(2)
        assert not thread.is_alive()
    finally:
        os.close(w)
        os.close(r)
    r, w = os.pipe()
    reader = wire.Reader(r)
    os.write(w, b"abc")
    os.close(w)
    try:
        assert reader.read(2) == b"ab"
        for _ in range(3):  # the end, at every later read
            with pytest.raises(EOFError):
                reader.read(2, deadline=time.monotonic() + 5)
        assert reader.read(1) == b"c"
    finally:
        reader.close()
        os.close(r)
