"""A small online shop (the offline stand-in for WebArena's `__SHOPPING__` site, a Magento store).

Server-rendered HTML: a home page, category lists with sorting, product pages with reviews, search,
a cart, a wishlist, a login, an account page with past orders and a shipping address, checkout.
The data is fixed (no randomness), so the offline tasks can state their answers. Run it alone with
`python -m servers.websites.shop --port 7770` to look at it in a browser.
"""

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from servers.websites import Worlds, esc, form, page

USERS = {"emma": {"password": "emma2024", "name": "Emma Lopez"}}
DEFAULT_USER = "emma"  # the account WebArena-style tasks start logged in as
CATEGORIES = {"electronics": "Electronics", "kitchen": "Kitchen", "books": "Books", "outdoor": "Outdoor"}


def _p(pid, name, cat, price, desc, reviews):
    return {"id": pid, "sku": f"SKU-{cat[:3].upper()}-{pid:03d}", "name": name, "category": cat,
            "price": price, "description": desc,
            "reviews": [{"author": a, "stars": s, "text": t} for a, s, t in reviews]}


PRODUCTS = [
    _p(1, "Aurora Desk Lamp", "electronics", 34.99, "A dimmable LED desk lamp with three colour temperatures.",
       [("Liam", 5, "Bright and adjustable."), ("Noah", 4, "Good lamp, short cable.")]),
    _p(2, "Pulse Wireless Earbuds", "electronics", 59.00, "Earbuds with 24 hours of battery in the case.",
       [("Olivia", 3, "Sound is fine, fit is loose."), ("Ava", 4, "Great battery.")]),
    _p(3, "Volt USB-C Charger", "electronics", 19.50, "A 30 W charger for phones and tablets.",
       [("Mason", 5, "Charges fast.")]),
    _p(4, "Orbit Bluetooth Speaker", "electronics", 45.00, "A waterproof speaker for the shower or the beach.",
       [("Sophia", 2, "Too quiet outdoors."), ("Lucas", 3, "Okay for the price.")]),
    _p(5, "Nimbus Webcam", "electronics", 72.25, "A 1080p webcam with a privacy shutter.",
       [("Mia", 4, "Sharp picture."), ("Ethan", 5, "Works out of the box."), ("Isla", 4, "Good in low light.")]),
    _p(6, "Copper Kettle", "kitchen", 28.00, "A stovetop kettle with a whistle.",
       [("Harper", 4, "Pretty and loud whistle.")]),
    _p(7, "Chef Pro Knife Set", "kitchen", 89.99, "Five knives and a wooden block.",
       [("Elijah", 5, "Very sharp."), ("Amelia", 5, "Worth every cent.")]),
    _p(8, "Morning Pour-Over Coffee Maker", "kitchen", 24.75, "A glass pour-over brewer for two cups.",
       [("James", 3, "The filter is hard to find.")]),
    _p(9, "Bamboo Cutting Board", "kitchen", 15.40, "A large board with a juice groove.",
       [("Evelyn", 4, "Solid board."), ("Benjamin", 4, "Easy to clean.")]),
    _p(10, "Cast Iron Skillet", "kitchen", 39.90, "A pre-seasoned 10 inch skillet.",
       [("Charlotte", 5, "Lasts forever."), ("Henry", 4, "Heavy but great.")]),
    _p(11, "The Quiet Orchard", "books", 12.99, "A novel about a family farm over four seasons.",
       [("Grace", 5, "Beautifully written.")]),
    _p(12, "Learning to Sail", "books", 18.50, "A beginner's guide to small boats.",
       [("Jack", 4, "Clear diagrams.")]),
    _p(13, "Python for Gardeners", "books", 31.00, "Automate your garden with a Raspberry Pi.",
       [("Chloe", 3, "Fun projects, some typos."), ("Leo", 4, "Nice intro.")]),
    _p(14, "Stars Over the Desert", "books", 9.99, "Poems written on a journey through the Sahara.",
       [("Zoe", 4, "Moving.")]),
    _p(15, "A Short History of Bread", "books", 21.00, "Ten thousand years of baking in 200 pages.",
       [("Ella", 5, "Fascinating."), ("Owen", 5, "I baked after every chapter.")]),
    _p(16, "The Map Maker", "books", 14.25, "A mystery set in 18th century London.",
       [("Lily", 2, "Slow start.")]),
    _p(17, "Trailhead Backpack", "outdoor", 64.00, "A 35 litre pack with a rain cover.",
       [("Ruby", 4, "Comfortable straps."), ("Max", 5, "Survived a week in the rain.")]),
    _p(18, "Summit Trekking Poles", "outdoor", 42.50, "Light aluminium poles that fold to 40 cm.",
       [("Ivy", 5, "Saved my knees."), ("Theo", 5, "Light and sturdy.")]),
    _p(19, "Lakeside Camping Chair", "outdoor", 27.99, "A folding chair with a cup holder.",
       [("Nora", 3, "A bit low.")]),
    _p(20, "Ember Camp Stove", "outdoor", 55.00, "A compact gas stove that boils water in 3 minutes.",
       [("Finn", 4, "Fast boil."), ("Alice", 4, "Simple to use.")]),
]

