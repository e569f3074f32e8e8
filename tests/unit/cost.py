"""Cost as a count, not a clock: the lines of gpuvalues/ that a call executes.

Unit tests bound the work a call does with this (deterministic on any machine, under any
load); wall-clock figures belong in bench/.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import gpuvalues

_PACKAGE = str(Path(gpuvalues.__file__).resolve().parent)


def lines_run(fn, *args, **kwargs):
    """(result or raised exception, lines of gpuvalues/ executed) of fn(*args, **kwargs)."""
    count = 0
    ours: dict = {}

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def call(frame, event, arg):
        f = frame.f_code.co_filename
        mine = ours.get(f)
        if mine is None:
            mine = ours[f] = f.startswith(_PACKAGE)
        return local if mine else None

    old = sys.gettrace()
    sys.settrace(call)
    threading.settrace(call)
    try:
        out = fn(*args, **kwargs)
    except Exception as e:          # the caller asserts what was raised
        out = e
    finally:
        sys.settrace(old)
        threading.settrace(None)
    return out, count
