"""OSWorld evaluators for Writer documents (.docx/.odt) beyond the text and table comparisons in metrics.py.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
"""

from __future__ import annotations