ORDERS = [  # emma's past orders: (id, date, status, [(product id, qty)])
    (1001, "2024-01-14", "Delivered", [(6, 1), (9, 2)]),
    (1002, "2024-03-02", "Delivered", [(11, 1)]),
    (1003, "2024-05-19", "Shipped", [(2, 1), (3, 1)]),
]


def seed() -> dict:
    """The state an episode starts from (copied per world)."""
    return {"products": {p["id"]: p for p in PRODUCTS},
            "cart": {},  # product id -> quantity
            "wishlist": [],
            "orders": [{"id": i, "date": d, "status": s, "items": items} for i, d, s, items in ORDERS],
            "address": {"street": "4 Elm Street", "city": "Springfield", "zip": "12345"}}


WORLDS = Worlds(seed)
app = FastAPI(title="One Stop Shop")


def rating(p) -> float:
    return round(sum(r["stars"] for r in p["reviews"]) / len(p["reviews"]), 1) if p["reviews"] else 0.0


def money(x: float) -> str:
    return f"${x:,.2f}"


def nav(w) -> str:
    cats = "".join(f"<a href='/category/{c}'>{esc(n)}</a>" for c, n in CATEGORIES.items())
    n = sum(w["cart"].values())
    who = (f"<a href='/account'>My Account</a><a href='/logout'>Sign Out</a>" if w["user"]
           else "<a href='/login'>Sign In</a>")
    return (f"<nav><a href='/'>One Stop Shop</a>{cats}<a href='/cart'>Cart ({n})</a>"
            f"<a href='/wishlist'>Wishlist</a>{who}</nav>"
            "<form action='/search' method='get' role='search'><input name='q' aria-label='Search products'>"
            "<button>Search</button></form>")


def show(w, title: str, body: str) -> HTMLResponse:
    return HTMLResponse(page(title, nav(w), body))


def product_list(products) -> str:
    items = "".join(f"<li><a href='/product/{p['id']}'>{esc(p['name'])}</a> {money(p['price'])}, "
                    f"rated {rating(p)} of 5</li>" for p in products)
    return f"<ul id='products'>{items}</ul>"


def need_login(w):
    return None if w["user"] else RedirectResponse("/login", status_code=303)


@app.get("/")
def home(request: Request):
    w = WORLDS.of(request)
    cats = "".join(f"<li><a href='/category/{c}'>{esc(n)}</a></li>" for c, n in CATEGORIES.items())
    featured = [next(p for p in w["products"].values() if p["category"] == c) for c in CATEGORIES]
    return show(w, "One Stop Shop", f"<h2>Categories</h2><ul>{cats}</ul><h2>Featured</h2>{product_list(featured)}")


SORTS = {"name": ("Name", lambda p: p["name"]), "price_asc": ("Price: low to high", lambda p: p["price"]),
         "price_desc": ("Price: high to low", lambda p: -p["price"]), "rating": ("Rating", lambda p: -rating(p))}


@app.get("/category/{slug}")
def category(request: Request, slug: str, sort: str = "name"):
    w = WORLDS.of(request)
    if slug not in CATEGORIES or sort not in SORTS:
        return show(w, "Page not found", "<p>There is no such page.</p>")
    products = sorted((p for p in w["products"].values() if p["category"] == slug), key=SORTS[sort][1])
    sorts = " ".join(f"<a href='/category/{slug}?sort={k}'>{esc(v[0])}</a>" for k, v in SORTS.items())
    return show(w, CATEGORIES[slug], f"<p>{len(products)} products. Sort by: {sorts}</p>{product_list(products)}")


