"""The shopping site's Flask application: routes, queries and page rendering.

Owns: every HTTP endpoint of the site (catalogue, search, product pages, cart, checkout, customer account,
orders, address book, wish list, reviews) and the session handling (a signed cookie holding the customer id).
Does not own: the schema (``db.py``) or seed data (``seed.py``). The app never reads the wall clock: it stamps
new rows with ``db.NOW``. There is no JavaScript; every change is a plain form POST followed by a redirect.
"""
from __future__ import annotations

import math
from functools import wraps
from pathlib import Path

from flask import Flask, abort, flash, g, redirect, render_template, request, session, url_for
from sqlalchemy import text

from . import db as _db
from . import seed as _seed

SORTS = {"name": "p.name", "price": "p.price_cents", "rating": "p.rating"}
PAGE_SIZES = (12, 24, 48)
ORDERS_PER_PAGE = 10


def create_app(db_path: str | Path, seed: int = _seed.DEFAULT_SEED) -> Flask:
    """Return the site's WSGI app serving the SQLite file ``db_path`` (created and seeded first if missing)."""
    db_path = Path(db_path)
    if not db_path.exists():
        _seed.create_database(db_path, seed)
    app = Flask(__name__, template_folder=str(Path(__file__).with_name("templates")))
    # Fixed key: the site is a local test fixture; a fixed key keeps cookies valid across restarts and forks.
    app.config.update(SECRET_KEY="bunshin-shop-not-secret", SESSION_COOKIE_NAME="shop_session")
    app.jinja_env.globals.update(money=_db.money)
    app.jinja_env.filters["money"] = _db.money
    app.jinja_env.filters["date"] = _fmt_date
    engine = _db.make_engine(db_path)
    app.extensions["shop_engine"] = engine

    @app.before_request
    def _open():
        g.conn = engine.connect()
        g.customer = None
        cid = session.get("customer_id")
        if cid is not None:
            g.customer = _one("SELECT * FROM customers WHERE id=:id", id=cid)

    @app.teardown_request
    def _close(_exc):
        conn = g.pop("conn", None)
        if conn is not None:
            conn.close()

    @app.context_processor
    def _globals():
        cart_count = 0
        if g.get("customer"):
            cart_count = _scalar("SELECT COALESCE(SUM(qty),0) FROM cart_items WHERE customer_id=:c",
                                 c=g.customer["id"])
        cats = _all("SELECT * FROM categories ORDER BY name")
        return {"customer": g.get("customer"), "cart_count": cart_count, "nav_categories": cats}

    _register_routes(app)
    return app


# --- small query helpers -------------------------------------------------------------------------------------
def _all(sql: str, **params) -> list[dict]:
    return [dict(r._mapping) for r in g.conn.execute(text(sql), params)]


def _one(sql: str, **params) -> dict | None:
    r = g.conn.execute(text(sql), params).first()
    return dict(r._mapping) if r is not None else None


def _scalar(sql: str, **params):
    return g.conn.execute(text(sql), params).scalar()


def _write(sql: str, **params):
    res = g.conn.execute(text(sql), params)
    g.conn.commit()
    return res


def _fmt_date(ts: str) -> str:
    """``"2023-05-28 14:03:00" -> "5/28/23"`` (the order-history format of Magento's Luma theme)."""
    y, m, d = ts[:10].split("-")
    return f"{int(m)}/{int(d)}/{y[2:]}"


def _login_required(fn):
    @wraps(fn)
    def wrapper(*a, **kw):
        if g.customer is None:
            flash("Please sign in to continue.")
            return redirect(url_for("login", next=request.full_path.rstrip("?")))
        return fn(*a, **kw)
    return wrapper


