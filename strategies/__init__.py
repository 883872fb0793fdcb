"""The built-in strategies, installed as ``treduda.strategies``.

Importing this package registers them; third-party strategies register themselves the same way,
with the :func:`treduda.polyhedral.strategy.register` class decorator. Chain strategies with '+'
(``"tiled+staged"``) to compose a thread mapping with shared-memory staging.
"""

from treduda.polyhedral.strategy import Composite, Strategy, available, get, register

from .staging import Staged
from .tensorcore import TensorCore
from .tiling import ThreadPerElement, Tiled
from .warpgroup import Warpgroup

__all__ = ["Composite", "Staged", "Strategy", "TensorCore", "ThreadPerElement", "Tiled",
           "Warpgroup", "available", "get", "register"]
