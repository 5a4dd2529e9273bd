"""A small discussion forum (the offline stand-in for WebArena's `__REDDIT__` site, a Postmill forum).

Server-rendered HTML: a list of forums, each forum's posts sorted by new or top, post pages with
votes and comments, search, user profiles, a login, and forms to comment and to submit a post.
The data is fixed, so the offline tasks can state their answers. Run it alone with
`python -m servers.websites.forum --port 9999` to look at it in a browser.
"""

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from servers.websites import Worlds, esc, form, page

USERS = {"alex": "forum123", "bob": "bob-pass", "carol": "carol-pass", "dave": "dave-pass", "erin": "erin-pass"}
DEFAULT_USER = "alex"
FORUMS = {"technology": "News and questions about computers and gadgets.",
          "cooking": "Recipes, techniques and kitchen disasters.",
          "books": "What are you reading?",
          "travel": "Trip reports and advice."}

# (id, forum, title, author, date, score, body, [(commenter, comment)])
POSTS = [
    (1, "technology", "Is a mechanical keyboard worth it?", "bob", "2024-04-02", 42,
     "My wrists hurt after long days. Did switching help anyone?",
     [("carol", "Mine did wonders for my typing speed."), ("dave", "Try a split layout first.")]),
    (2, "technology", "Linux on an old laptop", "erin", "2024-04-10", 17,
     "Which distribution runs well on 4 GB of memory?", [("bob", "Debian with Xfce runs fine.")]),
    (3, "technology", "My router keeps dropping the connection", "dave", "2024-05-01", 5,
     "Every evening at 9 the wifi disconnects for a minute.", []),
    (4, "technology", "Best budget webcam for meetings", "carol", "2024-05-12", 23,
     "Looking for something under 80 dollars.",
     [("erin", "The Nimbus webcam is decent."), ("alex", "Any webcam plus a good lamp."),
      ("bob", "Light matters more than the camera.")]),
    (5, "cooking", "Sourdough starter died again", "carol", "2024-03-15", 31,
     "Third time this year. I feed it every day, what am I doing wrong?",
     [("bob", "Maybe your kitchen is too cold."), ("erin", "Use rye flour for a week.")]),
    (6, "cooking", "Cast iron seasoning tips", "dave", "2024-03-22", 56,
     "How many layers of oil do you put on a new pan?", [("carol", "Three thin layers, baked an hour each.")]),
    (7, "cooking", "Quick weeknight pasta", "erin", "2024-04-18", 12,
     "Garlic, chilli, olive oil and parsley: done in 15 minutes.", []),
    (8, "books", "Just finished The Quiet Orchard", "bob", "2024-02-08", 19,
     "The winter chapter made me cry. Anyone else?", [("dave", "The ending was perfect.")]),
    (9, "books", "Mystery novels set in London", "carol", "2024-04-25", 8,
     "I loved The Map Maker. What should I read next?",
     [("erin", "Anything by Wilkie Collins."), ("bob", "The Moonstone!")]),
    (10, "travel", "Two weeks in Portugal", "dave", "2024-01-30", 64,
     "Lisbon, Porto and the Algarve by train. Ask me anything.",
     [("bob", "How were the trains?"), ("carol", "Porto is my favourite city."), ("erin", "Did you visit Sintra?"),
      ("alex", "Saving this for my summer trip.")]),
    (11, "travel", "Packing light for a hiking trip", "erin", "2024-03-05", 27,
     "I got my backpack down to 7 kg. Here is my list.", [("dave", "Trekking poles are worth the weight.")]),
    (12, "travel", "Cheapest way to get around Japan", "bob", "2024-05-20", 9,
     "Is the rail pass still worth it after the price rise?", []),
]


def seed() -> dict:
    posts = {pid: {"id": pid, "forum": f, "title": t, "author": a, "date": d, "score": s, "body": b,
                   "comments": [{"author": ca, "text": ct} for ca, ct in cs]}
             for pid, f, t, a, d, s, b, cs in POSTS}
    return {"posts": posts, "votes": {}}  # votes: post id -> +1 / -1 by the logged-in user


