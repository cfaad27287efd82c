"""OSWorld evaluators for Thunderbird's profile (prefs.js, message filters).

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
