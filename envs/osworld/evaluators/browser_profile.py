"""OSWorld evaluators for Chromium's profile: settings, bookmarks, cookies, extensions (OSWorld's Chrome getters that read profile files).

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
