"""Data of the Deep Search environment: an offline fictional encyclopedia, and the real formats.

Where it sits: `servers/searchqa.py` loads a corpus and a question set through `load_data()` once
per process; nothing here talks HTTP or imports torch.

Two sources, both ending up as the same two lists:

    corpus     [{"id": str, "contents": '"Title"\\ntext'}]      (FlashRAG / Search-R1 wiki format)
    questions  [{"question", "golden_answers": [...], "data_source": str, ...}]

(a) Real data (`--corpus wiki.jsonl --qa nq.jsonl,hotpotqa.jsonl`): a JSONL corpus with `id` and
    `contents` (the title on the first line), and QA files in the FlashRAG JSONL format or
    Search-R1's parquet (`question`, `golden_answers`, `data_source`; a file without
    `data_source` is named by its file name, e.g. `nq.jsonl` -> "nq"). A QA source may also be a
    Hugging Face dataset, `hf:NAME[:CONFIG[:SPLIT]]`, read through `datasets` by users who have
    network access (e.g. `hf:RUC-NLPIR/FlashRAG_datasets:nq:test`).

(b) The offline default, generated deterministically from a seed: a fictional world of
    countries, cities, people and organisations, one encyclopedia passage per entity, and
    questions of one, two or three hops whose answers cannot be known without searching (every
    name is made up). Question `i` has `i % 3 + 1` hops. Each fact is written in one passage
    only (a person's birthplace in the person's passage, a founder in the organisation's, a mayor
    in the city's), so that a k-hop question needs k searches: no one passage links the
    question's entity to the answer. The last `test_fraction` of the
    questions ask only about entities that no earlier (training) question names.
"""

import json
import os
import random
import tempfile
from dataclasses import dataclass

VERSION = 1  # of the generator: change it when the generated text changes (new cache folder)
CACHE = os.path.expanduser(os.environ.get("SEARCHQA_CACHE", "~/.cache/agentgym-rl-mini/searchqa"))

# ---------------------------------------------------------------------------------------------
# (b) The fictional encyclopedia
# ---------------------------------------------------------------------------------------------

ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "kr",
    "st",
    "th",
    "sh",
    "gr",
    "tr",
]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "k"]
PROFESSIONS = [
    "painter",
    "engineer",
    "poet",
    "physician",
    "architect",
    "composer",
    "chemist",
    "judge",
    "sculptor",
    "astronomer",
    "novelist",
    "merchant",
    "botanist",
    "diplomat",
]
ORG_KINDS = [
    "Institute",
    "Company",
    "Bank",
    "Orchestra",
    "University",
    "Foundation",
    "Society",
    "Museum",
    "Press",
    "Railway",
    "Observatory",
    "Guild",
]
INDUSTRIES = ["textile", "glass", "shipbuilding", "wine", "printing", "copper", "silk", "clock"]