@app.get("/product/{pid}")
def product(request: Request, pid: int):
    w = WORLDS.of(request)
    p = w["products"].get(pid)
    if p is None:
        return show(w, "Page not found", "<p>There is no such product.</p>")
    reviews = "".join(f"<li>{esc(r['author'])}: {r['stars']} stars. {esc(r['text'])}</li>" for r in p["reviews"])
    review_form = ("<h2>Write a review</h2><form method='post' action='/product/{0}/review'>"
                   "<input name='stars' aria-label='Rating (1 to 5)'><textarea name='text' aria-label='Review'>"
                   "</textarea><button>Submit Review</button></form>".format(pid) if w["user"]
                   else "<p><a href='/login'>Sign in to write a review</a></p>")
    body = (f"<p>SKU: <span id='sku'>{p['sku']}</span></p><p>Price: <span id='price'>{money(p['price'])}</span></p>"
            f"<p>Rating: {rating(p)} of 5 ({len(p['reviews'])} reviews)</p><p>{esc(p['description'])}</p>"
            f"<form method='post' action='/cart/add'><input type='hidden' name='pid' value='{pid}'>"
            "<input name='qty' value='1' aria-label='Quantity'><button>Add to Cart</button></form>"
            f"<form method='post' action='/wishlist/add'><input type='hidden' name='pid' value='{pid}'>"
            f"<button>Add to Wishlist</button></form><h2>Reviews</h2><ul id='reviews'>{reviews}</ul>{review_form}")
    return show(w, p["name"], body)


@app.post("/product/{pid}/review")
async def review(request: Request, pid: int):
    w = WORLDS.of(request)
    f = await form(request)
    if need_login(w) or pid not in w["products"]:
        return need_login(w) or RedirectResponse("/", status_code=303)
    try:
        stars = min(5, max(1, int(f.get("stars", "").strip())))
    except ValueError:
        return show(w, "Review not saved", "<p>The rating must be a number from 1 to 5.</p>")
    w["products"][pid]["reviews"].append({"author": USERS[w["user"]]["name"], "stars": stars,
                                          "text": f.get("text", "").strip()})
    return RedirectResponse(f"/product/{pid}", status_code=303)


@app.get("/search")
def search(request: Request, q: str = ""):
    w = WORLDS.of(request)
    words = q.lower().split()
    hits = [p for p in w["products"].values()
            if words and all(x in (p["name"] + " " + p["description"]).lower() for x in words)]
    return show(w, "Search results", f"<p>{len(hits)} results for '{esc(q)}'</p>{product_list(hits)}")


@app.post("/cart/add")
async def cart_add(request: Request):
    w = WORLDS.of(request)
    f = await form(request)
    try:
        pid, qty = int(f["pid"]), max(1, int(f.get("qty", "1").strip() or 1))
    except (KeyError, ValueError):
        return show(w, "Not added", "<p>The quantity must be a whole number.</p>")
    if pid in w["products"]:
        w["cart"][pid] = w["cart"].get(pid, 0) + qty
    return RedirectResponse("/cart", status_code=303)


@app.post("/cart/remove")
async def cart_remove(request: Request):
    w = WORLDS.of(request)
    w["cart"].pop(int((await form(request)).get("pid", 0)), None)
    return RedirectResponse("/cart", status_code=303)


def line_items(w, items, removable: bool = False) -> tuple[str, float]:
    rows, total = "", 0.0
    for pid, qty in items:
        p = w["products"][pid]
        total += p["price"] * qty
        rows += f"<tr><td>{esc(p['name'])}</td><td>Qty: {qty}</td><td>{money(p['price'] * qty)}</td>"
        if removable:
            rows += (f"<td><form method='post' action='/cart/remove'><input type='hidden' name='pid' "
                     f"value='{pid}'><button>Remove {esc(p['name'])}</button></form></td>")
        rows += "</tr>"
    return rows, total


@app.get("/cart")
def cart(request: Request):
    w = WORLDS.of(request)
    if not w["cart"]:
        return show(w, "Shopping Cart", "<p id='cart'>Your cart is empty.</p>")
    rows, total = line_items(w, w["cart"].items(), removable=True)
    return show(w, "Shopping Cart", f"<table id='cart'>{rows}</table>"
                f"<p>Total: <span id='total'>{money(total)}</span></p>"
                "<form method='post' action='/checkout'><button>Place Order</button></form>")


