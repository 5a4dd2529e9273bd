"""Deep Search (AgentGym's `searchqa`): answer a question by searching a corpus, Search-R1 style.

Where it sits: `envs/process.py` starts this file as a subprocess (`python -m servers.searchqa --port P`)
and talks to it over HTTP with the AgentGym protocol (`servers/common.py`). AgentGym's Deep Search
client has its own dialect, accepted here beside this project's: /create gets `{"id": 0}` and must
answer a bare integer (the instance), every later call names the instance `env_idx`, and at /reset
`id` is the question (`{"env_idx": 3, "id": 17}`: instance 3, question 17). Nothing here imports
torch unless the dense retriever is chosen.

One episode: `reset(data_idx)` shows `Question: ...`. Each reply holds one tag (reasoning in
`<think>...</think>` is allowed and ignored):

    <search>query</search>   -> <information>Doc 1(Title: t) text\\nDoc 2(...) ...</information>
                                (the top 3 passages; reward 0)
    <answer>text</answer>    -> reward 1 and the episode ends if the text matches one of the gold
                                answers after normalisation (Search-R1's / the NQ scorer's exact
                                match: lower case, no punctuation, no articles, single spaces);
                                otherwise reward 0 and the episode goes on
    anything else            -> reward 0 and a message saying what a reply must look like

Every answer carries `observation`, `reward`, `score` (= reward; AgentGym's client reads it),
`done`, `question`, and `available_actions`: a few complete replies a small policy can choose
among (searches for the question and the names in it and in the last passages; answers from the
names in the last passages). They are built from the text the agent has seen, never from the gold
answer. The reset answer also names the `category` (data source, or "1-hop".."3-hop" offline).

The expert (`POST /expert`, servers/common.py; the trainer's, never the agent's) knows each
generated question's hop chain (`path`: the entities whose passages lead to the answer): it
searches each hop not yet searched, in order, then answers the first gold answer. For loaded data
(no chain) it searches the question itself, then answers (docs/experts.md).

Retrieval: BM25 (`bm25s`) over the whole passage (title + text) by default, indexed once and saved
beside the corpus (`<corpus>.bm25s/`), so a restart loads it in a fraction of a second; or a dense
retriever (`--retriever dense --dense-model PATH`, any sentence-embedding model through
transformers, e.g. e5 as in the paper; mean-pooled, cosine). One retriever per process serves
every instance. The data (`servers/searchqa_data.py`): the offline fictional encyclopedia by
default, or real Search-R1 / FlashRAG files given by `--corpus` and `--qa` (or the SEARCHQA_*
environment variables, which is how tests and `envs/process.py`, which pass only `--port`, choose them).
"""

import argparse
import json
import os
import re
import string
import threading

import numpy as np

from servers.common import EnvError, build_app, serve
from servers.openenv import add_openenv
from servers.searchqa_data import CACHE, load_data

TOP_K = 3  # passages per search, as in Search-R1 and AgentGym
MAX_SEARCHES, MAX_ANSWERS = 6, 6  # available_actions holds at most 12 replies


# ---------------------------------------------------------------------------------------------
# Reading replies and scoring answers
# ---------------------------------------------------------------------------------------------


_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """The SQuAD / NQ / Search-R1 normaliser: lower case, drop punctuation, drop the articles
    a/an/the, collapse white space."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golden_answers: list[str]) -> bool:
    return normalize_answer(prediction) in {normalize_answer(g) for g in golden_answers}


_THINK = re.compile(r"<think>.*?</think>", re.S)
_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.S)


def parse_reply(reply: str) -> tuple[str, str] | None:
    """The first complete <search> or <answer> tag outside <think>, as (kind, text)."""
    m = _TAG.search(_THINK.sub(" ", reply))
    return (m.group(1), m.group(2).strip()) if m else None


INVALID = (
    "Your reply holds no complete tag. To search, put a query between <search> and "
    "</search>; to give the final answer, put it between <answer> and </answer>."
)

# Capitalised runs of words (names) and years: the candidates a small policy may search or answer.
_MENTION = re.compile(
    r"[A-ZÀ-Þ][\w'\-]*(?:[ ](?:(?:of|the|de|la|du|del|von|van)[ ]){0,2}[A-ZÀ-Þ][\w'\-]*)*"
    r"|\b\d{4}\b"
)  # "Champ de Mars", "Bank of the North", years
_STARTERS = {
    "The",
    "A",
    "An",
    "In",
    "On",
    "At",
    "Of",
    "For",
    "He",
    "She",
    "It",
    "Its",
    "His",
    "Her",
    "They",
    "Their",
    "Who",
    "What",
    "Which",
    "Where",
    "When",
    "How",
    "Why",
    "Is",
    "Was",
    "Are",
    "Did",
    "Does",
    "This",
    "That",
    "These",
    "Title",
    "Doc",
    "Question",
}


def mentions(text: str) -> list[str]:
    """Names and years in `text`, in order, without a sentence's first function word."""
    out = []
    for m in _MENTION.finditer(text):
        words = m.group().split()
        while words and words[0] in _STARTERS:
            words.pop(0)
        if words:
            out.append(" ".join(words))
    return out


