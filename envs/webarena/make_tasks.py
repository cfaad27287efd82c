"""Generator of the shipped task suite (``tasks/*.json``) and its oracle trajectories (``oracles/*.json``).

Owns: the task families (WebArena shopping templates adapted to this site), their reference answers computed
from the seeded data (``site.seed.generate``), high-level solution plans, and the recorder that turns a plan
into concrete action strings by reading element ids off the live accessibility tree.

Usage (from the repository root)::

    python -m envs.webarena.make_tasks            # write tasks/*.json (pure, no browser; ~1 s)
    python -m envs.webarena.make_tasks --oracles  # also record oracles/*.json on a live site + Chromium and
                                                  # check each scores 1.0 (a few minutes on 2 cores)

Both outputs are committed; rerun after changing the seed data, the templates or a family here.
Element ids in oracles are ``data-bid`` DOM-order ids (see ``browser.py``), reproducible on a fresh site.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .site import seed as _seed
from .site.db import SHIPPING_METHODS, money
from .tasks import ORACLES_DIR, TASKS_DIR

ORDERS_PER_PAGE = 10
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
CART_LOCATOR = ("[...document.querySelectorAll('#cart-items tr.item')].map(r => r.querySelector('.name').innerText"
                " + ' | ' + r.querySelector('.options').innerText + ' | qty ' + r.querySelector('input.qty').value)"
                ".join('\\n')")
CART_NAMES_LOCATOR = ("[...document.querySelectorAll('#cart-items tr.item .name')].map(a => a.innerText)"
                      ".join('; ')")
WISHLIST_LOCATOR = "document.querySelector('#wishlist').outerText"
WISHLIST_NAMES_LOCATOR = ("[...document.querySelectorAll('#wishlist .wishlist-item a')].map(a => a.innerText)"
                          ".join('; ')")
NEWEST_REVIEW_LOCATOR = "document.querySelector('#reviews .review').outerText"
DEFAULT_ADDRESS_LOCATOR = "document.querySelector('#default-shipping').outerText"
ORDER_LOCATOR = "document.querySelector('#order-details').outerText"


@dataclass
class Spec:
    """One task before serialisation: its WebArena config and the plan that solves it."""

    config: dict
    plan: list[tuple] = field(default_factory=list)
    family: str = ""


class Data:
    """The seeded rows with the indexes the families need."""

    def __init__(self, seed: int = _seed.DEFAULT_SEED) -> None:
        rows = _seed.generate(seed)
        self.rows = rows
        self.products = {p["id"]: p for p in rows["products"]}
        self.by_name = {p["name"]: p for p in rows["products"]}
        self.categories = {c["id"]: c for c in rows["categories"]}
        self.reviews = defaultdict(list)
        for r in rows["reviews"]:
            self.reviews[r["product_id"]].append(r)
        self.emma_orders = sorted((o for o in rows["orders"] if o["customer_id"] == 1),
                                  key=lambda o: (o["created_at"], o["id"]), reverse=True)
        self.items = defaultdict(list)
        for it in rows["order_items"]:
            self.items[it["order_id"]].append(it)
        self.cart = [dict(c, name=self.products[c["product_id"]]["name"]) for c in rows["cart_items"]]
        self.wishlist = [self.products[w["product_id"]]["name"] for w in rows["wishlist_items"]]
        self.addresses = [a for a in rows["addresses"] if a["customer_id"] == 1]
        self.next_order_id = max(o["id"] for o in rows["orders"]) + 1

    def order_page(self, order_id: int) -> int:
        idx = [o["id"] for o in self.emma_orders].index(order_id)
        return idx // ORDERS_PER_PAGE + 1

    def search(self, q: str) -> list[dict]:
        words = q.lower().split()
        return [p for p in self.rows["products"] if all(w in p["name"].lower() for w in words)]


def _config(tid: int, template_id: int, template: str, inst: dict, start: str, ev: dict,
            login: bool = True) -> dict:
    intent = template
    for k, v in inst.items():
        intent = intent.replace("{{" + k + "}}", str(v))
    ev = {"eval_types": ev["eval_types"], "reference_answers": ev.get("reference_answers"),
          "reference_url": ev.get("reference_url", ""), "program_html": ev.get("program_html", []),
          "string_note": ev.get("string_note", ""),
          "reference_answer_raw_annotation": ev.get("raw", ""),
          **({"url_note": "GOLD in PRED"} if ev.get("reference_url") else {})}
    return {"sites": ["shopping"], "task_id": tid, "require_login": login,
            "storage_state": "./.auth/shopping_state.json" if login else None, "start_url": start,
            "geolocation": None, "intent_template": template, "instantiation_dict": inst, "intent": intent,
            "require_reset": "program_html" in ev["eval_types"], "eval": ev, "intent_template_id": template_id}


def _nav_to_order_history(page: int) -> list[tuple]:
    plan = [("click", "link", "My Account"), ("click", "link", "My Orders")]
    if page > 1:
        plan.append(("click", "link", str(page)))
    return plan


# --- families -------------------------------------------------------------------------------------------------
def family_reviewers(d: Data) -> list[Spec]:
    template = "List out reviewers, if exist, who mention about {{description}}"
    out, used = [], set()
    topics = _seed.REVIEW_TOPICS["positive"] + _seed.REVIEW_TOPICS["negative"]
    for prod in d.rows["products"]:
        revs = d.reviews[prod["id"]]
        if len(revs) < 4 or len(out) >= 4:
            continue
        for topic in topics:
            who = [r["nickname"] for r in revs if topic in r["body"].lower()]
            if 2 <= len(who) <= 3 and topic not in used:
                used.add(topic)
                out.append((prod, topic, who))
                break
    specs = []
    for prod, topic, who in out:
        specs.append(Spec(config={"inst": {"description": topic}, "start": f"__SHOPPING__/product/{prod['id']}",
                                  "ev": {"eval_types": ["string_match"], "reference_answers": {"must_include": who},
                                         "raw": ", ".join(who)}},
                          plan=[("scroll", "down"), ("stop", ", ".join(who))]))
    # an infeasible one: nobody mentions the topic
    for prod in d.rows["products"]:
        revs = d.reviews[prod["id"]]
        if len(revs) >= 3 and not any("too noisy" in r["body"].lower() for r in revs) and prod["id"] > 300:
            specs.append(Spec(config={"inst": {"description": "being too noisy"},
                                      "start": f"__SHOPPING__/product/{prod['id']}",
                                      "ev": {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
                                             "string_note": "There is no review mentioning noise",
                                             "raw": "N/A"}},
                              plan=[("scroll", "down"), ("stop", "N/A")]))
            break
    for s in specs:
        s.config.update(template=template, template_id=1001)
    return specs


def family_spend(d: Data) -> list[Spec]:
    template = ("How much did I spend on shopping at One Stop Shop in {{month}}? Count every order that was "
                "not canceled, shipping included.")
    by_month = defaultdict(list)
    for o in d.emma_orders:
        by_month[o["created_at"][:7]].append(o)
    months = [m for m in sorted(by_month) if len(by_month[m]) >= 2]
    # prefer months that include a canceled order (the answer must leave it out)
    months.sort(key=lambda m: (not any(o["status"] == "canceled" for o in by_month[m]), m))
    specs = []
    for m in sorted(months[:5]):
        orders = by_month[m]
        total = sum(o["total_cents"] for o in orders if o["status"] != "canceled")
        y, mo = m.split("-")
        label = f"{MONTHS[int(mo) - 1]} {y}"
        pages = sorted({d.order_page(o["id"]) for o in orders})
        plan = _nav_to_order_history(pages[0])
        for p in pages[1:]:
            plan.append(("click", "link", str(p)))
        amount = f"{total / 100:.2f}"
        plan.append(("stop", f"${amount}"))
        specs.append(Spec(config={"inst": {"month": label}, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": [amount]},
                                         "raw": money(total)}}, plan=plan))
    for s in specs:
        s.config.update(template=template, template_id=1002)
    return specs


def _sort_plan(sort_label: str, dir_label: str) -> list[tuple]:
    return [("select", "combobox", "Sort By", sort_label), ("select", "combobox", "Direction", dir_label),
            ("click", "button", "Apply")]


def family_price_extremes(d: Data) -> list[Spec]:
    specs = []
    cats = list(d.categories.values())
    for i, cat in enumerate(cats[2:20:3]):
        prods = sorted((p for p in d.rows["products"] if p["category_id"] == cat["id"]),
                       key=lambda p: (p["price_cents"], p["id"]))
        if i % 2 == 0:
            target, direction = prods[0], "Ascending"
            if prods[0]["price_cents"] == prods[1]["price_cents"]:
                continue
            template = "What is the cheapest product in the {{category}} category? Give its name."
            tid, ans = 1003, target["name"]
            ev = {"eval_types": ["string_match"], "reference_answers": {"must_include": [target["name"]]},
                  "raw": target["name"]}
        else:
            target, direction = prods[-1], "Descending"
            if prods[-1]["price_cents"] == prods[-2]["price_cents"]:
                continue
            template = "What is the price of the most expensive product in the {{category}} category?"
            tid, ans = 1004, money(target["price_cents"])
            ev = {"eval_types": ["string_match"],
                  "reference_answers": {"fuzzy_match": [f"{target['price_cents'] / 100:.2f}"]}, "raw": ans}
        plan = [("click", "link", cat["name"])] + _sort_plan("Price", direction) + [("stop", ans)]
        specs.append(Spec(config={"template": template, "template_id": tid, "inst": {"category": cat["name"]},
                                  "start": "__SHOPPING__/", "ev": ev}, plan=plan))
    return specs


def family_search_count(d: Data) -> list[Spec]:
    template = "How many products does the store return when I search for \"{{query}}\"?"
    specs = []
    for q in ["backpack", "wireless", "acme", "yoga mat", "vintage lamp", "summit pro"]:
        n = len(d.search(q))
        if n == 0 or len(specs) >= 5:
            continue
        specs.append(Spec(config={"template": template, "template_id": 1005, "inst": {"query": q},
                                  "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["string_match"], "reference_answers": {"exact_match": str(n)},
                                         "raw": str(n)}},
                          plan=[("type", "searchbox", "Search", q, True), ("stop", str(n))]))
    return specs


def family_order_status(d: Data) -> list[Spec]:
    template = "What is the status of my order #{{order}}?"
    specs, seen = [], set()
    for o in reversed(d.emma_orders):  # oldest first so pages differ
        if o["status"] in seen:
            continue
        seen.add(o["status"])
        page = d.order_page(o["id"])
        plan = _nav_to_order_history(page) + [("click", "link", f"View Order {o['id']}"),
                                              ("stop", o["status"].capitalize())]
        specs.append(Spec(config={"template": template, "template_id": 1006, "inst": {"order": o["id"]},
                                  "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["string_match"],
                                         "reference_answers": {"must_include": [o["status"]]},
                                         "raw": o["status"].capitalize()}}, plan=plan))
    return specs[:5]


def family_url(d: Data) -> list[Spec]:
    specs = []
    cats = list(d.categories.values())
    for cat, (sort, sort_label), (dr, dr_label) in ((cats[4], ("price", "Price"), ("desc", "Descending")),
                                                    (cats[11], ("rating", "Rating"), ("desc", "Descending"))):
        template = "Show me the {{category}} products sorted by {{sort}}, {{order}}."
        inst = {"category": cat["name"], "sort": sort_label.lower(),
                "order": "highest first" if dr == "desc" else "lowest first"}
        specs.append(Spec(config={"template": template, "template_id": 1007, "inst": inst, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["url_match"],
                                         "reference_url": f"__SHOPPING__/category/{cat['slug']}?sort={sort}&dir={dr}"}},
                          plan=[("click", "link", cat["name"])] + _sort_plan(sort_label, dr_label) + [("stop", "")]))
    for q, (sort, sort_label), (dr, dr_label) in (("hiking boot", ("price", "Price"), ("asc", "Ascending")),
                                                  ("coffee", ("rating", "Rating"), ("desc", "Descending"))):
        template = "Search for \"{{query}}\" and show the results sorted by {{sort}}, {{order}}."
        inst = {"query": q, "sort": sort_label.lower(), "order": "highest first" if dr == "desc" else "lowest first"}
        specs.append(Spec(config={"template": template, "template_id": 1008, "inst": inst, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["url_match"],
                                         "reference_url": f"__SHOPPING__/search?q={q.replace(' ', '+')}&sort={sort}&dir={dr}"}},
                          plan=[("type", "searchbox", "Search", q, True)] + _sort_plan(sort_label, dr_label) +
                               [("stop", "")]))
    return specs


def _cart_line(name: str, options: str, qty: int) -> str:
    return f"{name} | {options} | qty {qty}"


def family_reorder(d: Data) -> list[Spec]:
    cart_products = {c["product_id"] for c in d.cart}
    canceled = [o for o in d.emma_orders if o["status"] == "canceled"
                and not any(it["product_id"] in cart_products for it in d.items[o["id"]])]
    specs = []
    picks = [(canceled[0], "Reorder all the items of my most recent canceled order.", {}),
             *[(o, "Reorder the items of my canceled order #{{order}}.", {"order": o["id"]}) for o in canceled[1:3]]]
    complete = [o for o in d.emma_orders if o["status"] == "complete"
                and not any(it["product_id"] in cart_products for it in d.items[o["id"]])]
    picks += [(o, "I want to buy the same items as in order #{{order}} again; add them to my cart.", {"order": o["id"]})
              for o in complete[3:5]]
    for o, template, inst in picks:
        lines = [_cart_line(it["name"], it["options"], it["qty"]) for it in d.items[o["id"]]]
        plan = _nav_to_order_history(d.order_page(o["id"])) + [("click", "link", f"View Order {o['id']}"),
                                                               ("click", "button", "Reorder"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1009 if not inst else 1010, "inst": inst,
                                  "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/cart", "locator": CART_LOCATOR,
                                       "required_contents": {"must_include": lines}}]}}, plan=plan))
    return specs


def _open_product_plan(name: str) -> list[tuple]:
    return [("type", "searchbox", "Search", name, True), ("click", "link", name)]


def family_wishlist(d: Data) -> list[Spec]:
    specs = []
    candidates = [p for p in d.rows["products"][7::97] if p["name"] not in d.wishlist][:4]
    for p in candidates:
        specs.append(Spec(config={"template": "Add {{product}} to my wish list.", "template_id": 1011,
                                  "inst": {"product": p["name"]}, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/wishlist", "locator": WISHLIST_LOCATOR,
                                       "required_contents": {"must_include": [p["name"]]}}]}},
                          plan=_open_product_plan(p["name"]) + [("click", "button", "Add to Wish List"), ("stop", "")]))
    gone = d.wishlist[1]
    rest = "; ".join(n for n in d.wishlist if n != gone)
    specs.append(Spec(config={"template": "Remove {{product}} from my wish list.", "template_id": 1012,
                              "inst": {"product": gone}, "start": "__SHOPPING__/",
                              "ev": {"eval_types": ["program_html"], "program_html": [
                                  {"url": "__SHOPPING__/wishlist", "locator": WISHLIST_NAMES_LOCATOR,
                                   "required_contents": {"exact_match": rest}}]}},
                      plan=[("click", "link", "My Wish List"), ("click", "button", f"Remove {gone} from wish list"),
                            ("stop", "")]))
    return specs


REVIEW_TEXTS = [
    (5, "Exactly what I needed", "Sturdy, well made and arrived on time"),
    (4, "Good but pricey", "Works well, though I expected a lower price"),
    (2, "Not impressed", "The finish scratched within two days"),
    (1, "Broke quickly", "It stopped working after three uses"),
    (3, "Just okay", "Does the job but nothing special"),
]


def family_review(d: Data) -> list[Spec]:
    template = ("Rate {{product}} with {{stars}} stars and write a review titled \"{{title}}\" saying "
                "\"{{text}}\".")
    specs = []
    for (stars, title, text), p in zip(REVIEW_TEXTS, d.rows["products"][33::211]):
        plan = [("click", "radio", f"{stars} star" + ("" if stars == 1 else "s")),
                ("type", "textbox", "Summary", title, False), ("type", "textbox", "Review", text, False),
                ("click", "button", "Submit Review"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1013,
                                  "inst": {"product": p["name"], "stars": stars, "title": title, "text": text},
                                  "start": f"__SHOPPING__/product/{p['id']}",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": f"__SHOPPING__/product/{p['id']}", "locator": NEWEST_REVIEW_LOCATOR,
                                       "required_contents": {"must_include": [title, text, f"Rating: {stars} out of 5",
                                                                              "Emma"]}}]}}, plan=plan))
    return specs


def family_address(d: Data) -> list[Spec]:
    default = d.addresses[0]
    specs = []
    edits = [("street", "Street Address", "450 Pine Rd Unit 12"), ("phone", "Phone Number", "206-555-0199")]
    for key, label, value in edits:
        template = "Update the {{field}} of my default shipping address to {{value}}."
        specs.append(Spec(config={"template": template, "template_id": 1014,
                                  "inst": {"field": label.lower(), "value": value}, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/customer/address", "locator": DEFAULT_ADDRESS_LOCATOR,
                                       "required_contents": {"must_include": [value, default["city"]]}}]}},
                          plan=[("click", "link", "My Account"), ("click", "link", "Address Book"),
                                ("click", "link", f"Edit address {default['street']}"),
                                ("type", "textbox", label, value, False), ("click", "button", "Save Address"),
                                ("stop", "")]))
    moves = [("1200 Congress Ave", "Austin", "TX", "78701"), ("88 Lake Shore Dr Apt 9", "Chicago", "IL", "60611")]
    for street, city, state, zipc in moves:
        template = "I moved. Change my default shipping address to {{address}}."
        addr = f"{street}, {city}, {state} {zipc}"
        plan = [("click", "link", "My Account"), ("click", "link", "Address Book"),
                ("click", "link", f"Edit address {default['street']}"),
                ("type", "textbox", "Street Address", street, False), ("type", "textbox", "City", city, False),
                ("type", "textbox", "State/Province", state, False), ("type", "textbox", "Zip/Postal Code", zipc, False),
                ("click", "button", "Save Address"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1015, "inst": {"address": addr},
                                  "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/customer/address", "locator": DEFAULT_ADDRESS_LOCATOR,
                                       "required_contents": {"must_include": [street, f"{city}, {state} {zipc}"]}}]}},
                          plan=plan))
    other = d.addresses[1]
    template = "Make my address at {{street}} my default shipping address."
    specs.append(Spec(config={"template": template, "template_id": 1016, "inst": {"street": other["street"]},
                              "start": "__SHOPPING__/",
                              "ev": {"eval_types": ["program_html"], "program_html": [
                                  {"url": "__SHOPPING__/customer/address", "locator": DEFAULT_ADDRESS_LOCATOR,
                                   "required_contents": {"must_include": [other["street"], other["city"]]}}]}},
                      plan=[("click", "link", "My Account"), ("click", "link", "Address Book"),
                            ("click", "link", f"Edit address {other['street']}"),
                            ("click", "checkbox", "Use as my default shipping address"),
                            ("click", "button", "Save Address"), ("stop", "")]))
    return specs


def family_cart(d: Data) -> list[Spec]:
    specs = []
    dressy = [p for p in d.rows["products"] if p["sizes"] and p["colors"] and p["category_id"] in (1, 2, 3)]
    for p, qty in ((dressy[5], 2), (dressy[40], 3)):
        size = p["sizes"].split(",")[2]
        color = p["colors"].split(",")[-1]
        template = "Add {{qty}} of {{product}} in size {{size}} and color {{color}} to my cart."
        plan = [("select", "combobox", "Size", size), ("select", "combobox", "Color", color),
                ("type", "spinbutton", "Qty", str(qty), False), ("click", "button", "Add to Cart"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1017,
                                  "inst": {"qty": qty, "product": p["name"], "size": size, "color": color},
                                  "start": f"__SHOPPING__/product/{p['id']}",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/cart", "locator": CART_LOCATOR, "required_contents": {
                                          "must_include": [_cart_line(p["name"], f"Size: {size}, Color: {color}", qty)]}}]}},
                          plan=plan))
    for line, qty in ((d.cart[0], 4), (d.cart[1], 1)):
        template = "Change the quantity of {{product}} in my cart to {{qty}}."
        plan = [("type", "spinbutton", f"Qty for {line['name']}", str(qty), False),
                ("click", "button", "Update Shopping Cart"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1018,
                                  "inst": {"product": line["name"], "qty": qty}, "start": "__SHOPPING__/cart",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/cart", "locator": CART_LOCATOR, "required_contents": {
                                          "must_include": [_cart_line(line["name"], line["options"], qty)]}}]}},
                          plan=plan))
    for gone in d.cart:
        rest = "; ".join(c["name"] for c in d.cart if c is not gone)
        template = "Remove {{product}} from my shopping cart."
        specs.append(Spec(config={"template": template, "template_id": 1019, "inst": {"product": gone["name"]},
                                  "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": "__SHOPPING__/cart", "locator": CART_NAMES_LOCATOR,
                                       "required_contents": {"exact_match": rest}}]}},
                          plan=[("click", "link", f"My Cart ({sum(c['qty'] for c in d.cart)})"),
                                ("click", "button", f"Remove {gone['name']}"), ("stop", "")]))
    return specs


def family_checkout(d: Data) -> list[Spec]:
    specs = []
    oid = d.next_order_id
    plain = [p for p in d.rows["products"] if not p["sizes"] and not p["colors"]]
    cart_count = sum(c["qty"] for c in d.cart)
    for p, (code, (label, cost)) in zip((plain[11], plain[222], plain[333]), list(SHIPPING_METHODS.items())):
        template = ("Buy {{product}} together with everything already in my cart, using {{shipping}} shipping and "
                    "check / money order payment.")
        plan = _open_product_plan(p["name"]) + [
            ("click", "button", "Add to Cart"), ("click", "link", f"My Cart ({cart_count + 1})"),
            ("click", "link", "Proceed to Checkout"), ("click", "radio", f"{label} {money(cost)}"),
            ("click", "radio", "Check / Money order"), ("click", "button", "Place Order"), ("stop", "")]
        specs.append(Spec(config={"template": template, "template_id": 1020,
                                  "inst": {"product": p["name"], "shipping": label}, "start": "__SHOPPING__/",
                                  "ev": {"eval_types": ["program_html"], "program_html": [
                                      {"url": f"__SHOPPING__/sales/order/view/{oid}", "locator": ORDER_LOCATOR,
                                       "required_contents": {"must_include": [
                                           p["name"], d.cart[0]["name"], f"Shipping Method: {label}",
                                           "Status: Pending", "Payment Method: Check / Money order"]}}]}},
                          plan=plan))
    other = d.addresses[1]
    template = "Check out my current cart with store pickup, using my {{city}} address and credit card payment."
    specs.append(Spec(config={"template": template, "template_id": 1021, "inst": {"city": other["city"]},
                              "start": "__SHOPPING__/cart",
                              "ev": {"eval_types": ["program_html"], "program_html": [
                                  {"url": f"__SHOPPING__/sales/order/view/{oid}", "locator": ORDER_LOCATOR,
                                   "required_contents": {"must_include": [
                                       other["street"], "Shipping Method: Store Pickup",
                                       "Payment Method: Credit Card (on delivery)", d.cart[1]["name"]]}}]}},
                      plan=[("click", "link", "Proceed to Checkout"),
                            ("click", "radio", f"{other['full_name']}, {other['street']}, {other['city']}, "
                                               f"{other['state']} {other['zip']}"),
                            ("click", "radio", "Store Pickup $0.00"), ("click", "radio", "Credit Card (on delivery)"),
                            ("click", "button", "Place Order"), ("stop", "")]))
    return specs


FAMILIES = (family_reviewers, family_spend, family_price_extremes, family_search_count, family_order_status,
            family_url, family_reorder, family_wishlist, family_review, family_address, family_cart,
            family_checkout)


def build_specs(seed: int = _seed.DEFAULT_SEED) -> list[Spec]:
    """Every task of the suite with its plan, ids assigned in family order from 0."""
    d = Data(seed)
    specs = []
    for fam in FAMILIES:
        for s in fam(d):
            c = s.config
            s.family = fam.__name__.removeprefix("family_")
            s.config = _config(len(specs), c["template_id"], c["template"], c["inst"], c["start"], c["ev"])
            specs.append(s)
    return specs


def write_tasks(specs: list[Spec]) -> None:
    TASKS_DIR.mkdir(exist_ok=True)
    for old in TASKS_DIR.glob("*.json"):
        old.unlink()
    for s in specs:
        (TASKS_DIR / f"{s.config['task_id']}.json").write_text(json.dumps(s.config, indent=2) + "\n")


# --- oracle recording ------------------------------------------------------------------------------------------
_LINE_RE = re.compile(r"^\t*\[(?P<id>[^\]]+)\] (?P<role>\S+) (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


def find_id(axtree: str, role: str, name: str) -> str:
    """Id of the first node with exactly this role and name in an axtree text; KeyError if none."""
    for line in axtree.splitlines():
        m = _LINE_RE.match(line)
        if m and m.group("role") == role and ast.literal_eval(m.group("name")) == name:
            return m.group("id")
    raise KeyError(f"no {role} named {name!r} in the accessibility tree")


def plan_to_action(step: tuple, axtree_fn) -> str:
    kind = step[0]
    if kind == "stop":
        return f"stop [{step[1]}]"
    if kind == "scroll":
        return f"scroll [{step[1]}]"
    if kind == "goto":
        return f"goto [{step[1]}]"
    bid = find_id(axtree_fn(), step[1], step[2])
    if kind == "click":
        return f"click [{bid}]"
    if kind == "type":
        return f"type [{bid}] [{step[3]}] [{1 if step[4] else 0}]"
    if kind == "select":
        return f"select_option('{bid}', {step[3]!r})"
    raise ValueError(f"unknown plan step {step!r}")


def record_oracles(specs: list[Spec]) -> None:
    """Start a site and Chromium, turn each plan into actions, check the reward is 1.0, write oracles/."""
    from .browser import BrowserSession
    from .episode import Episode
    from .judge import judge_episode
    from .tasks import task_from_dict, workspace_task

    ORACLES_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pristine, live = Path(tmp) / "pristine.db", Path(tmp) / "live.db"
        _seed.create_database(pristine)
        shutil.copyfile(pristine, live)
        proc = subprocess.Popen([sys.executable, "-m", "envs.webarena.site", "--db", str(live), "--port", "0"],
                                stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        try:
            base = proc.stdout.readline().split()[-1]
            session = BrowserSession()
            session.start(base)
            failures = []
            for s in specs:
                t0 = time.time()
                shutil.copyfile(pristine, live)
                task = task_from_dict(s.config)
                ep = Episode(session, **workspace_task(task))
                ep.reset(observe=False)
                actions = []
                for step in s.plan:
                    act = plan_to_action(step, session.axtree)
                    actions.append(act)
                    res = ep.step(act, observe=False)
                    if res["last_action_error"]:
                        raise RuntimeError(f"task {s.config['task_id']}: {act} -> {res['last_action_error']}")
                reward = judge_episode(task, ep)
                print(f"task {s.config['task_id']:3d} {s.family:16s} reward={reward} steps={len(actions)} "
                      f"{time.time() - t0:.1f}s", flush=True)
                if reward != 1.0:
                    failures.append(s.config["task_id"])
                (ORACLES_DIR / f"{s.config['task_id']}.json").write_text(json.dumps(actions, indent=1) + "\n")
            session.close()
            if failures:
                raise SystemExit(f"oracles that do not score 1.0: {failures}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.webarena.make_tasks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracles", action="store_true", help="also record oracles/*.json (starts site + Chromium)")
    ap.add_argument("--only", type=int, nargs="*", help="record oracles only for these task ids")
    args = ap.parse_args(argv)
    specs = build_specs()
    write_tasks(specs)
    fams = defaultdict(int)
    for s in specs:
        fams[s.family] += 1
    mut = sum(1 for s in specs if "program_html" in s.config["eval"]["eval_types"])
    print(f"wrote {len(specs)} tasks to {TASKS_DIR} ({mut} mutate state): {dict(fams)}")
    if args.oracles:
        record_oracles([s for s in specs if args.only is None or s.config["task_id"] in args.only])
    return 0


if __name__ == "__main__":
    sys.exit(main())
