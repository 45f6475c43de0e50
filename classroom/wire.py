"""
What crosses between the judge and the worker (classroom/remote.py): data only, bounded.

A message is an 8-byte length, then torch.save's bytes, read back with
torch.load(weights_only=True) (nothing else is unpickled), at most LIMIT bytes. Its values:
tensors, numpy arrays, numbers, strings, None, and lists, tuples and dicts of them. Arguments
that are not data cross as (TAG, kind, payload): a model by number (its state beside it), an
iterator by number, torch.autocast and contextlib.nullcontext by their settings.

The judge reads what a student's code sent, so what it builds from a message is counted while
it is built (Budget): values, nesting depth and the bytes of tensors and strings. Pickle's
shared references cannot make a small message expand in the judge, and a tensor must own its
storage exactly (no strides or offsets into a larger one).

torch.load is not bounded by its input: it inflates compressed files, reads any other format
with its legacy loader (which allocates what the pickle declares), and its weights_only
unpickler calls bytearray, _codecs.encode and the tensor constructors with any arguments (816
bytes made it allocate 50 MB, and a 1.5 MB archive 1.5 GB). So a message is checked before
torch.load sees it (check_archive): the zip torch.save writes, each file STORED, and a pickle
made only of what torch.save writes for data (check_pickle).

The judge's bound for one message, whatever the worker sends (the defaults in brackets):
- read ahead of the judge's reads: at most (AHEAD + 1) x CHUNK bytes [5 MB]; a worker that
  sends more blocks on its own write;
- the message: at most LIMIT bytes [64 MB], and a second copy while they are put together;
- what torch.load builds from it: the tensors' bytes, at most LIMIT [64 MB] (the files'
  declared sizes, summed; each read once), and the pickle's objects, at most about 100 bytes
  a byte of the pickle, which holds at most PICKLE bytes [1 MB: about 100 MB];
- what from_wire builds: new lists, tuples and dicts for at most NODES values [about 100 MB],
  the tensors shared.
In all under 400 MB [5 + 2 x 64 + 64 + 100 + 100 = 397 MB], one message at a time; the
judge's own data (its tests, the model, PyTorch) comes on top. Measured (2026-12-07): a 64 MB
message of one tensor raised the judge's peak by 126 MB, and the worst found, a 64 MB message
whose 1 MB pickle is a million empty dicts (refused by Budget), by 208 MB.
"""

import contextlib
import functools
import io
import os
import pickletools
import queue
import re
import struct
import threading
import time
import weakref
from dataclasses import asdict

LIMIT = 64 << 20  # bytes a message may hold, and bytes of tensors the judge may build from one
PICKLE = 1 << 20  # bytes of a message's pickle (its structure: the tensors' bytes lie beside it)
ENTRIES = 10_000  # files in a message's zip (the pickle, five records, one file a tensor)
NODES = 1_000_000  # values the judge may build from one message
DEPTH = 32  # nesting of lists, tuples and dicts
CHUNK = 1 << 20  # bytes the reader takes from the pipe at a time
AHEAD = 4  # chunks the reader holds that no read has taken yet (one more in its hand)
TAG = "__nanonope__"  # (TAG, kind, payload): a value that is not plain data
# the numpy scalar types to_wire sends (dtype.str): bool, and the ints and floats of at most
# 8 bytes in either byte order; np.dtype() of any other string may build anything (a void
# type of gigabytes)
NPSCALARS = frozenset(["|b1", "|i1", "|u1"] + [order + kind + str(size) for order in "<>"
                                                 for kind in "iuf" for size in (2, 4, 8)])


class WireError(Exception):
    """A message that breaks the rules (too big, too deep, not data, not understood)."""


