"""Deterministic seed data for the shopping site.

Owns: generating the catalogue (24 categories, 1,200 products), ~3,000 reviews, customers with their order
histories, addresses, carts and wish lists from ``random.Random(seed)``, and writing them to a fresh SQLite file.
The same seed always gives a byte-for-byte identical set of rows (ids included), so task reference answers
computed by ``envs/webarena/make_tasks.py`` hold for every freshly seeded database.

The task customer is ``emma.lopez@example.com`` / ``Password.123`` (see ``CUSTOMER_EMAIL`` and
``CUSTOMER_PASSWORD``): 48 orders between 2022-01 and 2023-05 in all statuses, 3 wish-list items, 2 cart lines.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import random
from pathlib import Path

from . import db as _db

DEFAULT_SEED = 20230601
CUSTOMER_EMAIL = "emma.lopez@example.com"
CUSTOMER_PASSWORD = "Password.123"
PASSWORD_SALT = "bunshin-shop:"
PRODUCTS_PER_CATEGORY = 50


def hash_password(password: str) -> str:
    """Return the stored hash for ``password`` (salted SHA-256; this is a test site, not a bank)."""
    return hashlib.sha256((PASSWORD_SALT + password).encode()).hexdigest()


# category name -> (nouns, price range in dollars, has sizes, has colors)
CATALOG: dict[str, tuple[list[str], tuple[int, int], str, bool]] = {
    "Women's Clothing": (["Blouse", "Cardigan", "Maxi Dress", "Yoga Pants", "Denim Jacket", "Tunic", "Skirt"], (12, 120), "apparel", True),
    "Men's Clothing": (["Polo Shirt", "Chinos", "Hoodie", "Oxford Shirt", "Rain Jacket", "Cargo Shorts", "Sweater"], (12, 140), "apparel", True),
    "Shoes": (["Running Shoe", "Hiking Boot", "Sandal", "Loafer", "Sneaker", "Slipper", "Ankle Boot"], (18, 180), "shoes", True),
    "Jewelry & Watches": (["Pendant Necklace", "Stud Earrings", "Chronograph Watch", "Charm Bracelet", "Signet Ring"], (9, 450), "", True),
    "Bags & Luggage": (["Backpack", "Carry-On Suitcase", "Tote Bag", "Duffel Bag", "Messenger Bag", "Wallet"], (15, 260), "", True),
    "Home Decor": (["Throw Pillow", "Wall Clock", "Table Lamp", "Picture Frame", "Scented Candle", "Area Rug"], (8, 220), "", True),
    "Kitchen & Dining": (["Chef Knife", "Cast Iron Skillet", "Coffee Maker", "Mixing Bowl Set", "Blender", "Tea Kettle"], (9, 300), "", True),
    "Furniture": (["Bookshelf", "Office Chair", "Coffee Table", "Nightstand", "Bar Stool", "TV Stand"], (40, 900), "", True),
    "Bedding & Bath": (["Duvet Cover", "Bath Towel Set", "Memory Foam Pillow", "Fitted Sheet", "Shower Curtain"], (10, 180), "bedding", True),
    "Electronics": (["Bluetooth Speaker", "Noise Cancelling Headphones", "Smart Plug", "Action Camera", "Soundbar"], (15, 700), "", False),
    "Cell Phones & Accessories": (["Phone Case", "Wireless Charger", "Screen Protector", "Power Bank", "Car Mount"], (6, 90), "", True),
    "Computers & Tablets": (["Laptop Stand", "Mechanical Keyboard", "Wireless Mouse", "USB-C Hub", "Tablet", "Monitor"], (12, 1400), "", False),
    "Video Games": (["Game Controller", "Gaming Headset", "Racing Wheel", "Charging Dock", "Adventure Game"], (10, 350), "", False),
    "Health & Household": (["Vitamin D3", "First Aid Kit", "Digital Thermometer", "Laundry Detergent", "Hand Sanitizer"], (4, 60), "", False),
    "Beauty & Personal Care": (["Face Serum", "Electric Toothbrush", "Hair Dryer", "Lip Balm Set", "Moisturizer"], (5, 150), "", False),
    "Grocery & Gourmet Food": (["Dark Roast Coffee", "Green Tea", "Olive Oil", "Trail Mix", "Maple Syrup", "Hot Sauce"], (3, 45), "", False),
    "Sports & Outdoors": (["Yoga Mat", "Camping Tent", "Water Bottle", "Dumbbell Set", "Sleeping Bag", "Bike Helmet"], (8, 400), "", True),
    "Toys & Games": (["Building Blocks", "Board Game", "Plush Bear", "Puzzle", "Remote Control Car", "Doll House"], (6, 160), "", False),
    "Baby": (["Baby Monitor", "Diaper Bag", "Teething Toy", "Stroller", "Baby Blanket"], (7, 420), "", True),
    "Pet Supplies": (["Dog Bed", "Cat Tree", "Pet Feeder", "Chew Toy", "Leash", "Litter Box"], (5, 180), "", True),
    "Office Products": (["Desk Organizer", "Gel Pens", "Notebook", "Stapler", "Label Maker", "Whiteboard"], (3, 120), "", True),
    "Tools & Home Improvement": (["Cordless Drill", "Tool Set", "Tape Measure", "LED Work Light", "Stud Finder"], (8, 350), "", False),
    "Garden & Patio": (["Garden Hose", "Pruning Shears", "Planter", "Solar Path Light", "Patio Umbrella"], (6, 300), "", True),
    "Automotive": (["Dash Cam", "Tire Inflator", "Seat Cover", "Car Vacuum", "Jump Starter"], (10, 250), "", True),
}
SIZES = {
    "apparel": "XS,S,M,L,XL",
    "shoes": "6,7,8,9,10,11,12",
    "bedding": "Twin,Full,Queen,King",
}
COLORS = ["Black", "White", "Blue", "Red", "Green", "Gray", "Navy", "Beige", "Pink", "Brown", "Yellow", "Purple"]
BRANDS = ["Acme", "Northwind", "Lumen", "Harbor", "Solstice", "Kestrel", "Juniper", "Ironwood", "Bluebell",
          "Cobalt", "Meridian", "Pinecrest", "Vantage", "Orchid", "Summit", "Tidewater", "Copperline", "Evergreen"]
ADJECTIVES = ["Classic", "Premium", "Essential", "Deluxe", "Compact", "Ultra", "Everyday", "Pro", "Eco", "Vintage",
              "Modern", "Lightweight", "Heavy-Duty", "Signature", "Travel", "Soft", "Smart", "Organic"]
FIRST_NAMES = ["Olivia", "Liam", "Ava", "Noah", "Sophia", "Mason", "Isabella", "Lucas", "Mia", "Ethan", "Amelia",
               "James", "Harper", "Benjamin", "Evelyn", "Jacob", "Abigail", "Michael", "Emily", "Daniel", "Ella",
               "Henry", "Chloe", "Jackson", "Grace", "Samuel", "Zoe", "Sebastian", "Lily", "David", "Nora",
               "Carter", "Hannah", "Wyatt", "Aria", "Owen", "Layla", "Caleb", "Riley", "Julian"]
LAST_NAMES = ["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
              "Martinez", "Hernandez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
              "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
              "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores"]
#: Phrases reviews may mention; tasks ask "which reviewers mention <phrase>".
REVIEW_TOPICS = {
    "positive": ["fits perfectly", "great value for the money", "arrived quickly", "excellent build quality",
                 "very comfortable", "easy to assemble", "looks exactly like the picture", "my kids love it",
                 "works as advertised", "the color is gorgeous"],
    "negative": ["runs small", "poor quality stitching", "stopped working after a week", "the battery life is short",
                 "arrived damaged", "smaller than expected", "the instructions were confusing",
                 "the color faded after washing", "too noisy", "customer service was unhelpful"],
}
REVIEW_FILLER = {
    "positive": ["I would buy this again.", "Highly recommended.", "Five stars from me.", "Happy with this purchase.",
                 "Exceeded my expectations.", "Does the job well."],
    "negative": ["I returned it.", "Not worth it.", "Would not recommend.", "Disappointed overall.",
                 "Expected better for the price.", "It is okay at best."],
}
TITLES = {5: ["Love it", "Fantastic", "Perfect"], 4: ["Very good", "Solid choice", "Pretty good"],
          3: ["It's fine", "Average", "Mixed feelings"], 2: ["Meh", "Not great", "Could be better"],
          1: ["Terrible", "Avoid", "Very disappointed"]}
STREETS = ["Maple Ave", "Oak St", "Pine Rd", "Cedar Ln", "Elm St", "Birch Way", "Willow Dr", "Lakeview Blvd"]
CITIES = [("Seattle", "WA", "981"), ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Boston", "MA", "021"),
          ("Portland", "OR", "972"), ("Chicago", "IL", "606"), ("Phoenix", "AZ", "850"), ("Atlanta", "GA", "303")]


def slugify(text: str) -> str:
    """Lower-case, ASCII-only, dash-separated form of ``text`` used in category URLs."""
    out, dash = [], False
    for ch in text.lower():
        if ch.isalnum():
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    return "".join(out).strip("-")


def _ts(d: _dt.datetime) -> str:
    return d.strftime("%Y-%m-%d %H:%M:%S")


def generate(seed: int = DEFAULT_SEED) -> dict[str, list[dict]]:
    """Return every table's rows (``{table name: [row dict, ...]}``) for ``seed``; pure, no I/O."""
    rng = random.Random(seed)
    rows: dict[str, list[dict]] = {t: [] for t in ("categories", "products", "reviews", "customers", "addresses",
                                                    "orders", "order_items", "cart_items", "wishlist_items")}
    # --- catalogue -------------------------------------------------------------------------------------------
    used_names: set[str] = set()
    pid = 0
    for cid, (cname, (nouns, (lo, hi), size_kind, has_colors)) in enumerate(CATALOG.items(), start=1):
        rows["categories"].append({"id": cid, "name": cname, "slug": slugify(cname),
                                   "description": f"Shop our selection of {cname.lower()}."})
        made = 0
        while made < PRODUCTS_PER_CATEGORY:
            name = f"{rng.choice(BRANDS)} {rng.choice(ADJECTIVES)} {rng.choice(nouns)}"
            if name in used_names:
                name = f"{name} {rng.choice(['II', 'Plus', 'Max', 'Mini', '2-Pack', 'XL', 'Lite', 'S'])}"
                if name in used_names:
                    continue
            used_names.add(name)
            pid += 1
            made += 1
            # prices in cents, skewed towards the low end of the range
            price = int((lo + (hi - lo) * rng.random() ** 2) * 100) + rng.choice([0, 49, 95, 99])
            colors = ",".join(sorted(rng.sample(COLORS, rng.randint(2, 5)), key=COLORS.index)) if has_colors and rng.random() < 0.8 else ""
            rows["products"].append({
                "id": pid, "sku": f"SKU-{cid:02d}{pid:05d}", "name": name, "category_id": cid,
                "price_cents": price,
                "description": f"The {name} is a {rng.choice(['popular', 'best-selling', 'new', 'customer favourite'])} "
                               f"item in our {cname} department. {rng.choice(REVIEW_FILLER['positive'])}",
                "sizes": SIZES.get(size_kind, ""), "colors": colors, "rating": 0.0, "review_count": 0,
            })
    # --- customers ---------------------------------------------------------------------------------------
    people = [("Emma", "Lopez")] + [(rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)) for _ in range(7)]
    for cust_id, (first, last) in enumerate(people, start=1):
        email = CUSTOMER_EMAIL if cust_id == 1 else f"{first.lower()}.{last.lower()}{cust_id}@example.com"
        rows["customers"].append({"id": cust_id, "email": email, "password_sha256": hash_password(CUSTOMER_PASSWORD),
                                  "first_name": first, "last_name": last})
    # addresses: Emma has three, others one
    aid = 0
    emma_addrs = [("123 Maple Ave", "Seattle", "WA", "98101"), ("77 Harbor St Apt 4", "Boston", "MA", "02110"),
                  ("9 Cedar Ln", "Denver", "CO", "80203")]
    for i, (street, city, state, zipc) in enumerate(emma_addrs):
        aid += 1
        rows["addresses"].append({"id": aid, "customer_id": 1, "full_name": "Emma Lopez", "street": street,
                                  "city": city, "state": state, "zip": zipc, "country": "United States",
                                  "phone": f"206-555-01{10 + i}", "is_default": 1 if i == 0 else 0})
    for cust in rows["customers"][1:]:
        aid += 1
        city, state, zpre = rng.choice(CITIES)
        rows["addresses"].append({"id": aid, "customer_id": cust["id"],
                                  "full_name": f"{cust['first_name']} {cust['last_name']}",
                                  "street": f"{rng.randint(10, 999)} {rng.choice(STREETS)}", "city": city,
                                  "state": state, "zip": f"{zpre}{rng.randint(10, 99)}", "country": "United States",
                                  "phone": f"555-01{rng.randint(10, 99)}", "is_default": 1})
    # --- reviews -----------------------------------------------------------------------------------------
    rid = 0
    start = _dt.datetime(2021, 1, 1)
    for prod in rows["products"]:
        n = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6])
        nicknames: set[str] = set()
        ratings = []
        for _ in range(n):
            nick = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            if nick in nicknames:
                continue
            nicknames.add(nick)
            rating = rng.choices([1, 2, 3, 4, 5], weights=[1, 1, 2, 4, 5])[0]
            tone = "positive" if rating >= 4 else "negative" if rating <= 2 else rng.choice(["positive", "negative"])
            topic = rng.choice(REVIEW_TOPICS[tone])
            body = f"{topic[0].upper()}{topic[1:]}. {rng.choice(REVIEW_FILLER[tone])}"
            if rng.random() < 0.3:
                other = rng.choice(REVIEW_TOPICS[tone])
                if other != topic:
                    body += f" Also, {other}."
            rid += 1
            ratings.append(rating)
            rows["reviews"].append({"id": rid, "product_id": prod["id"], "customer_id": None, "nickname": nick,
                                    "rating": rating, "title": rng.choice(TITLES[rating]), "body": body,
                                    "created_at": _ts(start + _dt.timedelta(minutes=rng.randint(0, 880 * 24 * 60)))})
        if ratings:
            prod["rating"] = round(sum(ratings) / len(ratings), 1)
            prod["review_count"] = len(ratings)
    # --- orders ------------------------------------------------------------------------------------------
    addr_of = {a["customer_id"]: a for a in rows["addresses"] if a["is_default"]}
    plan: list[tuple[_dt.datetime, int]] = []
    t0, t1 = _dt.datetime(2022, 1, 3), _dt.datetime(2023, 5, 31, 20, 0)
    span = int((t1 - t0).total_seconds() // 60)
    for _ in range(45):
        plan.append((t0 + _dt.timedelta(minutes=rng.randint(0, span)), 1))
    recent0 = _dt.datetime(2023, 5, 25, 8, 0)  # guarantees some pending / processing orders for Emma
    for _ in range(3):
        plan.append((recent0 + _dt.timedelta(minutes=rng.randint(0, 6 * 24 * 60)), 1))
    for cust in rows["customers"][1:]:
        for _ in range(rng.randint(6, 12)):
            plan.append((t0 + _dt.timedelta(minutes=rng.randint(0, span)), cust["id"]))
    plan.sort()
    products = rows["products"]
    oid, iid = 100, 0
    for when, cust_id in plan:
        oid += 1
        days_ago = (_db.NOW - when).days
        if days_ago <= 7:
            status = rng.choice(["pending", "pending", "processing"])
        elif days_ago <= 20:
            status = rng.choice(["processing", "complete", "canceled"])
        else:
            status = rng.choices(["complete", "canceled", "closed"], weights=[7, 2, 1])[0]
        subtotal = 0
        picked = rng.sample(products, rng.choices([1, 2, 3, 4], weights=[4, 3, 2, 1])[0])
        for prod in picked:
            iid += 1
            qty = rng.choices([1, 2, 3], weights=[6, 2, 1])[0]
            opts = []
            if prod["sizes"]:
                opts.append(f"Size: {rng.choice(prod['sizes'].split(','))}")
            if prod["colors"]:
                opts.append(f"Color: {rng.choice(prod['colors'].split(','))}")
            rows["order_items"].append({"id": iid, "order_id": oid, "product_id": prod["id"], "name": prod["name"],
                                        "sku": prod["sku"], "options": ", ".join(opts),
                                        "price_cents": prod["price_cents"], "qty": qty})
            subtotal += prod["price_cents"] * qty
        method = rng.choices(list(_db.SHIPPING_METHODS), weights=[6, 2, 1])[0]
        ship = _db.SHIPPING_METHODS[method][1]
        a = addr_of[cust_id]
        rows["orders"].append({"id": oid, "customer_id": cust_id, "created_at": _ts(when), "status": status,
                               "ship_to": format_address(a), "shipping_method": _db.SHIPPING_METHODS[method][0],
                               "shipping_cents": ship, "payment_method": rng.choice(list(_db.PAYMENT_METHODS.values())),
                               "subtotal_cents": subtotal, "total_cents": subtotal + ship})
    # --- Emma's cart and wish list -------------------------------------------------------------------------
    cart_picks = [p for p in rng.sample(products, 40) if not p["sizes"]][:2]
    for i, prod in enumerate(cart_picks, start=1):
        opts = f"Color: {prod['colors'].split(',')[0]}" if prod["colors"] else ""
        rows["cart_items"].append({"id": i, "customer_id": 1, "product_id": prod["id"], "options": opts, "qty": i})
    for i, prod in enumerate(rng.sample(products, 3), start=1):
        rows["wishlist_items"].append({"id": i, "customer_id": 1, "product_id": prod["id"],
                                       "added_at": _ts(_dt.datetime(2023, 3, i * 7, 10, 0))})
    return rows


def format_address(a: dict) -> str:
    """One-line address as printed on orders: ``"Emma Lopez, 123 Maple Ave, Seattle, WA 98101, United States"``."""
    return f"{a['full_name']}, {a['street']}, {a['city']}, {a['state']} {a['zip']}, {a['country']}"


def create_database(db_path: str | Path, seed: int = DEFAULT_SEED) -> Path:
    """Create and seed a new SQLite database at ``db_path``; refuses to overwrite an existing file."""
    path = Path(db_path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; remove it or pass a new path to seed a fresh database")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".seeding")
    tmp.unlink(missing_ok=True)
    engine = _db.make_engine(tmp)
    try:
        _db.metadata.create_all(engine)
        data = generate(seed)
        with engine.begin() as conn:
            for table in _db.metadata.sorted_tables:
                if data.get(table.name):
                    conn.execute(table.insert(), data[table.name])
    finally:
        engine.dispose()
    tmp.replace(path)  # atomic: a half-seeded file is never visible at db_path
    return path
