"""Values a process makes once and shares between its threads (kernels, plans, an OpenCL
queue): :func:`once_per_key` is ``functools.lru_cache`` that also makes each value once when
many threads ask for it at the same time, where ``lru_cache`` alone lets each thread make its
own (a search each, or two OpenCL contexts whose programs and queues do not mix)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def once_per_key(maxsize: int | None) -> Callable[[F], F]:
    """Keep up to ``maxsize`` values (None: all) by positional arguments, as
    ``functools.lru_cache`` does; the first thread to ask for a value makes it while the others
    asking for the same wait and take it; those asking for other values go on. A call that
    raises keeps nothing, so the next one tries again. ``cache_clear`` and ``cache_info`` are
    ``lru_cache``'s."""

    def decorate(function: F) -> F:
        cached = functools.lru_cache(maxsize)(function)
        guard = threading.Lock()
        making: dict[Hashable, tuple[threading.Lock, list[int]]] = {}  # key -> lock, askers

        @functools.wraps(function)
        def once(*args: Hashable) -> Any:
            with guard:
                lock, askers = making.setdefault(args, (threading.Lock(), [0]))
                askers[0] += 1
            try:
                with lock:
                    return cached(*args)
            finally:
                with guard:
                    askers[0] -= 1
                    if not askers[0]:
                        del making[args]

        once.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        once.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return once  # type: ignore[return-value]

    return decorate