def _listing(where: str, params: dict) -> dict:
    """Shared sort + pagination for category and search listings; reads sort/dir/page/limit from the query."""
    sort = request.args.get("sort", "name")
    sort = sort if sort in SORTS else "name"
    direction = request.args.get("dir", "asc")
    direction = direction if direction in ("asc", "desc") else "asc"
    try:
        limit = int(request.args.get("limit", 12))
    except ValueError:
        limit = 12
    limit = limit if limit in PAGE_SIZES else 12
    total = _scalar(f"SELECT COUNT(*) FROM products p WHERE {where}", **params)
    pages = max(1, math.ceil(total / limit))
    try:
        page = min(max(1, int(request.args.get("page", 1))), pages)
    except ValueError:
        page = 1
    items = _all(f"SELECT p.* FROM products p WHERE {where} ORDER BY {SORTS[sort]} {direction}, p.id "
                 f"LIMIT :lim OFFSET :off", lim=limit, off=(page - 1) * limit, **params)
    first = (page - 1) * limit + 1 if total else 0
    return {"items": items, "total": total, "page": page, "pages": pages, "sort": sort, "dir": direction,
            "limit": limit, "first": first, "last": min(total, page * limit)}


def _options_from_form(product: dict) -> tuple[str | None, str]:
    """Validate the size/color selects of an add-to-cart form; returns (error, "Size: M, Color: Blue")."""
    opts = []
    for field, label, allowed in (("size", "Size", product["sizes"]), ("color", "Color", product["colors"])):
        if not allowed:
            continue
        value = request.form.get(field, "")
        if value not in allowed.split(","):
            return f"Please choose a {field} for {product['name']}.", ""
        opts.append(f"{label}: {value}")
    return None, ", ".join(opts)


def _cart_lines(customer_id: int) -> list[dict]:
    return _all("SELECT c.id, c.qty, c.options, p.id AS product_id, p.name, p.sku, p.price_cents "
                "FROM cart_items c JOIN products p ON p.id=c.product_id WHERE c.customer_id=:c ORDER BY c.id",
                c=customer_id)


def _add_to_cart(customer_id: int, product_id: int, options: str, qty: int) -> None:
    row = _one("SELECT id FROM cart_items WHERE customer_id=:c AND product_id=:p AND options=:o",
               c=customer_id, p=product_id, o=options)
    if row:
        _write("UPDATE cart_items SET qty=qty+:q WHERE id=:i", q=qty, i=row["id"])
    else:
        _write("INSERT INTO cart_items (customer_id, product_id, options, qty) VALUES (:c,:p,:o,:q)",
               c=customer_id, p=product_id, o=options, q=qty)