def send(fd, obj):
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    if len(data) > LIMIT:
        raise WireError(f"a message of {len(data) >> 20} MB, over the limit of {LIMIT >> 20} MB")
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class Reader:
    """The reading end of a pipe. A thread moves what arrives into a queue, so a read can wait
    with a deadline on every OS (select() does not take pipes on Windows). The queue holds at
    most AHEAD chunks of at most CHUNK bytes, and the thread one more in its hand: past that,
    a writer that floods the pipe blocks on its own write. close() (or dropping the Reader)
    ends the thread at its next chunk, even one waiting for room in a full queue."""

    def __init__(self, fd):
        self.fd, self.chunks, self.buffer = fd, queue.Queue(AHEAD), bytearray()
        self.eof = False
        self.stop = threading.Event()
        # the thread holds no reference to the Reader, so dropping it stops the thread
        self.thread = threading.Thread(target=_pump, args=(fd, self.chunks, self.stop),
                                       daemon=True)
        self.thread.start()
        weakref.finalize(self, self.stop.set)

    def read(self, n, deadline=None):
        """n bytes; EOFError when the pipe closed first (and at every later read that the
        bytes left cannot meet), TimeoutError past deadline."""
        while len(self.buffer) < n:
            if self.eof:
                raise EOFError
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError
            try:
                chunk = self.chunks.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError from None
            if not chunk:
                self.eof = True
                raise EOFError
            self.buffer += chunk
        with memoryview(self.buffer) as view:
            out = bytes(view[:n])  # one copy of a message, not two
        del self.buffer[:n]
        return out

    def close(self, timeout=5):
        """Stop reading: the thread ends once it holds no chunk the queue lacks room for (it
        is waited for up to timeout seconds, as a read of a pipe still open can block)."""
        self.stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self.chunks.get_nowait()
        self.thread.join(timeout)


def _pump(fd, chunks, stop):
    """Reader's thread: each chunk read from fd into chunks, b"" at the end; a put that finds
    the queue full waits, looking at stop every 0.1 s."""
    while not stop.is_set():
        try:
            chunk = os.read(fd, CHUNK)
        except OSError:
            chunk = b""
        while not stop.is_set():
            try:
                chunks.put(chunk, timeout=0.1)
                break
            except queue.Full:
                pass
        if not chunk:
            return