@app.post("/checkout")
def checkout(request: Request):
    w = WORLDS.of(request)
    if need_login(w) or not w["cart"]:
        return need_login(w) or RedirectResponse("/cart", status_code=303)
    oid = max(o["id"] for o in w["orders"]) + 1
    w["orders"].append({"id": oid, "date": "2024-06-01", "status": "Pending", "items": list(w["cart"].items())})
    w["cart"].clear()
    return RedirectResponse(f"/orders/{oid}", status_code=303)


@app.get("/wishlist")
def wishlist(request: Request):
    w = WORLDS.of(request)
    if need_login(w):
        return need_login(w)
    items = [w["products"][i] for i in w["wishlist"]]
    listed = product_list(items) if items else "Your wishlist is empty."
    return show(w, "My Wishlist", f"<div id='wishlist'>{listed}</div>")


@app.post("/wishlist/add")
async def wishlist_add(request: Request):
    w = WORLDS.of(request)
    pid = int((await form(request)).get("pid", 0))
    if need_login(w):
        return need_login(w)
    if pid in w["products"] and pid not in w["wishlist"]:
        w["wishlist"].append(pid)
    return RedirectResponse("/wishlist", status_code=303)


@app.get("/login")
def login_page(request: Request, failed: int = 0):
    w = WORLDS.of(request)
    msg = "<p role='alert'>Wrong username or password.</p>" if failed else ""
    return show(w, "Sign In", f"{msg}<form method='post' action='/login'><input name='username' aria-label='Username'>"
                "<input name='password' type='password' aria-label='Password'><button>Sign In</button></form>")


@app.post("/login")
async def login(request: Request):
    w = WORLDS.of(request)
    f = await form(request)
    user = f.get("username", "").strip()
    if user in USERS and USERS[user]["password"] == f.get("password", ""):
        w["user"] = user
        return RedirectResponse("/account", status_code=303)
    return RedirectResponse("/login?failed=1", status_code=303)


@app.get("/logout")
def logout(request: Request):
    WORLDS.of(request)["user"] = None
    return RedirectResponse("/", status_code=303)


@app.get("/account")
def account(request: Request):
    w = WORLDS.of(request)
    if need_login(w):
        return need_login(w)
    orders = "".join(f"<li><a href='/orders/{o['id']}'>Order #{o['id']}</a> placed {o['date']}, {o['status']}, "
                     f"total {money(line_items(w, o['items'])[1])}</li>" for o in reversed(w["orders"]))
    a = w["address"]
    return show(w, "My Account", f"<p>Welcome, {esc(USERS[w['user']]['name'])}!</p>"
                f"<h2>Shipping address</h2><p id='address'>{esc(a['street'])}, {esc(a['city'])} {esc(a['zip'])}</p>"
                "<form method='post' action='/account/address'>"
                f"<input name='street' value='{esc(a['street'])}' aria-label='Street'>"
                f"<input name='city' value='{esc(a['city'])}' aria-label='City'>"
                f"<input name='zip' value='{esc(a['zip'])}' aria-label='Zip code'><button>Save Address</button></form>"
                f"<h2>My Orders</h2><ul id='orders'>{orders}</ul>")


@app.post("/account/address")
async def address(request: Request):
    w = WORLDS.of(request)
    if need_login(w):
        return need_login(w)
    f = await form(request)
    w["address"].update({k: f[k].strip() for k in ("street", "city", "zip") if f.get(k, "").strip()})
    return RedirectResponse("/account", status_code=303)


@app.get("/orders/{oid}")
def order(request: Request, oid: int):
    w = WORLDS.of(request)
    if need_login(w):
        return need_login(w)
    o = next((o for o in w["orders"] if o["id"] == oid), None)
    if o is None:
        return show(w, "Page not found", "<p>There is no such order.</p>")
    rows, total = line_items(w, o["items"])
    return show(w, f"Order #{oid}", f"<p>Placed {o['date']}. Status: {o['status']}.</p><table id='items'>{rows}</table>"
                f"<p>Total: <span id='total'>{money(total)}</span></p>")


if __name__ == "__main__":
    import argparse

    import uvicorn
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=7770)
    uvicorn.run(app, host="127.0.0.1", port=ap.parse_args().port)
