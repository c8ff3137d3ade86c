"""A local pool's worker: one process, one device, tasks in and records out.

    python -m rapid_llm.bench.sweeps.worker      # started by rapid_llm.bench.sweeps.local.LocalPool

Messages on stdin and on the original stdout are length-prefixed pickles between a
pool and the process it started (nothing else writes to that pipe: anything printed
goes to stderr, which the pool keeps for a crash's report). The first message out
is ``("hello", Environment)``; then each ``("task", Task)`` in is answered by
``("done", [Record, ...])``. It exits at end of input.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Any, BinaryIO

_HEADER = struct.Struct("<Q")


def send(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_exact(stream: BinaryIO, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream: BinaryIO) -> Any:
    """The next message, or None at end of input."""
    head = read_exact(stream, _HEADER.size)
    if head is None:
        return None
    body = read_exact(stream, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def main() -> int:
    channel = os.fdopen(os.dup(1), "wb")  # the pool's pipe; fd 1 becomes stderr, so prints cannot corrupt it
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from rapid_llm.bench.sweeps.tasks import environment, run_task

    label = os.environ.get("RAPID_LLM_SWEEP_WORKER", f"pid {os.getpid()}")
    send(channel, ("hello", environment()))
    stdin = sys.stdin.buffer
    while True:
        message = receive(stdin)
        if message is None:
            return 0
        kind, task = message
        if kind == "task":
            send(channel, ("done", run_task(task, worker=label)))


if __name__ == "__main__":
    sys.exit(main())
