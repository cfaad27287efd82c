"""The WebArena-style shopping site ("One Stop Shop"): a Flask + SQLite web shop with deterministic seed data.

Owns: the site's schema (``db``), seed data (``seed``), HTTP app (``app``) and command line (``__main__``).
Run it with ``python -m envs.webarena.site --db PATH --port P --host 127.0.0.1``; the database is created and
seeded when PATH does not exist. The site's clock is fixed at ``db.NOW`` (2023-06-01 12:00).

Task customer: ``emma.lopez@example.com`` / ``Password.123``.
"""
from .app import create_app
from .db import NOW
from .seed import CUSTOMER_EMAIL, CUSTOMER_PASSWORD, DEFAULT_SEED, create_database

__all__ = ["create_app", "create_database", "NOW", "CUSTOMER_EMAIL", "CUSTOMER_PASSWORD", "DEFAULT_SEED"]
