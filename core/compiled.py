"""The compiled loops' switch: numba where it can be imported, unless ``SGM_NUMBA=0``.

Every module with a compiled loop (the intersection, the radix sort, match ids, the output's
byte placement) defines it under ``if AVAILABLE:`` with :data:`njit`, keeps a numpy version as its
fallback and the reference its tests compare with, and uses the compiled one where
:data:`ENABLED` says so. Compiled code is cached on disk (numba's ``cache=True``: ``__pycache__``
beside the module, or ``NUMBA_CACHE_DIR``; the container image sets it to ``/tmp/numba``).
"""

from __future__ import annotations

import os
from typing import Any

njit: Any
try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a dependency; numpy is the fallback
    njit = None
    AVAILABLE = False
else:
    AVAILABLE = True

#: ``SGM_NUMBA=0`` (or ``false``, ``no``, ``off``) runs every loop in numpy.
SWITCHED_OFF = os.environ.get("SGM_NUMBA", "1").strip().lower() in ("0", "false", "no", "off")

#: Whether the compiled loops are used.
ENABLED = AVAILABLE and not SWITCHED_OFF
