"""Database schema and connection helpers of the shopping site (SQLite through SQLAlchemy Core).

Owns: the table definitions, the site's fixed clock (``NOW``), money formatting and engine creation.
Does not own: seed data (``seed.py``) or HTTP handling (``app.py``).

Money is stored as integer cents everywhere; dates as ISO strings (``YYYY-MM-DD HH:MM:SS``).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from sqlalchemy import (Column, Float, ForeignKey, Integer, MetaData, String, Table, Text, create_engine,
                        event)
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

#: The site's "current time". The app never reads the wall clock: new orders and reviews are stamped with
#: NOW, so evaluations (e.g. "orders placed today") are stable across runs.
NOW = _dt.datetime(2023, 6, 1, 12, 0, 0)
NOW_STR = NOW.strftime("%Y-%m-%d %H:%M:%S")

metadata = MetaData()

categories = Table(
    "categories", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String, nullable=False, unique=True),
    Column("slug", String, nullable=False, unique=True),
    Column("description", Text, nullable=False),
)

products = Table(
    "products", metadata,
    Column("id", Integer, primary_key=True),
    Column("sku", String, nullable=False, unique=True),
    Column("name", String, nullable=False, unique=True),
    Column("category_id", Integer, ForeignKey("categories.id"), nullable=False, index=True),
    Column("price_cents", Integer, nullable=False),
    Column("description", Text, nullable=False),
    Column("sizes", String, nullable=False, default=""),    # comma-separated, "" = no size option
    Column("colors", String, nullable=False, default=""),   # comma-separated, "" = no color option
    Column("rating", Float, nullable=False, default=0.0),   # mean review rating, 0 when no reviews
    Column("review_count", Integer, nullable=False, default=0),
)

reviews = Table(
    "reviews", metadata,
    Column("id", Integer, primary_key=True),
    Column("product_id", Integer, ForeignKey("products.id"), nullable=False, index=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=True),
    Column("nickname", String, nullable=False),
    Column("rating", Integer, nullable=False),
    Column("title", String, nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", String, nullable=False),
)

customers = Table(
    "customers", metadata,
    Column("id", Integer, primary_key=True),
    Column("email", String, nullable=False, unique=True),
    Column("password_sha256", String, nullable=False),
    Column("first_name", String, nullable=False),
    Column("last_name", String, nullable=False),
)

addresses = Table(
    "addresses", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False, index=True),
    Column("full_name", String, nullable=False),
    Column("street", String, nullable=False),
    Column("city", String, nullable=False),
    Column("state", String, nullable=False),
    Column("zip", String, nullable=False),
    Column("country", String, nullable=False),
    Column("phone", String, nullable=False),
    Column("is_default", Integer, nullable=False, default=0),
)

orders = Table(
    "orders", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False, index=True),
    Column("created_at", String, nullable=False),
    Column("status", String, nullable=False),  # pending, processing, complete, canceled, closed
    Column("ship_to", Text, nullable=False),   # one-line address as rendered on the order
    Column("shipping_method", String, nullable=False),
    Column("shipping_cents", Integer, nullable=False),
    Column("payment_method", String, nullable=False),
    Column("subtotal_cents", Integer, nullable=False),
    Column("total_cents", Integer, nullable=False),
)

order_items = Table(
    "order_items", metadata,
    Column("id", Integer, primary_key=True),
    Column("order_id", Integer, ForeignKey("orders.id"), nullable=False, index=True),
    Column("product_id", Integer, ForeignKey("products.id"), nullable=False),
    Column("name", String, nullable=False),
    Column("sku", String, nullable=False),
    Column("options", String, nullable=False, default=""),  # e.g. "Size: M, Color: Blue"
    Column("price_cents", Integer, nullable=False),
    Column("qty", Integer, nullable=False),
)

cart_items = Table(
    "cart_items", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False, index=True),
    Column("product_id", Integer, ForeignKey("products.id"), nullable=False),
    Column("options", String, nullable=False, default=""),
    Column("qty", Integer, nullable=False),
)

wishlist_items = Table(
    "wishlist_items", metadata,
    Column("id", Integer, primary_key=True),
    Column("customer_id", Integer, ForeignKey("customers.id"), nullable=False, index=True),
    Column("product_id", Integer, ForeignKey("products.id"), nullable=False),
    Column("added_at", String, nullable=False),
)

#: Shipping methods offered at checkout: code -> (label, cost in cents).
SHIPPING_METHODS = {
    "flatrate": ("Flat Rate", 500),
    "express": ("Express", 1500),
    "pickup": ("Store Pickup", 0),
}
#: Payment methods offered at checkout: code -> label.
PAYMENT_METHODS = {
    "checkmo": "Check / Money order",
    "card": "Credit Card (on delivery)",
}
ORDER_STATUSES = ("pending", "processing", "complete", "canceled", "closed")


def money(cents: int) -> str:
    """Format integer cents as the site shows money, e.g. ``123456 -> "$1,234.56"``."""
    return f"${cents / 100:,.2f}"


def make_engine(db_path: str | Path) -> Engine:
    """Return an engine for the SQLite file at ``db_path`` (foreign keys on, no connection pooling state)."""
    # NullPool: no connection outlives its request, so the file can be replaced between tasks (tests copy a
    # pristine database over it) and a CRIU snapshot never catches a half-used connection.
    engine = create_engine(f"sqlite:///{Path(db_path)}", future=True, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # noqa: ANN001 - SQLAlchemy callback signature
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return engine
