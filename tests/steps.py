"""Counting the work a function does, in executed Python lines, so that growth can be asserted
without timing anything (timings drift; line counts of the same input do not)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def python_steps(function: Callable[..., Any], *args: Any) -> int:
    """The number of Python lines `function(*args)` executes (C code such as `str.split` counts as
    one step, which is fine: what grows faster than its input is Python-level looping)."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(previous)
    return count


def growth(function: Callable[[Any], Any], small: Any, large: Any) -> float:
    """How many times more steps `function` takes on `large` than on `small`."""
    return python_steps(function, large) / max(1, python_steps(function, small))
