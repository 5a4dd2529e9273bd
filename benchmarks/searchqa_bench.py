"""Deep Search retrieval speed on a 100k-passage corpus (issue: a search answers in milliseconds).

Generates the offline encyclopedia at `--passages` (cached), builds its BM25 index (or, with
`--rebuild`, builds it again), times loading the saved index, then times single searches in
process (the retriever alone) and over HTTP (`/step` with `<search>` on a running server, from
one client and from 16 at once). Queries are the generated questions and the names in them.

    python benchmarks/searchqa_bench.py                # 100,000 passages
    python benchmarks/searchqa_bench.py --passages 10000 --queries 500
"""

import argparse
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import requests  # noqa: E402

from envs import EnvServer  # noqa: E402
from servers.searchqa import BM25Retriever, mentions  # noqa: E402
from servers.searchqa_data import read_corpus, read_questions, synthetic_files  # noqa: E402


def ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return (
        f"median {1000 * statistics.median(xs):.2f} ms, p95 {1000 * xs[int(0.95 * len(xs))]:.2f} ms, "
        f"max {1000 * xs[-1]:.2f} ms"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--passages", type=int, default=100_000, help="size of the generated corpus")
    p.add_argument("--queries", type=int, default=1000, help="searches to time")
    p.add_argument("--rebuild", action="store_true", help="delete the saved index and build it again")
    args = p.parse_args()

    t = time.perf_counter()
    corpus_path, qa_path = synthetic_files(0, args.passages)
    passages = [r["contents"] for r in read_corpus(corpus_path)]
    questions = read_questions(qa_path)
    print(
        f"corpus: {len(passages):,} passages, {len(questions):,} questions, generated/read in "
        f"{time.perf_counter() - t:.1f} s ({corpus_path})"
    )
    if args.rebuild:
        shutil.rmtree(corpus_path + ".bm25s", ignore_errors=True)
    t = time.perf_counter()
    BM25Retriever(corpus_path, passages)
    print(f"index: first construction (built, or loaded if saved before) {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    retriever = BM25Retriever(corpus_path, passages)
    print(f"index: loading the saved index {time.perf_counter() - t:.3f} s")

    queries = []
    for q in questions:
        queries += [q["question"]] + mentions(q["question"])
    queries = queries[: args.queries]
    times = []
    for q in queries:
        t = time.perf_counter()
        retriever.search(q, 3)
        times.append(time.perf_counter() - t)
    print(f"in process, {len(queries)} single searches: {ms(times)}")

    os.environ["SEARCHQA_PASSAGES"] = str(args.passages)
    t = time.perf_counter()
    with EnvServer("servers.searchqa") as server:
        print(f"server: started and answering in {time.perf_counter() - t:.1f} s")
        url = server.url

        def episode(qs):
            s = requests.Session()
            iid = s.post(url + "/create", json={}).json()  # Deep Search: the bare instance number
            s.post(url + "/reset", json={"id": iid, "data_idx": 0})
            out = []
            for q in qs:
                t = time.perf_counter()
                r = s.post(url + "/step", json={"id": iid, "action": f"<search>{q}</search>"})
                out.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
            return out

        one = episode(queries[:300])
        print(f"over HTTP, 1 client, {len(one)} searches: {ms(one)}")
        chunks = [queries[i::16][:30] for i in range(16)]
        t = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            many = [x for out in pool.map(episode, chunks) for x in out]
        wall = time.perf_counter() - t
        print(f"over HTTP, 16 clients, {len(many)} searches: {ms(many)}; {len(many) / wall:.0f} searches/s")


if __name__ == "__main__":
    main()