def receive(reader, deadline=None):
    """The next message from a Reader; EOFError when the other side is gone, TimeoutError past
    deadline (time.monotonic()), WireError when it is not a message (checked by check_archive
    before torch.load reads a byte of it)."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    (n,) = struct.unpack("<Q", reader.read(8, deadline))
    if n > LIMIT:
        raise WireError(f"a message of {n >> 20} MB announced, over the limit of {LIMIT >> 20} MB")
    data = reader.read(n, deadline)
    check_archive(data)
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001  (any bytes may arrive: refuse them, never run them)
        raise WireError(f"not a message ({type(e).__name__})") from None


# -----------------------------------------------------------------------------
# What torch.load may see: torch.save's zip, and in it a pickle of data


def check_archive(data):
    """Refuse (WireError) bytes from which torch.load could build more than they hold. The
    rules, each what torch.save writes:
    - a zip from its first byte (else torch.load reads the legacy format), its end record the
      last 22 bytes, its zip64 end record (if any) just before the locator that names it and
      its central directory just before them: so PyTorch's miniz reads the directory read here;
    - at most ENTRIES files, with names of at most 255 bytes, all in the first one's folder,
      none twice even ignoring case (miniz finds a name ignoring case);
    - each STORED (never inflated), its declared sizes equal, its bytes inside the message,
      the sizes summing to at most LIMIT (each file is read at its declared size, at most
      once: check_pickle lets a tensor name only files of digits);
    - the pickle (<folder>/data.pkl) at most PICKLE bytes, passing check_pickle."""
    n = len(data)

    def field(fmt, at):
        if at < 0 or at + struct.calcsize(fmt) > n:
            raise WireError("not a message (a zip cut short)")
        return struct.unpack_from(fmt, data, at)

    if data[:4] != b"PK\x03\x04":
        raise WireError("not a message (not a zip)")
    sig, disk, cd_disk, count, total, cd_size, cd_at, comment = field("<4sHHHHIIH", n - 22)
    if sig != b"PK\x05\x06" or comment or disk or cd_disk or count != total:
        raise WireError("not a message (a zip's end record, not torch.save's)")
    end = n - 22
    if field("<4s", n - 42)[0] == b"PK\x06\x07":  # zip64: torch.save writes its records too
        _, disk, at64, disks = field("<4sIQI", n - 42)
        sig, size, _, _, disk64, cd_disk, count64, total64, size64, at = field(
            "<4sQHHIIQQQQ", n - 98)
        if (sig != b"PK\x06\x06" or size != 44 or at64 != n - 98 or disk or disks != 1
                or disk64 or cd_disk or count64 != total64):
            raise WireError("not a message (a zip64 end record, not torch.save's)")
        for short, long, sentinel in ((count, count64, 0xFFFF), (cd_size, size64, 0xFFFFFFFF),
                                      (cd_at, at, 0xFFFFFFFF)):
            if short not in (long, sentinel):
                raise WireError("not a message (two end records that differ)")
        count, cd_size, cd_at, end = count64, size64, at, n - 98
    if count > ENTRIES:
        raise WireError(f"a message of {count:,} files, over the limit of {ENTRIES:,}")
    if cd_at + cd_size != end:
        raise WireError("not a message (a zip's directory not where its end record says)")
    names, stored, at, pickle = set(), 0, cd_at, None
    for _ in range(count):
        (sig, method, comp, size, name_len, extra, note, disk, header) = field(
            "<4s6xH8xIIHHHH6xI", at)
        name = data[at + 46 : at + 46 + name_len].lower()
        at += 46 + name_len
        if sig != b"PK\x01\x02" or extra or note or disk or at > end or name_len > 255:
            raise WireError("not a message (a zip's directory, not torch.save's)")
        if method != 0 or comp != size:
            raise WireError("a message with a compressed file (torch.save stores them)")
        if not names:
            folder = name.split(b"/")[0]  # miniz's too: the folder of the first file
        if not name.startswith(folder + b"/") or name in names:
            raise WireError("not a message (a zip's names, not torch.save's)")
        names.add(name)
        sig, local_name, local_extra = field("<4s22xHH", header)
        start = header + 30 + local_name + local_extra
        if sig != b"PK\x03\x04" or start + size > cd_at:
            raise WireError("not a message (a file outside the zip)")
        stored += size
        if stored > LIMIT:
            raise WireError(f"a message that unpacks to over {LIMIT >> 20} MB")
        if name == folder + b"/data.pkl":
            pickle = (start, size)
    if at != end or pickle is None:
        raise WireError("not a message (a zip's directory, not torch.save's)")
    start, size = pickle
    if size > PICKLE:
        raise WireError(f"a message's pickle of {size >> 10} KB, over the limit of "
                        f"{PICKLE >> 10} KB")
    check_pickle(data[start : start + size])


OTHER = ("value",)  # what check_pickle knows of a value it does not follow
SINGLE = {  # an opcode that pushes one value and does nothing else: what check_pickle knows of it
    "BINUNICODE": lambda arg, memo: ("str", arg),
    "GLOBAL": lambda arg, memo: ("global", arg),
    "BINGET": lambda arg, memo: memo.get(arg, OTHER),
    "LONG_BINGET": lambda arg, memo: memo.get(arg, OTHER),
    "BININT": lambda arg, memo: ("int", arg),
    "BININT1": lambda arg, memo: ("int", arg),
    "BININT2": lambda arg, memo: ("int", arg),
    "LONG1": lambda arg, memo: ("int", arg),
    "EMPTY_TUPLE": lambda arg, memo: ("()",),
    "NONE": lambda arg, memo: OTHER,
    "NEWTRUE": lambda arg, memo: OTHER,
    "NEWFALSE": lambda arg, memo: OTHER,
    "BINFLOAT": lambda arg, memo: OTHER,
    "EMPTY_LIST": lambda arg, memo: OTHER,
    "EMPTY_DICT": lambda arg, memo: OTHER,
}
# the rest of what torch.save writes for data (protocol 2); any other opcode is refused
OTHERS = {"PROTO", "STOP", "MARK", "BINPUT", "LONG_BINPUT", "TUPLE", "TUPLE1", "TUPLE2",
          "TUPLE3", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "REDUCE", "BINPERSID"}
# a tensor: v3 for the dtypes without a storage type of their own (uint16, float8, ...)
REBUILD = {("global", f"torch._utils _rebuild_tensor_v{n}") for n in (2, 3)}
ORDERED = ("global", "collections OrderedDict")  # a tensor's backward hooks, empty
# a storage's type in its id: torch.FloatStorage and the like, or UntypedStorage (for v3)
STORAGE = re.compile(r"torch [A-Za-z0-9]+Storage|torch\.storage UntypedStorage")
DIGITS = re.compile(r"[0-9]+")  # a storage's key: the file data/<key>


@functools.cache
def dtypes():
    """The GLOBAL names of torch's dtypes ("torch uint16"), which v3 takes as an argument."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    return frozenset(f"torch {name}" for name, value in vars(torch).items()
                     if isinstance(value, torch.dtype))