class _Names:
    """Made-up capitalised words, never the same twice (so a name is a unique search key)."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def word(self) -> str:
        tries = 0
        while True:  # two syllables while they last, then three
            tries += 1
            n = 2 if tries < 20 else 3
            w = "".join(
                self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS) for _ in range(n)
            )
            if len(w) >= 5 and w not in self.used:
                self.used.add(w)
                return w.capitalize()


def generate(
    seed: int = 0, n_passages: int = 1500, n_questions: int = 3000, test_fraction: float = 0.2
) -> tuple[list[dict], list[dict]]:
    """The fictional world of about `n_passages` entities, and `n_questions` questions about it."""
    rng = random.Random(seed)
    w = world(rng, n_passages)
    return passages(w), questions(rng, w, n_questions, test_fraction)


@dataclass
class World:
    """The entities, each a dict; they point at each other by index (a city's `country`, a
    person's `city` and `spouse`, an organisation's `founder`, ...)."""

    countries: list[dict]
    cities: list[dict]
    people: list[dict]
    orgs: list[dict]


def world(rng: random.Random, n_passages: int) -> World:
    """About `n_passages` made-up entities: countries, their cities, people and organisations."""
    names = _Names(rng)
    n_countries = max(4, n_passages // 50)
    n_cities = max(3 * n_countries, n_passages * 15 // 100)
    n_orgs = n_passages * 22 // 100
    n_people = max(n_orgs + n_cities, n_passages - n_countries - n_cities - n_orgs)
    first_names = [names.word() for _ in range(max(50, n_people // 20))]

    countries = [
        {
            "name": names.word() + rng.choice(["ia", "land", "ora"]),
            "year": rng.randint(1200, 1950),
            "pop": rng.randint(1, 90),
        }
        for _ in range(n_countries)
    ]
    cities = [
        {
            "name": names.word(),
            "country": i % n_countries,
            "year": rng.randint(900, 1900),
            "industry": rng.choice(INDUSTRIES),
        }
        for i in range(n_cities)
    ]
    for c, country in enumerate(countries):
        country["capital"] = c  # city c is in country c % n_countries == c: the first one
    people = [
        {
            "name": f"{rng.choice(first_names)} {names.word()}",
            "he": rng.choice(["He", "She"]),
            "city": rng.randrange(n_cities),
            "year": rng.randint(1800, 1990),
            "job": rng.choice(PROFESSIONS),
            "spouse": None,
            "states_marriage": False,
            "org": None,
        }
        for _ in range(n_people)
    ]
    orgs = relate(rng, names, people, cities, n_orgs)
    return World(countries, cities, people, orgs)


def relate(
    rng: random.Random, names: "_Names", people: list[dict], cities: list[dict], n_orgs: int
) -> list[dict]:
    """Marry half of `people` to each other, found `n_orgs` organisations (each by a different
    person) and give each city a mayor who founded none of them; returns the organisations."""
    n_people, n_cities = len(people), len(cities)
    order = list(range(n_people))
    rng.shuffle(order)
    for a, b in zip(order[0 : n_people // 2 : 2], order[1 : n_people // 2 : 2]):  # half of them married
        people[a]["spouse"], people[b]["spouse"] = b, a
        people[a]["states_marriage"], people[b]["states_marriage"] = True, False
    rng.shuffle(order)
    orgs = []
    for o in range(n_orgs):  # distinct founders: "the organisation founded by P" is unique
        founder = order[o]
        people[founder]["org"] = o
        orgs.append(
            {
                "name": f"{names.word()} {rng.choice(ORG_KINDS)}",
                "founder": founder,
                "city": rng.randrange(n_cities),
                "year": rng.randint(1700, 2000),
            }
        )
    for c, city in enumerate(cities):  # distinct mayors, none of them a founder
        city["mayor"] = order[n_orgs + c]
    return orgs


def passages(w: World) -> list[dict]:
    """One encyclopedia passage per entity, in the FlashRAG corpus format. Each fact is written in
    one passage only (a person's birthplace in the person's, a founder in the organisation's)."""
    countries, cities, people, orgs = w.countries, w.cities, w.people, w.orgs

    def country_text(c):
        x = countries[c]
        return (
            f"{x['name']} is a country with a population of {x['pop']} million. Its capital is "
            f"{cities[x['capital']]['name']}. It declared independence in {x['year']}."
        )

    def city_text(c):
        x = cities[c]
        return (
            f"{x['name']} is a city in {countries[x['country']]['name']}, founded in {x['year']}. "
            f"Its mayor is {people[x['mayor']]['name']}. It is known for its {x['industry']} industry."
        )

    def person_text(p):
        x = people[p]
        s = (
            f"{x['name']} (born {x['year']}) is {'an' if x['job'][0] in 'aeiou' else 'a'} {x['job']} "
            f"born in {cities[x['city']]['name']}."
        )
        if x["spouse"] is not None and x["states_marriage"]:
            s += f" {x['he']} is married to {people[x['spouse']]['name']}."
        return s

    def org_text(o):
        x = orgs[o]
        return (
            f"{x['name']} is an organisation headquartered in {cities[x['city']]['name']}. It was "
            f"founded in {x['year']} by {people[x['founder']]['name']}."
        )

    corpus = []
    for kind, items, text in [
        ("country", countries, country_text),
        ("city", cities, city_text),
        ("person", people, person_text),
        ("org", orgs, org_text),
    ]:
        for i, x in enumerate(items):
            corpus.append({"id": f"{kind}-{i}", "contents": f'"{x["name"]}"\n{text(i)}'})
    return corpus


def templates(w: World) -> dict[int, list[tuple]]:
    """Per hop count, the questions' (template, anchor kind, whether an anchor fits, the answer and
    path of an anchor). The anchor is the entity the question names; the path lists the passages
    the agent must read, in order."""
    return {1: one_hop(w), 2: two_hops(w), 3: three_hops(w)}


def one_hop(w: World) -> list[tuple]:
    """Questions one passage answers: the anchor's own."""
    P, C, O, K = w.people, w.cities, w.orgs, w.countries
    return [
        (
            "In which city was {} born?",
            "person",
            lambda p: True,
            lambda p: (C[P[p]["city"]]["name"], [P[p]["name"]]),
        ),
        (
            "Who founded {}?",
            "org",
            lambda o: True,
            lambda o: (P[O[o]["founder"]]["name"], [O[o]["name"]]),
        ),
        (
            "In which country is {}?",
            "city",
            lambda c: True,
            lambda c: (K[C[c]["country"]]["name"], [C[c]["name"]]),
        ),
        (
            "In what year was {} founded?",
            "org",
            lambda o: True,
            lambda o: (str(O[o]["year"]), [O[o]["name"]]),
        ),
        (
            "Who is the mayor of {}?",
            "city",
            lambda c: True,
            lambda c: (P[C[c]["mayor"]]["name"], [C[c]["name"]]),
        ),
    ]


def two_hops(w: World) -> list[tuple]:
    """Questions whose answer is in the passage of an entity the anchor's passage names."""
    P, C, O, K = w.people, w.cities, w.orgs, w.countries
    return [
        (
            "In which country was {} born?",
            "person",
            lambda p: True,
            lambda p: (K[C[P[p]["city"]]["country"]]["name"], [P[p]["name"], C[P[p]["city"]]["name"]]),
        ),
        (
            "In which city was the founder of {} born?",
            "org",
            lambda o: True,
            lambda o: (C[P[O[o]["founder"]]["city"]]["name"], [O[o]["name"], P[O[o]["founder"]]["name"]]),
        ),
        (
            "Who is the mayor of the city where {} was born?",
            "person",
            lambda p: True,
            lambda p: (P[C[P[p]["city"]]["mayor"]]["name"], [P[p]["name"], C[P[p]["city"]]["name"]]),
        ),
        (
            "In which country is {} headquartered?",
            "org",
            lambda o: True,
            lambda o: (K[C[O[o]["city"]]["country"]]["name"], [O[o]["name"], C[O[o]["city"]]["name"]]),
        ),
    ]


def three_hops(w: World) -> list[tuple]:
    """Questions that follow two links from the anchor's passage."""
    P, C, O, K = w.people, w.cities, w.orgs, w.countries
    return [
        (
            "In which country was the founder of {} born?",
            "org",
            lambda o: True,
            lambda o: (
                K[C[P[O[o]["founder"]]["city"]]["country"]]["name"],
                [O[o]["name"], P[O[o]["founder"]]["name"], C[P[O[o]["founder"]]["city"]]["name"]],
            ),
        ),
        (
            "What is the capital of the country where {} was born?",
            "person",
            lambda p: True,
            lambda p: (
                C[K[C[P[p]["city"]]["country"]]["capital"]]["name"],
                [P[p]["name"], C[P[p]["city"]]["name"], K[C[P[p]["city"]]["country"]]["name"]],
            ),
        ),
        (
            "Who is the mayor of the city where the founder of {} was born?",
            "org",
            lambda o: True,
            lambda o: (
                P[C[P[O[o]["founder"]]["city"]]["mayor"]]["name"],
                [O[o]["name"], P[O[o]["founder"]]["name"], C[P[O[o]["founder"]]["city"]]["name"]],
            ),
        ),
        (
            "In which country was the spouse of {} born?",
            "person",
            lambda p: P[p]["states_marriage"],
            lambda p: (
                K[C[P[P[p]["spouse"]]["city"]]["country"]]["name"],
                [P[p]["name"], P[P[p]["spouse"]]["name"], C[P[P[p]["spouse"]]["city"]]["name"]],
            ),
        ),
    ]


def questions(rng: random.Random, w: World, n_questions: int, test_fraction: float) -> list[dict]:
    """Question `i` has `i % 3 + 1` hops; the last `test_fraction` of them name only entities in
    the last `test_fraction` of each list (held-out anchors, no training question names them)."""
    kinds = {"person": w.people, "org": w.orgs, "city": w.cities}
    by_hops = templates(w)
    n_test = int(round(n_questions * test_fraction))
    out, seen = [], set()
    for i in range(n_questions):
        hops, test = i % 3 + 1, i >= n_questions - n_test
        for _ in range(10000):
            text, kind, ok, solve = rng.choice(by_hops[hops])
            cut = int(len(kinds[kind]) * (1 - test_fraction))
            anchor = rng.randrange(cut, len(kinds[kind])) if test else rng.randrange(0, cut)
            q = text.format(kinds[kind][anchor]["name"])
            if ok(anchor) and q not in seen:
                break
        else:
            raise ValueError(
                f"{len(w.people)} people, {len(w.orgs)} organisations and {len(w.cities)} cities are "
                f"too few for {n_questions} distinct questions"
            )
        seen.add(q)
        answer, path = solve(anchor)
        out.append(
            {
                "id": f"synthetic-{i}",
                "question": q,
                "golden_answers": [answer],
                "data_source": f"{hops}-hop",
                "path": path,
            }
        )
    return out


def synthetic_files(
    seed: int = 0, n_passages: int = 1500, n_questions: int = 3000, cache: str = CACHE
) -> tuple[str, str]:
    """The generated corpus and questions as files in the cache (written once, atomically)."""
    folder = os.path.join(cache, f"synthetic-v{VERSION}-s{seed}-n{n_passages}-q{n_questions}")
    corpus_path, qa_path = os.path.join(folder, "corpus.jsonl"), os.path.join(folder, "qa.jsonl")
    if not (os.path.exists(corpus_path) and os.path.exists(qa_path)):
        os.makedirs(folder, exist_ok=True)
        corpus, questions = generate(seed, n_passages, n_questions)
        _write_jsonl(qa_path, questions)
        _write_jsonl(corpus_path, corpus)
    return corpus_path, qa_path


def _write_jsonl(path: str, rows: list[dict]) -> None:
    # Write then rename, so two servers starting at once never read a half-written file.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# (a) Real data: FlashRAG / Search-R1 formats
# ---------------------------------------------------------------------------------------------


def read_corpus(path: str) -> list[dict]:
    """A JSONL corpus of {"id", "contents"} (FlashRAG's wiki-18; the title on the first line)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, row in enumerate(rows):
        if "contents" not in row:  # some dumps split title and text
            row["contents"] = f'"{row.get("title", "")}"\n{row.get("text", "")}'
        row.setdefault("id", str(i))
    return rows


def read_questions(source: str) -> list[dict]:
    """One QA source: a .jsonl/.json file, a .parquet file, or `hf:NAME[:CONFIG[:SPLIT]]`."""
    if source.startswith("hf:"):
        import datasets  # only for users with network access; not needed offline

        name, config, split = (source[3:].split(":") + [None, None])[:3]
        rows = [dict(r) for r in datasets.load_dataset(name, config, split=split or "test")]
        default = config or name.split("/")[-1]
    elif source.endswith(".parquet"):
        import pandas as pd

        rows = pd.read_parquet(source).to_dict("records")
        default = os.path.basename(source).split(".")[0]
    else:
        with open(source) as f:
            text = f.read()
        rows = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
        default = os.path.basename(source).split(".")[0]
    out = []
    for row in rows:
        answers = row.get("golden_answers")
        if answers is None:  # Search-R1 parquet keeps them under reward_model.ground_truth.target
            answers = row.get("reward_model", {}).get("ground_truth", {}).get("target", [])
        if isinstance(answers, str):
            answers = [answers]
        out.append(
            {
                **row,
                "id": str(row.get("id", len(out))),
                "question": str(row["question"]).strip(),
                "golden_answers": [str(a) for a in answers],
                "data_source": str(row.get("data_source") or default),
            }
        )
    return out


def load_data(
    corpus: str | None = None,
    qa: str | None = None,
    seed: int = 0,
    n_passages: int = 1500,
    cache: str = CACHE,
) -> tuple[str, list[dict], list[dict]]:
    """(corpus path, corpus, questions): the real files if given, else the generated world.
    `qa` may name several sources, comma-separated; their questions are concatenated in order."""
    if corpus is None:
        corpus, generated_qa = synthetic_files(seed, n_passages, cache=cache)
        qa = qa or generated_qa
    if qa is None:
        raise ValueError("a real corpus needs its questions too: give --qa (or SEARCHQA_QA)")
    questions = [q for source in qa.split(",") if source for q in read_questions(source)]
    return corpus, read_corpus(corpus), questions
