"""Deep Search (searchqa) over real HTTP: search, answer, exact match, and both data sources."""

import contextlib
import os
import shutil
import subprocess
import sys
import threading

import pytest
import requests

from servers.searchqa import exact_match, normalize_answer, parse_reply
from servers.searchqa_data import generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "searchqa")


@contextlib.contextmanager
def searchqa_env(**env):
    """SEARCHQA_* variables for the servers started inside (EnvServer passes only --port)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def offline(start_server, tmp_path_factory):
    """The default generated world (1,500 passages, 3,000 questions), cached in a temp folder."""
    with searchqa_env(SEARCHQA_CACHE=str(tmp_path_factory.mktemp("cache"))):
        return start_server("servers.searchqa").url


@pytest.fixture(scope="module")
def questions():
    return generate(0)[1]  # the same world the server generated: the test knows the gold


def post(url, path, **body):
    r = requests.post(url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def new_episode(url, data_idx):
    iid = post(url, "/create")  # a bare integer, as AgentGym's Deep Search client needs
    return iid, post(url, "/reset", id=iid, data_idx=data_idx)


def offered_answers(out):
    return [
        a[len("<answer>") : -len("</answer>")] for a in out["available_actions"] if a.startswith("<answer>")
    ]


def test_single_hop_question_is_answered_by_search_then_answer(offline, questions):
    q = questions[0]
    iid, out = new_episode(offline, 0)
    assert out["category"] == "1-hop" and q["question"] in out["observation"]
    out = post(
        offline, "/step", id=iid, action=f"<think>I must look it up.</think><search>{q['question']}</search>"
    )
    assert (
        out["observation"].startswith("<information>Doc 1(Title: ")
        and "\nDoc 3(Title: " in out["observation"]
    )
    assert q["golden_answers"][0] in out["observation"] and out["reward"] == 0 and not out["done"]
    out = post(offline, "/step", id=iid, action=f"<answer>{q['golden_answers'][0].upper()}</answer>")
    assert out["reward"] == out["score"] == 1.0 and out["done"]


def test_two_hop_question_needs_two_searches(offline, questions):
    q = questions[1]  # question i has i % 3 + 1 hops
    gold, bridge = q["golden_answers"][0], q["path"][1]
    iid, out = new_episode(offline, 1)
    assert out["category"] == "2-hop"
    out = post(offline, "/step", id=iid, action=f"<search>{q['question']}</search>")
    assert gold not in out["observation"] and bridge in out["observation"]
    assert f"<search>{bridge}</search>" in out["available_actions"]  # a small policy can follow the chain
    out = post(offline, "/step", id=iid, action=f"<search>{bridge}</search>")
    assert gold in out["observation"] and gold in offered_answers(out)
    out = post(offline, "/step", id=iid, action=f"<answer>{gold}</answer>")
    assert out["reward"] == 1.0 and out["done"]


def test_exact_match_normaliser_on_tricky_cases():
    assert normalize_answer("  The Beatles!! ") == "beatles"
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("An apple, a day") == "apple day"
    assert normalize_answer("Theatre of the Absurd") == "theatre of absurd"  # "the" only as a word
    assert normalize_answer("O'Brien\t\nand  Sons") == "obrien and sons"
    assert exact_match("the 1969", ["1969"]) and exact_match("barack obama", ["Obama", "Barack Obama"])
    assert not exact_match("Paris, Texas", ["Paris"]) and not exact_match("", ["Paris"])


def test_reply_parsing():
    assert parse_reply("<think>maybe <answer>x</answer></think><search> q </search>") == ("search", "q")
    assert parse_reply("<answer>Paris</answer><search>q</search>") == ("answer", "Paris")
    assert parse_reply("I think it is Paris.") is None and parse_reply("<answer>Paris") is None


def test_wrong_answer_does_not_end_the_episode(offline, questions):
    q = questions[3]
    iid, _ = new_episode(offline, 3)
    out = post(offline, "/step", id=iid, action="<answer>Nowhere In Particular</answer>")
    assert out["reward"] == 0 and not out["done"] and "not correct" in out["observation"]
    post(offline, "/step", id=iid, action=f"<search>{q['question']}</search>")
    out = post(offline, "/step", id=iid, action=f"<answer>{q['golden_answers'][0]}</answer>")
    assert out["reward"] == 1.0 and out["done"]
    out = post(offline, "/step", id=iid, action=f"<answer>{q['golden_answers'][0]}</answer>")
    assert out["reward"] == 0 and out["done"]  # the reward is paid once


def test_odd_or_empty_queries_and_untagged_replies_are_handled(offline):
    iid, _ = new_episode(offline, 4)
    for query in [
        "",
        "   ",
        "!!! ??? ;--",
        "the of a an",
        "<b>\u00e9t\u00e9 \U0001f642 \\ \" ' %s {0}</b>",
        "x" * 5000,
        "zzzqqqxxy",
    ]:
        out = post(offline, "/step", id=iid, action=f"<search>{query}</search>")
        assert out["observation"].startswith("<information>") and not out["done"]
    out = post(offline, "/step", id=iid, action="<search>no closing tag")
    assert "<search>" in out["observation"] and "<answer>" in out["observation"] and out["reward"] == 0
    assert requests.get(offline + "/observation", params={"id": iid}).json() == out["observation"]


def test_offered_actions_come_from_seen_text_only(offline, questions):
    for idx in range(6):
        iid, out = new_episode(offline, idx)
        assert 1 <= len(out["available_actions"]) <= 12 and not offered_answers(out)  # nothing seen yet
        out = post(offline, "/step", id=iid, action=out["available_actions"][0])
        assert len(out["available_actions"]) <= 12
        for a in offered_answers(out):
            assert a in out["observation"]


def test_bad_requests_get_json_errors(offline):
    iid = post(offline, "/create")
    bad = [
        ("/step", {"id": iid, "action": "<search>x</search>"}, 400),  # not reset yet
        ("/reset", {"id": iid, "data_idx": -1}, 422),
        ("/reset", {"id": iid, "data_idx": 10**9}, 400),
        ("/step", {"id": 10**6, "action": "x"}, 404),
        ("/step", {"id": iid}, 422),
    ]
    for path, body, status in bad:
        r = requests.post(offline + path, json=body, timeout=10)
        assert r.status_code == status, (path, body, r.text)
        assert "error" in r.json()
    out = post(offline, "/reset", env_idx=iid, data_idx=0)  # AgentGym's name for the instance
    assert out["category"] == "1-hop"


def test_many_instances_search_at_once(offline, questions):
    results = {}

    def play(idx):
        iid, _ = new_episode(offline, idx)
        post(offline, "/step", id=iid, action=f"<search>{questions[idx]['question']}</search>")
        results[idx] = post(
            offline, "/step", id=iid, action=f"<answer>{questions[idx]['golden_answers'][0]}</answer>"
        )

    threads = [threading.Thread(target=play, args=(i,)) for i in range(0, 48, 3)]  # 1-hop questions
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 16 and all(r["reward"] == 1.0 for r in results.values())


def test_real_format_files_load_and_the_index_is_saved_beside_the_corpus(start_server, tmp_path):
    for name in os.listdir(FIXTURES):
        shutil.copy(os.path.join(FIXTURES, name), tmp_path)
    env = {
        "SEARCHQA_CORPUS": str(tmp_path / "corpus.jsonl"),
        "SEARCHQA_QA": f"{tmp_path / 'nq.jsonl'},{tmp_path / 'hotpotqa.jsonl'}",
    }
    with searchqa_env(**env):
        server = start_server("servers.searchqa")
    iid, out = new_episode(server.url, 1)
    assert out["category"] == "nq"  # FlashRAG's files carry no data_source: the file name names it
    out = post(server.url, "/step", id=iid, action="<search>44th president of the United States</search>")
    assert out["observation"].startswith("<information>Doc 1(Title: Barack Obama) Barack Hussein Obama II")
    assert (
        post(server.url, "/step", id=iid, action="<answer> obama. </answer>")["reward"] == 1.0
    )  # any gold alias
    stamp = tmp_path / "corpus.jsonl.bm25s" / "stamp.json"
    built = stamp.stat().st_mtime_ns
    with searchqa_env(**env):
        server.restart()
    assert stamp.stat().st_mtime_ns == built  # the restart loaded the saved index, built nothing
    iid, out = new_episode(server.url, 2)
    assert out["category"] == "hotpotqa"
    out = post(server.url, "/step", id=iid, action="<search>Gustave Eiffel engineer born</search>")
    assert "Doc 1(Title: Gustave Eiffel)" in out["observation"]


def test_the_bm25_server_never_imports_torch(tmp_path):
    code = (
        "import sys, servers.searchqa as s; s.world(); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    env = {**os.environ, "SEARCHQA_CACHE": str(tmp_path)}
    assert subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT).returncode == 0


def test_the_generated_world_is_the_one_its_version_names():
    """Generated corpora are cached by VERSION (synthetic_files): a change to what `generate` writes
    must come with a new VERSION, or a cached corpus would no longer match its questions. This
    pins a small world's text at VERSION 1 (refactors of the generator must keep it)."""
    import hashlib
    import json

    from servers import searchqa_data

    corpus, qs = generate(seed=3, n_passages=300, n_questions=500, test_fraction=0.3)
    digest = hashlib.sha256(json.dumps([corpus, qs]).encode()).hexdigest()
    assert (searchqa_data.VERSION, digest[:16]) == (1, "b61d3ad8d4460baa")