def check_pickle(pickle):
    """Refuse (WireError) a pickle that does more than torch.save writes for data. Read
    opcode by opcode (pickletools, which builds nothing), following the stack only as far as
    needed: containers, numbers, strings, None and booleans, and what makes a tensor:
    _rebuild_tensor_v2 or v3 called on a tuple, its backward hooks collections.OrderedDict
    called on (), its storage a persistent id ("storage", torch.<Type>Storage or
    UntypedStorage, a key of digits, "cpu", an int), its dtype (v3) a name of torch's. So no
    other function runs (bytearray, _codecs.encode and the tensor constructors
    allocate what their arguments say), and each storage's key names one file (a key with a
    NUL in it named the file before the NUL, once for each such key)."""
    memo, groups, top, last, before = {}, [], OTHER, (None, None), (None, None)
    try:
        for op, arg, _ in pickletools.genops(pickle):
            name = op.name
            if name == "GLOBAL" and ("global", arg) not in REBUILD | {ORDERED} and not (
                    STORAGE.fullmatch(arg) or arg in dtypes()):
                raise WireError(f"a message that calls {arg.replace(' ', '.')[:100]}")
            if name == "PROTO" and arg > 2:
                raise WireError(f"a message in pickle's protocol {arg} (torch.save writes 2)")
            if name in ("BINPUT", "LONG_BINPUT"):
                memo[arg] = top  # the value on top, which BINPUT leaves there
                continue
            if name in SINGLE:
                top = SINGLE[name](arg, memo)
                if groups and len(groups[-1]["items"]) < 5:  # a storage's id holds 5
                    groups[-1]["items"].append(top)
                elif groups:
                    groups[-1]["flat"] = False
            elif name in OTHERS:
                closed = None
                if name == "MARK":
                    if len(groups) > DEPTH + 8:
                        raise WireError(f"values nested deeper than {DEPTH} levels")
                    if groups:
                        groups[-1]["flat"] = False
                    groups.append({"under": top, "items": [], "flat": True})
                elif name in ("TUPLE", "APPENDS", "SETITEMS"):
                    if not groups:
                        raise WireError("not a message (a pickle without its mark)")
                    closed = groups.pop()
                elif name == "REDUCE" and not (
                        (last[0] == "EMPTY_TUPLE" and before[1] == ORDERED)
                        or (last[0] == "TUPLE" and last[1]["under"] in REBUILD)):
                    raise WireError("a message that calls a function that does not build data")
                elif name == "BINPERSID" and not (last[0] == "TUPLE" and _storage_id(last[1])):
                    raise WireError("a message with a storage that is not torch.save's")
                if groups and name not in ("MARK", "PROTO", "STOP"):
                    groups[-1]["flat"] = False
                top, before, last = OTHER, last, (name, closed)
                continue
            else:
                raise WireError(f"a message whose pickle holds {name}")
            before, last = last, (name, top)
    except ValueError as e:  # pickletools: an unknown opcode, an argument cut short
        raise WireError(f"not a message ({e})") from None


