"""OSWorld evaluators for VLC (its config and playing state), audio and video files.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