WORLDS = Worlds(seed)
app = FastAPI(title="Postmill Lite")


def score(w, p) -> int:
    return p["score"] + w["votes"].get(p["id"], 0)


def nav(w) -> str:
    forums = "".join(f"<a href='/f/{f}'>{f}</a>" for f in FORUMS)
    who = (f"<a href='/user/{w['user']}' id='login-status'>{w['user']}</a><a href='/logout'>Log out</a>"
           if w["user"] else "<a href='/login'>Log in</a>")
    return (f"<nav><a href='/'>Forums</a>{forums}{who}</nav><form action='/search' method='get' role='search'>"
            "<input name='q' aria-label='Search posts'><button>Search</button></form>")


def show(w, title: str, body: str) -> HTMLResponse:
    return HTMLResponse(page(title, nav(w), body))


def post_list(w, posts) -> str:
    items = "".join(f"<li><a href='/f/{p['forum']}/{p['id']}'>{esc(p['title'])}</a> by {p['author']} in "
                    f"{p['forum']}, {score(w, p)} points, {len(p['comments'])} comments</li>" for p in posts)
    return f"<ul id='posts'>{items}</ul>"


@app.get("/")
def home(request: Request):
    w = WORLDS.of(request)
    rows = "".join(f"<li><a href='/f/{f}'>{f}</a>: {esc(d)} "
                   f"({sum(p['forum'] == f for p in w['posts'].values())} posts)</li>" for f, d in FORUMS.items())
    recent = sorted(w["posts"].values(), key=lambda p: p["date"], reverse=True)[:5]
    return show(w, "Forums", f"<ul id='forums'>{rows}</ul><h2>Recent posts</h2>{post_list(w, recent)}")


@app.get("/f/{forum}")
def forum(request: Request, forum: str, sort: str = "new"):
    w = WORLDS.of(request)
    if forum not in FORUMS:
        return show(w, "Page not found", "<p>There is no such forum.</p>")
    key = (lambda p: score(w, p)) if sort == "top" else (lambda p: p["date"])
    posts = sorted((p for p in w["posts"].values() if p["forum"] == forum), key=key, reverse=True)
    return show(w, f"/f/{forum}", f"<p>{esc(FORUMS[forum])}</p><p>Sort by: <a href='/f/{forum}?sort=new'>New</a> "
                f"<a href='/f/{forum}?sort=top'>Top</a> | <a href='/f/{forum}/submit'>Submit a new post</a></p>"
                f"{post_list(w, posts)}")


@app.get("/f/{forum}/submit")
def submit_page(request: Request, forum: str):
    w = WORLDS.of(request)
    if not w["user"]:
        return RedirectResponse("/login", status_code=303)
    return show(w, f"Submit to /f/{forum}", f"<form method='post' action='/f/{forum}/submit'>"
                "<input name='title' aria-label='Title'><textarea name='body' aria-label='Body'></textarea>"
                "<button>Create post</button></form>")


@app.post("/f/{forum}/submit")
async def submit(request: Request, forum: str):
    w = WORLDS.of(request)
    f = await form(request)
    if not w["user"] or forum not in FORUMS or not f.get("title", "").strip():
        return RedirectResponse(f"/f/{forum}", status_code=303)
    pid = max(w["posts"]) + 1
    w["posts"][pid] = {"id": pid, "forum": forum, "title": f["title"].strip(), "author": w["user"],
                       "date": "2024-06-01", "score": 1, "body": f.get("body", "").strip(), "comments": []}
    return RedirectResponse(f"/f/{forum}/{pid}", status_code=303)


