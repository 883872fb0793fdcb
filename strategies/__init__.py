"""The built-in strategies, installed as ``treduda.strategies``.

Importing this package registers them; third-party strategies register themselves the same way,
with the :func:`treduda.strategy.register` class decorator.
"""

from treduda.strategy import Strategy, available, get, register

from .baseline import ThreadPerElement

__all__ = ["Strategy", "ThreadPerElement", "available", "get", "register"]