def split_passage(contents: str) -> tuple[str, str]:
    """FlashRAG's passage: the title (often in double quotes) on the first line, then the text."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text.strip()


def information(passages: list[str]) -> str:
    if not passages:
        return "<information>No document matches the query.</information>"
    docs = [f"Doc {i + 1}(Title: {t}) {x}" for i, (t, x) in enumerate(map(split_passage, passages))]
    return "<information>" + "\n".join(docs) + "</information>"


# ---------------------------------------------------------------------------------------------
# Retrievers: search(query, k) -> indices of the best passages, best first. Thread-safe.
# ---------------------------------------------------------------------------------------------


def _stamp(path: str, n: int) -> dict:
    st = os.stat(path)
    return {"size": st.st_size, "mtime": int(st.st_mtime), "passages": n}


def _beside(corpus_path: str, suffix: str) -> str:
    """Where an index of the corpus lives: beside it if that folder is writable, else the cache."""
    folder = os.path.dirname(os.path.abspath(corpus_path))
    if os.access(folder, os.W_OK):
        return corpus_path + suffix
    key = re.sub(r"[^\w.-]", "_", os.path.abspath(corpus_path))
    return os.path.join(CACHE, "indexes", key + suffix)


class BM25Retriever:
    def __init__(self, corpus_path: str, passages: list[str]):
        import bm25s  # imported here so that the dense option does not need it

        self.bm25s, self.n = bm25s, len(passages)
        folder = _beside(corpus_path, ".bm25s")
        stamp_path, stamp = os.path.join(folder, "stamp.json"), _stamp(corpus_path, len(passages))
        if os.path.exists(stamp_path) and json.load(open(stamp_path)) == stamp:
            self.index = bm25s.BM25.load(folder, show_progress=False)
            return
        tokens = bm25s.tokenize(passages, stopwords="en", show_progress=False)
        self.index = bm25s.BM25()
        self.index.index(tokens, show_progress=False)
        os.makedirs(folder, exist_ok=True)
        self.index.save(folder, show_progress=False)
        with open(stamp_path, "w") as f:  # written last: a half-saved index is rebuilt
            json.dump(stamp, f)

    def search(self, query: str, k: int = TOP_K) -> list[int]:
        tokens = self.bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        known = [t for t in tokens if t in self.index.vocab_dict]  # words unseen in the corpus match nothing
        if not known:  # empty, only punctuation and stop words, or unknown words
            return []
        # get_scores only reads the index, so instances search in parallel without a lock.
        scores = self.index.get_scores(known)  # (N,) a fresh array, ours to overwrite
        # k argmax passes instead of argpartition, which is slow on the many tied scores of short
        # passages (2 ms vs 0.03 ms at 100k passages); ties go to the lower passage index.
        top = []
        for _ in range(min(k, self.n)):
            i = int(np.argmax(scores))
            if scores[i] <= 0:
                break
            top.append(i)
            scores[i] = -np.inf
        return top


class DenseRetriever:
    """Mean-pooled, L2-normalised embeddings of a transformers encoder (e5 gets its `query: ` /
    `passage: ` prefixes); passage embeddings are computed once and saved beside the corpus."""

    def __init__(self, corpus_path: str, passages: list[str], model: str, batch_size: int = 64):
        import torch  # only when the dense retriever is chosen
        from transformers import AutoModel, AutoTokenizer

        self.torch, self.lock = torch, threading.Lock()
        self.tok = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).eval()
        self.e5 = "e5" in model.lower()
        name = re.sub(r"[^\w.-]", "_", model.rstrip("/").split("/")[-1])
        path = _beside(corpus_path, f".dense-{name}.npy")
        if os.path.exists(path) and np.load(path, mmap_mode="r").shape[0] == len(passages):
            self.emb = np.load(path)
        else:
            prefix = "passage: " if self.e5 else ""
            self.emb = np.concatenate(
                [
                    self.encode([prefix + p for p in passages[i : i + batch_size]])
                    for i in range(0, len(passages), batch_size)
                ]
            )
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            np.save(path, self.emb)

    def encode(self, texts: list[str]) -> np.ndarray:
        with self.torch.no_grad():
            batch = self.tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = self.model(**batch).last_hidden_state  # (B, T, H)
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)  # (B, H)
            return self.torch.nn.functional.normalize(emb, dim=-1).float().numpy()

    def search(self, query: str, k: int = TOP_K) -> list[int]:
        if not query.strip():
            return []
        with self.lock:
            q = self.encode([("query: " if self.e5 else "") + query])[0]  # (H,)
        scores = self.emb @ q  # (N,)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        return [int(i) for i in top[np.argsort(-scores[top])]]


# ---------------------------------------------------------------------------------------------
# The data and retriever of this process, loaded once and shared by every instance
# ---------------------------------------------------------------------------------------------


def config_from_env() -> dict:
    e = os.environ.get
    return {
        "corpus": e("SEARCHQA_CORPUS") or None,
        "qa": e("SEARCHQA_QA") or None,
        "retriever": e("SEARCHQA_RETRIEVER", "bm25"),
        "dense_model": e("SEARCHQA_DENSE_MODEL"),
        "seed": int(e("SEARCHQA_SEED", "0")),
        "passages": int(e("SEARCHQA_PASSAGES", "1500")),
    }


class World:
    def __init__(self, corpus=None, qa=None, retriever="bm25", dense_model=None, seed=0, passages=1500):
        corpus_path, rows, self.questions = load_data(corpus, qa, seed=seed, n_passages=passages)
        self.passages = [r["contents"] for r in rows]
        if not self.questions or not self.passages:
            raise ValueError("the corpus and the question set must not be empty")
        if retriever == "dense":
            if not dense_model:
                raise ValueError("--retriever dense needs --dense-model (a local path or a model name)")
            self.retriever = DenseRetriever(corpus_path, self.passages, dense_model)
        elif retriever == "bm25":
            self.retriever = BM25Retriever(corpus_path, self.passages)
        else:
            raise ValueError(f"unknown retriever {retriever!r}: bm25 or dense")


_world: World | None = None
_world_lock = threading.Lock()


def world(**config) -> World:
    """This process's World, built at the first call (from `config`, else the environment)."""
    global _world
    with _world_lock:
        if _world is None:
            _world = World(**(config or config_from_env()))
        return _world


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------


