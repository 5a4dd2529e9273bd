"""WebArena's evaluators, rewritten: the 0/1 reward of a task config's `eval` block.

Where it sits: `servers/webarena.py` calls `evaluate(config, answer, page)` when the agent says
`stop [answer]`; the page is the instance's live Playwright page (async API).

The rules follow WebArena's `evaluation_harness/evaluators.py` (Zhou et al., 2023, section 3.2):
the reward is the product over `eval_types` of
  string_match  over `reference_answers`: exact_match (equal after stripping quotes and case),
                must_include (every phrase is a substring; a single one-character phrase must be a
                whole token), fuzzy_match (a judge model says the answer means the reference; the
                value "N/A" is first checked exactly);
  url_match     some reference URL's host+path is a substring of the page's ("GOLD in PRED")
                and the page's query carries each reference query key with one of its values;
                alternatives are separated by " |OR| ";
  program_html  for each target: open `url` ("last" = the current page), select `locator` (a JS
                expression such as `document.querySelector('#cart').outerText`, or the whole
                HTML when empty) and require `required_contents` (exact_match or must_include).
fuzzy_match needs a judge: a function (pred, ref, intent) -> float named by the environment
variable WEBARENA_JUDGE=module:function. Without one, fuzzy_match is skipped (left out of the
product) and the answer says so in `eval_notes`.
"""

import ast
import html
import importlib
import os
import re
from typing import Callable
from urllib.parse import parse_qs, urlparse

Judge = Callable[[str, str, str], float]


def load_judge(spec: str | None = None) -> Judge | None:
    """The judge named by `spec` or $WEBARENA_JUDGE ("package.module:function"), or None."""
    spec = spec if spec is not None else os.environ.get("WEBARENA_JUDGE", "")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def similarity_judge(pred: str, ref: str, intent: str) -> float:
    """A stand-in judge with no model: 1 when most of the reference's words are in the answer.
    Use it offline (WEBARENA_JUDGE=servers.webarena_eval:similarity_judge); WebArena uses GPT-4."""
    ref_words = set(re.findall(r"\w+", ref.lower()))
    pred_words = set(re.findall(r"\w+", pred.lower()))
    return float(bool(ref_words) and len(ref_words & pred_words) / len(ref_words) >= 0.8)


# --- string_match ----------------------------------------------------------------------------


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(ref) == 1:  # a lone "0" must not match inside "10"
        return float(ref in re.findall(r"\w+|[^\w\s]", pred))
    return float(ref in pred)


def string_match(config: dict, answer: str, judge: Judge | None, notes: list[str]) -> float:
    pred = clean_answer(answer)
    score = 1.0
    for approach, value in config["eval"]["reference_answers"].items():
        if approach == "exact_match":
            score *= exact_match(value, pred)
        elif approach == "must_include":
            for v in value:
                score *= must_include(v, pred, tokenize=len(value) == 1)
        elif approach == "fuzzy_match":
            if value == "N/A":  # an unachievable task: "N/A" itself, else the judge on the reason
                ok = exact_match("N/A", pred)
                if not ok and judge is not None:
                    ok = judge(pred, config["eval"].get("string_note", ""), config["intent"])
                elif not ok:
                    notes.append("fuzzy_match (N/A reason) not judged: no judge configured")
                score *= float(ok)
            elif judge is None:
                notes.append("fuzzy_match skipped: no judge configured (set WEBARENA_JUDGE=module:function)")
            else:
                for ref in value:
                    score *= float(judge(pred, ref, config["intent"])) if pred else float(not ref)
        else:
            raise ValueError(f"unknown reference answer type {approach!r}")
    return score


# --- url_match -------------------------------------------------------------------------------


def _base_and_query(url: str) -> tuple[str, dict[str, list[str]]]:
    u = urlparse(url.rstrip("/"))
    return (u.netloc + u.path).rstrip("/"), parse_qs(u.query)


