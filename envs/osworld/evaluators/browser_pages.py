"""OSWorld evaluators for Chromium's pages: the active tab's URL, HTML and accessibility tree, relative-time rules.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