@app.get("/f/{forum}/{pid}")
def post(request: Request, forum: str, pid: int):
    w = WORLDS.of(request)
    p = w["posts"].get(pid)
    if p is None or p["forum"] != forum:
        return show(w, "Page not found", "<p>There is no such post.</p>")
    comments = "".join(f"<li>{c['author']}: {esc(c['text'])}</li>" for c in p["comments"])
    if w["user"]:
        act = (f"<form method='post' action='/vote/{pid}'><input type='hidden' name='dir' value='1'>"
               "<button>Upvote</button></form>"
               f"<form method='post' action='/vote/{pid}'><input type='hidden' name='dir' value='-1'>"
               "<button>Downvote</button></form>")
        comment_form = (f"<form method='post' action='/f/{forum}/{pid}/comment'><textarea name='text' "
                        "aria-label='Comment'></textarea><button>Post comment</button></form>")
    else:
        act = comment_form = "<p><a href='/login'>Log in to vote and comment</a></p>"
    return show(w, p["title"], f"<p>Submitted by <a href='/user/{p['author']}'>{p['author']}</a> on {p['date']}"
                f"</p><p>{esc(p['body'])}</p><p>Score: <span id='post-score'>{score(w, p)}</span></p>{act}"
                f"<h2>{len(p['comments'])} comments</h2><ul id='comments'>{comments}</ul>{comment_form}")


@app.post("/f/{forum}/{pid}/comment")
async def comment(request: Request, forum: str, pid: int):
    w = WORLDS.of(request)
    text = (await form(request)).get("text", "").strip()
    if w["user"] and text and pid in w["posts"]:
        w["posts"][pid]["comments"].append({"author": w["user"], "text": text})
    return RedirectResponse(f"/f/{forum}/{pid}", status_code=303)


@app.post("/vote/{pid}")
async def vote(request: Request, pid: int):
    w = WORLDS.of(request)
    d = (await form(request)).get("dir", "1")
    if w["user"] and pid in w["posts"]:
        w["votes"][pid] = -1 if d == "-1" else 1  # one vote per user and post: voting again replaces it
    p = w["posts"].get(pid)
    return RedirectResponse(f"/f/{p['forum']}/{pid}" if p else "/", status_code=303)


@app.get("/search")
def search(request: Request, q: str = ""):
    w = WORLDS.of(request)
    words = q.lower().split()
    hits = [p for p in w["posts"].values()
            if words and all(x in (p["title"] + " " + p["body"]).lower() for x in words)]
    return show(w, "Search results", f"<p>{len(hits)} results for '{esc(q)}'</p>{post_list(w, hits)}")


@app.get("/user/{name}")
def user(request: Request, name: str):
    w = WORLDS.of(request)
    if name not in USERS:
        return show(w, "Page not found", "<p>There is no such user.</p>")
    posts = [p for p in w["posts"].values() if p["author"] == name]
    comments = "".join(f"<li>On <a href='/f/{p['forum']}/{p['id']}'>{esc(p['title'])}</a>: {esc(c['text'])}</li>"
                       for p in w["posts"].values() for c in p["comments"] if c["author"] == name)
    return show(w, name, f"<h2>Posts</h2>{post_list(w, posts)}<h2>Comments</h2><ul id='user-comments'>{comments}</ul>")


@app.get("/login")
def login_page(request: Request, failed: int = 0):
    w = WORLDS.of(request)
    msg = "<p role='alert'>Wrong username or password.</p>" if failed else ""
    return show(w, "Log in", f"{msg}<form method='post' action='/login'><input name='username' aria-label='Username'>"
                "<input name='password' type='password' aria-label='Password'><button>Log in</button></form>")


@app.post("/login")
async def login(request: Request):
    w = WORLDS.of(request)
    f = await form(request)
    name = f.get("username", "").strip()
    if USERS.get(name) == f.get("password", ""):
        w["user"] = name
        return RedirectResponse("/", status_code=303)
    return RedirectResponse("/login?failed=1", status_code=303)


@app.get("/logout")
def logout(request: Request):
    WORLDS.of(request)["user"] = None
    return RedirectResponse("/", status_code=303)


if __name__ == "__main__":
    import argparse

    import uvicorn
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=9999)
    uvicorn.run(app, host="127.0.0.1", port=ap.parse_args().port)
