"""OSWorld evaluators for images (GIMP's domain): similarity, size, colour and geometry checks.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
