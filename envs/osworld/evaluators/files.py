"""OSWorld evaluators for files of other kinds (PDF, archives, EPUB, HTML, MP3 tags, Python, SQLite) and VS Code's and the OS's settings.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
