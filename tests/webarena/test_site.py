"""The shopping site without a browser: seed determinism and size, and the HTTP flows through Flask's client."""
from __future__ import annotations

import sqlite3
import time

import pytest

from envs.webarena.site import CUSTOMER_EMAIL, CUSTOMER_PASSWORD, create_app, create_database
from envs.webarena.site.seed import generate


def test_seed_is_deterministic_and_large_enough():
    a, b = generate(), generate()
    assert a == b
    assert generate(seed=1) != a
    assert len(a["products"]) >= 1000
    assert len(a["categories"]) >= 20
    assert len(a["reviews"]) >= 2000
    emma = [o for o in a["orders"] if o["customer_id"] == 1]
    assert len(emma) >= 40
    assert {"complete", "canceled", "pending", "processing"} <= {o["status"] for o in emma}
    years = {o["created_at"][:4] for o in emma}
    assert years == {"2022", "2023"}


def test_database_seeds_fast_and_refuses_to_overwrite(tmp_path):
    t0 = time.perf_counter()
    path = create_database(tmp_path / "shop.db")
    assert time.perf_counter() - t0 < 5.0
    con = sqlite3.connect(path)
    assert con.execute("select count(*) from products").fetchone()[0] >= 1000
    con.close()
    with pytest.raises(FileExistsError):
        create_database(path)


@pytest.fixture()
def client(tmp_path):
    app = create_app(tmp_path / "shop.db")
    c = app.test_client()
    r = c.post("/customer/login", data={"email": CUSTOMER_EMAIL, "password": CUSTOMER_PASSWORD})
    assert r.status_code == 302
    return c


def test_wrong_password_is_rejected(tmp_path):
    c = create_app(tmp_path / "shop.db").test_client()
    r = c.post("/customer/login", data={"email": CUSTOMER_EMAIL, "password": "nope"})
    assert r.status_code == 200 and b"sign-in was incorrect" in r.data
    assert c.get("/cart").status_code == 302  # still signed out


def test_listing_sorts_and_paginates(client):
    r = client.get("/category/shoes?sort=price&dir=asc&limit=48&page=1")
    assert b"Items 1-48 of 50" in r.data
    r2 = client.get("/category/shoes?sort=price&dir=asc&limit=48&page=2")
    assert b"Items 49-50 of 50" in r2.data


def test_search_shows_count(client):
    r = client.get("/search?q=backpack")
    assert b'results for "backpack"' in r.data


def test_checkout_uses_fixed_clock_and_next_order_id(client):
    r = client.post("/checkout", data={"address_id": "1", "shipping_method": "express", "payment_method": "checkmo"})
    assert r.status_code == 302
    oid = int(r.headers["Location"].rstrip("/").split("/")[-1])
    page = client.get(f"/sales/order/view/{oid}").data.decode()
    assert "Order Date: 2023-06-01" in page and "Status: Pending" in page and "Express" in page
    assert "no items" in client.get("/cart", follow_redirects=True).data.decode()


def test_reorder_review_wishlist_address_flows(client):
    con_orders = client.get("/sales/order/history").data.decode()
    assert "Canceled" in con_orders or "Complete" in con_orders
    assert client.post("/wishlist/add/5").status_code == 302
    assert "wishlist-item" in client.get("/wishlist").data.decode()
    r = client.post("/product/5/review", data={"rating": "4", "nickname": "Emma", "title": "T", "body": "B"})
    assert r.status_code == 302
    assert "Rating: 4 out of 5" in client.get("/product/5").data.decode()
    r = client.post("/customer/address/edit/1", data={"full_name": "Emma Lopez", "street": "1 New St", "city": "Austin",
                                                      "state": "TX", "zip": "78701", "country": "United States",
                                                      "phone": "1", "is_default": "1"})
    assert r.status_code == 302
    assert "1 New St" in client.get("/customer/address").data.decode()


def test_invalid_form_input_is_reported_not_stored(client):
    r = client.post("/cart/add/1", data={"qty": "1"}, follow_redirects=True)
    assert b"Please choose a size" in r.data
    r = client.post("/product/5/review", data={"rating": "9", "nickname": "E", "title": "t", "body": "b"},
                    follow_redirects=True)
    assert b"Please select a rating" in r.data
