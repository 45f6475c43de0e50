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
"""

import contextlib
import io
import os
import queue
import struct
import threading
import time
from dataclasses import asdict

LIMIT = 64 << 20  # bytes a message may hold, and bytes the judge may build from one
NODES = 1_000_000  # values the judge may build from one message
DEPTH = 32  # nesting of lists, tuples and dicts
TAG = "__nanonope__"  # (TAG, kind, payload): a value that is not plain data


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
    with a deadline on every OS (select() does not take pipes on Windows)."""

    def __init__(self, fd):
        self.fd, self.chunks, self.buffer = fd, queue.Queue(), bytearray()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except OSError:
                chunk = b""
            self.chunks.put(chunk)
            if not chunk:
                return

    def read(self, n, deadline=None):
        """n bytes; EOFError when the pipe closed first, TimeoutError past deadline."""
        while len(self.buffer) < n:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError
            try:
                chunk = self.chunks.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError from None
            if not chunk:
                self.chunks.put(chunk)  # and at every later read
                raise EOFError
            self.buffer += chunk
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out


def receive(reader, deadline=None):
    """The next message from a Reader; EOFError when the other side is gone, TimeoutError past
    deadline (time.monotonic()), WireError when it is not a message."""
    import torch  # the worker sets its bounds before PyTorch loads (remote.main)

    (n,) = struct.unpack("<Q", reader.read(8, deadline))
    if n > LIMIT:
        raise WireError(f"a message of {n >> 20} MB announced, over the limit of {LIMIT >> 20} MB")
    try:
        return torch.load(io.BytesIO(reader.read(n, deadline)), weights_only=True)
    except (EOFError, TimeoutError):
        raise
    except Exception as e:  # noqa: BLE001  (any bytes may arrive: refuse them, never run them)
        raise WireError(f"not a message ({type(e).__name__})") from None


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
            if not isinstance(dtype, str) or not isinstance(value, (bool, int, float)):
                raise WireError("a numpy scalar that is not one")
            return np.dtype(dtype).type(value)
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