def _storage_id(group):
    """Whether a MARK ... TUPLE group is a storage's persistent id as torch.save writes it."""
    items = group["items"]
    return (group["flat"] and len(items) == 5 and items[0] == ("str", "storage")
            and items[1][0] == "global" and bool(STORAGE.fullmatch(items[1][1]))
            and items[2][0] == "str" and bool(DIGITS.fullmatch(items[2][1]))
            and items[3] == ("str", "cpu") and items[4][0] == "int")


# -----------------------------------------------------------------------------
# Values


def to_wire(obj, refs=None):
    """obj as plain data and tensors. refs (remote.Refs) lets models, iterators and precision
    contexts cross as stand-ins; without it (results, states) only data."""
    import numpy as np  # the worker sets its bounds before PyTorch loads (remote.main)
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) or obj.layout != torch.strided:
            raise WireError(f"a {type(obj).__name__} tensor ({obj.layout}) is not data")
        t = obj.detach().clone(memory_format=torch.contiguous_format)
        return t.requires_grad_(True) if obj.requires_grad and t.is_floating_point() else t
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise WireError(f"a numpy array of {obj.dtype} is not data here")
        return (TAG, "ndarray", torch.from_numpy(np.ascontiguousarray(obj)).clone())
    if isinstance(obj, (np.bool_, np.integer, np.floating)):
        if obj.dtype.str not in NPSCALARS:
            raise WireError(f"a numpy {obj.dtype} is not data here")
        return (TAG, "npscalar", (obj.dtype.str, obj.item()))
    if isinstance(obj, (list, tuple)):
        items = [to_wire(x, refs) for x in obj]
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, dict):
        return {to_wire(k): to_wire(v, refs) for k, v in obj.items()}
    if refs is None:
        raise WireError(f"a {type(obj).__name__} is not data")
    if isinstance(obj, contextlib.nullcontext):
        return (TAG, "nullcontext", None)
    if isinstance(obj, torch.autocast):
        dtype = str(obj.fast_dtype).removeprefix("torch.")
        return (TAG, "autocast", (obj.device, dtype, bool(obj._enabled)))
    if isinstance(obj, torch.nn.Module) and hasattr(obj, "config"):
        return (TAG, "model", refs.add(obj, "model"))
    if hasattr(obj, "__next__"):
        return (TAG, "iterator", refs.add(obj, "iterator"))
    raise WireError(f"the grader cannot pass a {type(obj).__name__} to the student's function")


class Budget:
    """What the judge may still build from one message."""

    def __init__(self, nodes=NODES, nbytes=LIMIT):
        self.nodes, self.nbytes = nodes, nbytes

    def take(self, nodes=1, nbytes=0):
        self.nodes -= nodes
        self.nbytes -= nbytes
        if self.nodes < 0:
            raise WireError(f"a message that expands to over {NODES:,} values")
        if self.nbytes < 0:
            raise WireError(f"a message that expands to over {LIMIT >> 20} MB")