def url_match(config: dict, page_url: str) -> float:
    rule = config["eval"].get("url_note", "GOLD in PRED")
    if rule != "GOLD in PRED":
        raise ValueError(f"unknown url matching rule {rule!r}")
    refs = [_base_and_query(u) for u in config["eval"]["reference_url"].split(" |OR| ")]
    pred_base, pred_query = _base_and_query(page_url)
    base_ok = any(base in pred_base for base, _ in refs)
    ref_query: dict[str, set[str]] = {}
    for _, q in refs:
        for k, vs in q.items():
            ref_query.setdefault(k, set()).update(vs)
    query_ok = all(any(v in pred_query.get(k, []) for v in vs) for k, vs in ref_query.items())
    return float(base_ok and query_ok)


# --- program_html ----------------------------------------------------------------------------


def reddit_get_post_url(url: str) -> str:
    """WebArena's helper: the post's own URL from any URL below it (/f/<forum>/<post id>/...)."""
    u = urlparse(url)
    parts = u.path.split("/")
    return f"{u.scheme}://{u.netloc}/f/{parts[2]}/{parts[3]}" if len(parts) > 3 and parts[1] == "f" else url


HELPERS = {"reddit_get_post_url": reddit_get_post_url}  # WebArena's other helpers call Magento/GitLab APIs


def _helper(expr: str, notes: list[str]):
    """A `func:` expression of a task config, `name('text', ...)`, parsed (never evaluated) and
    dispatched to HELPERS by name; only string literals are accepted as arguments. Anything
    else (another name, an attribute, a nested call, an operator) is refused with a note."""
    try:
        call = ast.parse(expr.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        call = None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and not call.keywords
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
    ):
        notes.append(
            f"program_html helper refused: {expr[:200]!r} is not a call of a named helper "
            "with string arguments"
        )
        return None
    if call.func.id not in HELPERS:
        notes.append(f"program_html helper not available here: {call.func.id!r}")
        return None
    return HELPERS[call.func.id](*(a.value for a in call.args))


async def program_html(config: dict, page, notes: list[str]) -> float:
    score = 1.0
    for target in config["eval"]["program_html"]:
        url = target["url"]
        if url.startswith("func:"):
            url = _helper(url[len("func:") :].replace("__last_url__", page.url), notes)
            if url is None:
                return 0.0
        if url != "last":
            await page.goto(url)
        locator = target["locator"].strip()
        if not locator:
            selected = await page.content()
        elif locator.startswith("document.") or locator.startswith("[...document."):
            for prep in target.get("prep_actions", []):
                try:
                    await page.evaluate(f"() => {prep}")
                except Exception:
                    pass
            try:
                selected = str(await page.evaluate(f"() => {locator}") or "")
            except Exception:  # the element is not on the page: nothing selected
                selected = ""
        elif locator.startswith("func:"):
            selected = _helper(locator[len("func:") :], notes)
            if selected is None:
                return 0.0
        else:
            raise ValueError(f"unknown locator {locator!r}")
        selected = html.unescape(selected)
        required = target["required_contents"]
        if "exact_match" in required:
            score *= exact_match(required["exact_match"], selected)
        elif "must_include" in required:
            for content in required["must_include"]:
                score *= float(any(must_include(c, selected) for c in content.split(" |OR| ")))
        else:
            raise ValueError(f"unknown required_contents {list(required)}")
    return score


async def evaluate(config: dict, answer: str, page, judge: Judge | None = None) -> tuple[float, list[str]]:
    """The task's reward for the final `answer` and the state of `page`; notes say what was skipped."""
    notes: list[str] = []
    score = 1.0
    for kind in config["eval"]["eval_types"]:
        if kind == "string_match":
            score *= string_match(config, answer, judge, notes)
        elif kind == "url_match":
            score *= url_match(config, page.url)
        elif kind == "program_html":
            score *= await program_html(config, page, notes)
        else:
            raise ValueError(f"unknown eval type {kind!r}")
    return score, notes