def _register_routes(app: Flask) -> None:  # noqa: C901 - one flat list of routes reads best
    @app.get("/")
    def home():
        cats = _all("SELECT c.*, COUNT(p.id) AS n FROM categories c JOIN products p ON p.category_id=c.id "
                    "GROUP BY c.id ORDER BY c.name")
        featured = _all("SELECT * FROM products WHERE review_count >= 4 ORDER BY rating DESC, id LIMIT 8")
        return render_template("home.html", categories=cats, featured=featured)

    @app.get("/category/<slug>")
    def category(slug: str):
        cat = _one("SELECT * FROM categories WHERE slug=:s", s=slug)
        if cat is None:
            abort(404)
        listing = _listing("p.category_id=:cid", {"cid": cat["id"]})
        return render_template("listing.html", title=cat["name"], category=cat, query=None, **listing)

    @app.get("/search")
    def search():
        q = request.args.get("q", "").strip()
        words = [w for w in q.lower().split() if w][:8]
        if not words:
            return render_template("listing.html", title="Search", category=None, query=q, items=[], total=0,
                                   page=1, pages=1, sort="name", dir="asc", limit=12, first=0, last=0)
        where = " AND ".join(f"lower(p.name) LIKE :w{i}" for i in range(len(words)))
        params = {f"w{i}": f"%{w}%" for i, w in enumerate(words)}
        listing = _listing(where, params)
        return render_template("listing.html", title=f"Search results for: '{q}'", category=None, query=q,
                               **listing)

    @app.get("/product/<int:pid>")
    def product(pid: int):
        prod = _one("SELECT p.*, c.name AS category_name, c.slug AS category_slug FROM products p "
                    "JOIN categories c ON c.id=p.category_id WHERE p.id=:p", p=pid)
        if prod is None:
            abort(404)
        revs = _all("SELECT * FROM reviews WHERE product_id=:p ORDER BY created_at DESC, id DESC", p=pid)
        in_wishlist = bool(g.customer and _scalar(
            "SELECT COUNT(*) FROM wishlist_items WHERE customer_id=:c AND product_id=:p", c=g.customer["id"], p=pid))
        return render_template("product.html", p=prod, reviews=revs, in_wishlist=in_wishlist)

    @app.post("/product/<int:pid>/review")
    def write_review(pid: int):
        prod = _one("SELECT * FROM products WHERE id=:p", p=pid)
        if prod is None:
            abort(404)
        form = request.form
        nickname, title, body = (form.get(k, "").strip() for k in ("nickname", "title", "body"))
        try:
            rating = int(form.get("rating", ""))
        except ValueError:
            rating = 0
        if not (1 <= rating <= 5) or not nickname or not title or not body:
            flash("Please select a rating and fill in nickname, summary and review.")
            return redirect(url_for("product", pid=pid) + "#review-form")
        _write("INSERT INTO reviews (product_id, customer_id, nickname, rating, title, body, created_at) "
               "VALUES (:p,:c,:n,:r,:t,:b,:at)", p=pid, c=g.customer["id"] if g.customer else None, n=nickname,
               r=rating, t=title, b=body, at=_db.NOW_STR)
        stats = _one("SELECT AVG(rating) AS a, COUNT(*) AS n FROM reviews WHERE product_id=:p", p=pid)
        _write("UPDATE products SET rating=:a, review_count=:n WHERE id=:p", a=round(stats["a"], 1), n=stats["n"],
               p=pid)
        flash("You submitted your review.")
        return redirect(url_for("product", pid=pid))

    # --- cart ----------------------------------------------------------------------------------------------
    @app.post("/cart/add/<int:pid>")
    @_login_required
    def cart_add(pid: int):
        prod = _one("SELECT * FROM products WHERE id=:p", p=pid)
        if prod is None:
            abort(404)
        err, options = _options_from_form(prod)
        try:
            qty = int(request.form.get("qty", "1"))
        except ValueError:
            qty = 0
        if err or not 1 <= qty <= 99:
            flash(err or "Please enter a quantity between 1 and 99.")
            return redirect(url_for("product", pid=pid))
        _add_to_cart(g.customer["id"], pid, options, qty)
        flash(f"You added {prod['name']} to your shopping cart.")
        return redirect(url_for("product", pid=pid))

    @app.get("/cart")
    @_login_required
    def cart():
        lines = _cart_lines(g.customer["id"])
        subtotal = sum(l["price_cents"] * l["qty"] for l in lines)
        return render_template("cart.html", lines=lines, subtotal=subtotal)

    @app.post("/cart/update")
    @_login_required
    def cart_update():
        for line in _cart_lines(g.customer["id"]):
            raw = request.form.get(f"qty_{line['id']}")
            if raw is None:
                continue
            try:
                qty = int(raw)
            except ValueError:
                flash(f"'{raw}' is not a valid quantity.")
                return redirect(url_for("cart"))
            if qty <= 0:
                _write("DELETE FROM cart_items WHERE id=:i", i=line["id"])
            else:
                _write("UPDATE cart_items SET qty=:q WHERE id=:i", q=min(qty, 99), i=line["id"])
        flash("Your shopping cart was updated.")
        return redirect(url_for("cart"))

    @app.post("/cart/remove/<int:item_id>")
    @_login_required
    def cart_remove(item_id: int):
        _write("DELETE FROM cart_items WHERE id=:i AND customer_id=:c", i=item_id, c=g.customer["id"])
        return redirect(url_for("cart"))

    # --- checkout ------------------------------------------------------------------------------------------
    @app.route("/checkout", methods=["GET", "POST"])
    @_login_required
    def checkout():
        cid = g.customer["id"]
        lines = _cart_lines(cid)
        if not lines:
            flash("You have no items in your shopping cart.")
            return redirect(url_for("cart"))
        addrs = _all("SELECT * FROM addresses WHERE customer_id=:c ORDER BY is_default DESC, id", c=cid)
        subtotal = sum(l["price_cents"] * l["qty"] for l in lines)
        if request.method == "GET":
            return render_template("checkout.html", lines=lines, addresses=addrs, subtotal=subtotal,
                                   shipping=_db.SHIPPING_METHODS, payments=_db.PAYMENT_METHODS)
        addr = next((a for a in addrs if str(a["id"]) == request.form.get("address_id")), None)
        method = request.form.get("shipping_method")
        payment = request.form.get("payment_method")
        if addr is None or method not in _db.SHIPPING_METHODS or payment not in _db.PAYMENT_METHODS:
            flash("Please choose a shipping address, a shipping method and a payment method.")
            return redirect(url_for("checkout"))
        label, ship = _db.SHIPPING_METHODS[method]
        res = _write("INSERT INTO orders (customer_id, created_at, status, ship_to, shipping_method, shipping_cents,"
                     " payment_method, subtotal_cents, total_cents) VALUES (:c,:at,'pending',:to,:sm,:sc,:pm,:st,:t)",
                     c=cid, at=_db.NOW_STR, to=_seed.format_address(addr), sm=label, sc=ship,
                     pm=_db.PAYMENT_METHODS[payment], st=subtotal, t=subtotal + ship)
        oid = res.lastrowid
        for l in lines:
            _write("INSERT INTO order_items (order_id, product_id, name, sku, options, price_cents, qty) "
                   "VALUES (:o,:p,:n,:s,:op,:pr,:q)", o=oid, p=l["product_id"], n=l["name"], s=l["sku"],
                   op=l["options"], pr=l["price_cents"], q=l["qty"])
        _write("DELETE FROM cart_items WHERE customer_id=:c", c=cid)
        return redirect(url_for("checkout_success", oid=oid))

    @app.get("/checkout/success/<int:oid>")
    @_login_required
    def checkout_success(oid: int):
        order = _one("SELECT * FROM orders WHERE id=:o AND customer_id=:c", o=oid, c=g.customer["id"])
        if order is None:
            abort(404)
        return render_template("success.html", order=order)

    # --- customer ------------------------------------------------------------------------------------------
    @app.route("/customer/login", methods=["GET", "POST"])
    def login():
        nxt = request.values.get("next", "")
        if not nxt.startswith("/"):
            nxt = url_for("account")
        if request.method == "POST":
            email = request.form.get("email", "").strip().lower()
            cust = _one("SELECT * FROM customers WHERE lower(email)=:e", e=email)
            if cust and cust["password_sha256"] == _seed.hash_password(request.form.get("password", "")):
                session.clear()
                session["customer_id"] = cust["id"]
                return redirect(nxt)
            flash("The account sign-in was incorrect. Please check your email and password.")
        return render_template("login.html", next=nxt)

    @app.get("/customer/logout")
    def logout():
        session.clear()
        return render_template("logout.html")

    @app.get("/customer/account")
    @_login_required
    def account():
        recent = _all("SELECT * FROM orders WHERE customer_id=:c ORDER BY created_at DESC, id DESC LIMIT 5",
                      c=g.customer["id"])
        addr = _one("SELECT * FROM addresses WHERE customer_id=:c AND is_default=1", c=g.customer["id"])
        return render_template("account.html", recent=recent, default_address=addr)

    @app.get("/sales/order/history")
    @_login_required
    def order_history():
        cid = g.customer["id"]
        total = _scalar("SELECT COUNT(*) FROM orders WHERE customer_id=:c", c=cid)
        pages = max(1, math.ceil(total / ORDERS_PER_PAGE))
        try:
            page = min(max(1, int(request.args.get("page", 1))), pages)
        except ValueError:
            page = 1
        rows = _all("SELECT * FROM orders WHERE customer_id=:c ORDER BY created_at DESC, id DESC "
                    "LIMIT :l OFFSET :o", c=cid, l=ORDERS_PER_PAGE, o=(page - 1) * ORDERS_PER_PAGE)
        return render_template("orders.html", orders=rows, page=page, pages=pages, total=total)

    @app.get("/sales/order/view/<int:oid>")
    @_login_required
    def order_view(oid: int):
        order = _one("SELECT * FROM orders WHERE id=:o AND customer_id=:c", o=oid, c=g.customer["id"])
        if order is None:
            abort(404)
        items = _all("SELECT * FROM order_items WHERE order_id=:o ORDER BY id", o=oid)
        return render_template("order.html", order=order, items=items)

    @app.post("/sales/order/reorder/<int:oid>")
    @_login_required
    def reorder(oid: int):
        order = _one("SELECT * FROM orders WHERE id=:o AND customer_id=:c", o=oid, c=g.customer["id"])
        if order is None:
            abort(404)
        for it in _all("SELECT * FROM order_items WHERE order_id=:o ORDER BY id", o=oid):
            _add_to_cart(g.customer["id"], it["product_id"], it["options"], it["qty"])
        flash(f"The items of order #{oid} were added to your shopping cart.")
        return redirect(url_for("cart"))

    @app.get("/customer/address")
    @_login_required
    def address_book():
        addrs = _all("SELECT * FROM addresses WHERE customer_id=:c ORDER BY is_default DESC, id", c=g.customer["id"])
        return render_template("addresses.html", addresses=addrs)

    @app.route("/customer/address/edit/<int:aid>", methods=["GET", "POST"])
    @_login_required
    def address_edit(aid: int):
        cid = g.customer["id"]
        addr = _one("SELECT * FROM addresses WHERE id=:a AND customer_id=:c", a=aid, c=cid)
        if addr is None:
            abort(404)
        if request.method == "GET":
            return render_template("address_edit.html", a=addr)
        fields = {k: request.form.get(k, "").strip() for k in
                  ("full_name", "street", "city", "state", "zip", "country", "phone")}
        missing = [k for k, v in fields.items() if not v]
        if missing:
            flash("Please fill in: " + ", ".join(m.replace("_", " ") for m in missing) + ".")
            return redirect(url_for("address_edit", aid=aid))
        _write("UPDATE addresses SET full_name=:full_name, street=:street, city=:city, state=:state, zip=:zip, "
               "country=:country, phone=:phone WHERE id=:aid", aid=aid, **fields)
        if request.form.get("is_default"):
            _write("UPDATE addresses SET is_default=(id=:aid) WHERE customer_id=:c", aid=aid, c=cid)
        flash("You saved the address.")
        return redirect(url_for("address_book"))

    @app.get("/wishlist")
    @_login_required
    def wishlist():
        items = _all("SELECT w.id, w.added_at, p.id AS product_id, p.name, p.price_cents FROM wishlist_items w "
                     "JOIN products p ON p.id=w.product_id WHERE w.customer_id=:c ORDER BY w.id", c=g.customer["id"])
        return render_template("wishlist.html", items=items)

    @app.post("/wishlist/add/<int:pid>")
    @_login_required
    def wishlist_add(pid: int):
        prod = _one("SELECT * FROM products WHERE id=:p", p=pid)
        if prod is None:
            abort(404)
        if not _scalar("SELECT COUNT(*) FROM wishlist_items WHERE customer_id=:c AND product_id=:p",
                       c=g.customer["id"], p=pid):
            _write("INSERT INTO wishlist_items (customer_id, product_id, added_at) VALUES (:c,:p,:at)",
                   c=g.customer["id"], p=pid, at=_db.NOW_STR)
        flash(f"{prod['name']} has been added to your Wish List.")
        return redirect(url_for("wishlist"))

    @app.post("/wishlist/remove/<int:wid>")
    @_login_required
    def wishlist_remove(wid: int):
        _write("DELETE FROM wishlist_items WHERE id=:w AND customer_id=:c", w=wid, c=g.customer["id"])
        return redirect(url_for("wishlist"))

    @app.errorhandler(404)
    def not_found(_e):
        return render_template("404.html"), 404