class SearchQAEnv:
    """One question at a time: search the corpus, then answer."""

    def __init__(self):
        self.world = world()
        self.q: dict | None = None

    def reset(self, data_idx) -> dict:
        n = len(self.world.questions)
        if not isinstance(data_idx, int) or not 0 <= data_idx < n:
            raise EnvError(f"data_idx must be an integer in [0, {n}), got {data_idx!r}")
        self.q = self.world.questions[data_idx]
        self.done = False
        self.last_docs: list[int] = []  # the passages of the last search
        self.searched: set[str] = set()  # normalised queries already sent
        self.answered: set[str] = set()  # normalised answers already given (all wrong)
        self.obs = f"Question: {self.q['question']}"
        return self.answer(0.0, category=self.q["data_source"])

    def step(self, action: str) -> dict:
        # (servers/common.py answers a step before reset or after the end)
        parsed = parse_reply(action)
        reward = 0.0
        if parsed is None:
            self.obs = INVALID
        elif parsed[0] == "search":
            self.searched.add(normalize_answer(parsed[1]))
            self.last_docs = self.world.retriever.search(parsed[1], TOP_K)
            self.obs = information([self.world.passages[d] for d in self.last_docs])
        elif exact_match(parsed[1], self.q["golden_answers"]):
            reward, self.done = 1.0, True
            self.obs = f"The answer {parsed[1]!r} is correct."
        else:
            self.answered.add(normalize_answer(parsed[1]))
            self.obs = f"The answer {parsed[1]!r} is not correct. Search more or answer again."
        return self.answer(reward)

    def observation(self) -> str:
        return self.obs if self.q is not None else "Reset the instance to get a question."

    def close(self) -> None:
        self.q = None

    def answer(self, reward: float, note: str = "", **extra) -> dict:
        obs = f"{note}\n{self.obs}" if note else self.obs
        return {
            "observation": obs,
            "reward": reward,
            "score": reward,
            "done": self.done,
            "question": self.q["question"],
            "available_actions": self.available_actions(),
            **extra,
        }

    def expert(self) -> dict:
        """{"action", "thought"}: the next hop to search, or the gold answer once all are searched."""
        question, path = self.q["question"], self.q.get("path") or []
        hops = path or [question]
        todo = [k for k, h in enumerate(hops) if normalize_answer(h) not in self.searched]
        if todo:
            k = todo[0]
            if not path:
                why = "I do not know this; I search for the question."
            elif k == 0:
                why = f"The question is about {hops[0]}; I search for it first."
            else:
                why = f"The passage about {hops[k - 1]} names {hops[k]}; I search for it next."
            return {"action": f"<search>{hops[k]}</search>", "thought": why}
        answer = self.q["golden_answers"][0]
        return {"action": f"<answer>{answer}</answer>", "thought": f"The passages give the answer: {answer}."}

    def available_actions(self) -> list[str]:
        """Up to 12 complete replies for a small policy, from the question and the last passages."""
        if self.done:
            return []
        question = self.q["question"]
        in_question = mentions(question)
        in_docs = [m for d in self.last_docs for m in mentions(self.world.passages[d])]
        searches, answers, seen = [], [], set()
        for text in [question] + in_question + in_docs:
            key = normalize_answer(text)
            if key and key not in self.searched and key not in seen and not text.isdigit():
                seen.add(key)
                searches.append(text)
        asked, seen = {normalize_answer(m) for m in in_question}, set()
        for text in in_docs:  # an answer is never a name the question itself gives
            key = normalize_answer(text)
            if key and key not in asked and key not in self.answered and key not in seen:
                seen.add(key)
                answers.append(text)
        return [f"<search>{s}</search>" for s in searches[:MAX_SEARCHES]] + [
            f"<answer>{a}</answer>" for a in answers[:MAX_ANSWERS]
        ]