def from_wire(obj, make=None, budget=None, depth=0):
    """The inverse of to_wire. make(kind, payload) builds the stand-ins a call's arguments hold
    (the worker's); without it only data is accepted (the judge reading what came back), each
    value counted against budget (a fresh Budget when none is given)."""
    import numpy as np  # the worker sets its bounds before PyTorch loads (remote.main)
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    budget = Budget() if budget is None else budget
    budget.take()
    if depth > DEPTH:
        raise WireError(f"values nested deeper than {DEPTH} levels")
    if isinstance(obj, tuple) and len(obj) == 3 and obj[0] == TAG:
        kind, payload = obj[1], obj[2]
        if kind == "ndarray" and isinstance(payload, torch.Tensor):
            return from_wire(payload, make, budget, depth + 1).numpy()
        if kind == "npscalar" and isinstance(payload, tuple) and len(payload) == 2:
            dtype, value = payload
            # the allow-list first: np.dtype() of any string may build anything
            if (not isinstance(dtype, str) or dtype not in NPSCALARS
                    or not isinstance(value, (bool, int, float))):
                raise WireError("a numpy scalar that is not one to_wire sends")
            try:
                return np.dtype(dtype).type(value)
            except (OverflowError, ValueError, TypeError):
                raise WireError(f"a numpy scalar out of its type's range ({dtype})") from None
        if make is None:
            raise WireError(f"a {kind} where only data may come back")
        return make(kind, payload)
    if isinstance(obj, (list, tuple)):
        items = [from_wire(x, make, budget, depth + 1) for x in obj]
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, dict):
        return {
            from_wire(k, None, budget, depth + 1): from_wire(v, make, budget, depth + 1)
            for k, v in obj.items()
        }
    if isinstance(obj, torch.Tensor):
        size = obj.numel() * obj.element_size()
        if (
            obj.layout != torch.strided
            or not obj.is_contiguous()
            or obj.storage_offset() != 0
            or obj.untyped_storage().nbytes() != size
        ):
            raise WireError("a tensor that does not own its storage exactly")
        budget.take(nbytes=size)
        return obj
    if isinstance(obj, str):
        budget.take(nbytes=len(obj))
        return obj
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    raise WireError(f"a {type(obj).__name__} is not data")


# -----------------------------------------------------------------------------
# Models: what a graded function may read or change of one, as data


def model_state(model):

    params = list(model.parameters())
    return {
        "config": asdict(model.config),
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "training": model.training,
        "requires_grad": [p.requires_grad for p in params],
        "grads": [None if p.grad is None else p.grad.detach().clone() for p in params],
    }


def load_model_state(model, state):
    """model takes state (model_state's), checked against model's own shapes."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    params = list(model.parameters())
    if (
        not isinstance(state, dict)
        or len(state.get("requires_grad", ())) != len(params)
        or len(state.get("grads", ())) != len(params)
    ):
        raise WireError("a model's state that does not fit the model")
    with torch.no_grad():
        model.load_state_dict(state["state"])
    model.train(bool(state["training"]))
    for p, flag, grad in zip(params, state["requires_grad"], state["grads"]):
        p.requires_grad_(bool(flag))
        if grad is not None and (not isinstance(grad, torch.Tensor) or grad.shape != p.shape):
            raise WireError("a gradient that does not fit its weight")
        p.grad = None if grad is None else grad.to(p.dtype)


def models_of(states):
    """{number: a GPT rebuilt from model_state's data}: the models a call's arguments name."""
    # the worker sets its bounds before PyTorch loads (remote.main)
    from model import GPT, GPTConfig

    models = {}
    for n, state in states.items():
        models[n] = GPT(GPTConfig(**state["config"]))
        load_model_state(models[n], state)
    return models


# -----------------------------------------------------------------------------
# The caller's modes: grad and CPU autocast, captured as data where a call is made and set
# again where it runs (the worker, or the student copy's replay)


def modes():
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    dtype = str(torch.get_autocast_dtype("cpu")).removeprefix("torch.")
    return {"grad": torch.is_grad_enabled(), "autocast": (torch.is_autocast_enabled("cpu"), dtype)}


def under(call):
    """A context that sets the modes captured in `call` (modes()'s keys)."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    enabled, dtype = call["autocast"]
    stack = contextlib.ExitStack()
    stack.enter_context(torch.set_grad_enabled(call["grad"]))
    stack.enter_context(torch.autocast("cpu", dtype=getattr(torch, dtype), enabled=enabled))
    return stack


def context(kind, payload):
    """A contextlib.nullcontext or torch.autocast argument, made again from to_wire's payload."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    if kind == "nullcontext":
        return contextlib.nullcontext()
    if kind == "autocast":
        device, dtype, enabled = payload
        return torch.autocast(device, dtype=getattr(torch, dtype), enabled=enabled)
    raise WireError(f"unknown kind {kind}")
