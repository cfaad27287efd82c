"""OSWorld evaluators for LibreOffice Impress presentations (.pptx) and Impress's settings.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