# AgentGym's client sends {"id": 0} to /create (its server pre-fetches that question) and uses the
# whole answer as the instance, so /create answers a bare integer here.
app = build_app("SearchQA", SearchQAEnv, ignored_create_keys=("id",), bare_create_id=True)
add_openenv(app, "searchqa")  # and OpenEnv's WebSocket sessions, HTTP endpoints and task API


def main(argv=None) -> None:
    env = config_from_env()
    p = argparse.ArgumentParser(description="Deep Search (searchqa) environment server (AgentGym protocol)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback by default)")
    p.add_argument("--port", type=int, default=36001, help="port to listen on")
    p.add_argument("--log-level", default="warning", help="uvicorn log level")
    p.add_argument(
        "--corpus",
        default=env["corpus"],
        help="JSONL corpus of {id, contents}; default: the generated encyclopedia",
    )
    p.add_argument(
        "--qa",
        default=env["qa"],
        help="QA sources, comma-separated: .jsonl, .parquet or hf:NAME[:CONFIG[:SPLIT]]",
    )
    p.add_argument("--retriever", default=env["retriever"], choices=["bm25", "dense"], help="search engine")
    p.add_argument(
        "--dense-model",
        default=env["dense_model"],
        help="encoder for --retriever dense, a local path or a name (e.g. intfloat/e5-base-v2)",
    )
    p.add_argument("--seed", type=int, default=env["seed"], help="seed of the generated world")
    p.add_argument("--passages", type=int, default=env["passages"], help="size of the generated corpus")
    a = p.parse_args(argv)
    # Load before listening: the server answers only once the index is ready.
    world(
        corpus=a.corpus,
        qa=a.qa,
        retriever=a.retriever,
        dense_model=a.dense_model,
        seed=a.seed,
        passages=a.passages,
    )
    serve(app, ["--host", a.host, "--port", str(a.port), "--log-level", a.log_level])


if __name__ == "__main__":
    main()
