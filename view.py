"""See what the agent did: one self-contained HTML report of saved episodes and training curves.

    python view.py runs/eval                          # an eval.py output folder
    python view.py runs/default                       # a train.py run: curves, sample rollouts, eval
    python view.py runs/eval_before runs/eval_after --out compare.html   # two runs side by side
    python view.py runs/eval/trajectories.jsonl       # trajectory files as eval.py writes them
    python view.py runs/default --credit grpo,gigpo,ppo   # each turn's credit under three algorithms

Where it sits: after the loop. `eval.py` writes `<out>/summary.json` and one trajectory per line
to `<out>/trajectories.jsonl`; `train.py` writes `<out>/metrics.jsonl` (one line per step),
`<out>/summary.json` (`eval_before`, `eval_after`) and, with `--save-rollouts-every N`, sample
rollouts to `<out>/rollouts/step_<N>.jsonl` and the two evaluations' episodes to
`<out>/eval_before/` and `<out>/eval_after/`. This file reads any of those and writes one HTML
file (default `<first input>/report.html`) that opens offline in a browser: no server, no
network, no build step; CSS, JavaScript and the data are inside it. The page itself lives in
`report/` beside this file: `report.html` (the skeleton), `report.css` and `report.js` (the code
that draws everything from the data), read when a report is written and inlined into it.

The report holds: a summary per set of episodes (success, score, turns, per category, pass@k as
a curve), a table of episodes with filters and sorting, an episode page (each turn's
observation, the full reply with the parsed action highlighted, a mark when the reply did not
parse or the environment refused it, reward, done; BabyAI's grid when the run recorded frames),
a comparison of two sets on the same task ids (which tasks flipped), a training run's
learning curves with a banner per alarm it raised (machinery/signals.py, at the steps it held),
and each saved training step's credit: every turn coloured by the advantage the run's algorithm
gave it, and with `--credit grpo,gigpo,ppo` those algorithms' own advantages on the same episodes,
side by side (the Credit tab; docs/signals.md). A saved step's episode page also has the token
inspector: each token of the rows the update trained, with its loss mask, sampled log-prob, ratio
at the update, advantage and (PPO) value, coloured by the one chosen, the outcome's token marked
and the tokens where the clip bit outlined. Agent and environment text is untrusted: the
data is embedded as JSON with `<`, `>` and `&` escaped, and the page only ever inserts it as
text, never as HTML.

Every field is optional: a reader of old or partial files gets what is there. A line of a JSONL
file that is not valid JSON (a truncated last line after a crash, say) is reported by file and
line number at the top of the report, and the other lines are still shown.
"""

import dataclasses
import glob
import json
import math
import os
import re

from machinery import signals

# The page's files: the skeleton, its styles and its code (read at run time, inlined in the report).
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report")
# Only images we made ourselves (BabyAI's frames) become <img> sources.
DATA_URL = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


# ---------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------


def read_jsonl(path: str) -> tuple[list[dict], list[str]]:
    """The JSON objects of a JSONL file, and one message per line that is not one."""
    rows, problems = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    last = max((n for n, line in enumerate(lines, 1) if line.strip()), default=0)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            cut = " It is the last line: the run may have stopped while writing it." if n == last else ""
            problems.append(
                f"{path}, line {n}: not valid JSON ({e.msg} at column {e.colno}); the line "
                f"starts {line[:60].strip()!r}.{cut} Skipped; the other lines are shown."
            )
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}, line {n}: a JSON {type(row).__name__}, not an object. Skipped.")
            continue
        rows.append(row)
    return rows, problems


def read_json(path: str, problems: list[str]) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            out = json.load(f)
        return out if isinstance(out, dict) else {}
    except (OSError, json.JSONDecodeError) as e:
        problems.append(f"{path}: could not be read ({e}).")
        return {}


def _text(x) -> str:
    return x if isinstance(x, str) else "" if x is None else json.dumps(x)


def _num(x, default=0.0) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else default


def turns_of(rec: dict) -> tuple[str, list[dict]]:
    """(system prompt, turns) of one trajectory record. Turn k: the observation the agent saw,
    its reply, the action sent, the reward, done, what came back, and whether it parsed.

    eval.py's records hold `conversation` (system?, user, assistant, user, ...), `actions`,
    `rewards` and, when recorded, `observations` (the first one and one after every action) and
    `frames` (a picture per observation)."""
    msgs = [m for m in rec.get("conversation") or rec.get("messages") or [] if isinstance(m, dict)]
    system = "\n\n".join(_text(m.get("content")) for m in msgs if m.get("role") == "system")
    users = [_text(m.get("content")) for m in msgs if m.get("role") == "user"]
    replies = [_text(m.get("content")) for m in msgs if m.get("role") == "assistant"]
    obs = [_text(o) for o in rec.get("observations") or []] or users
    actions = [_text(a) for a in rec.get("actions") or []]
    n = max(len(replies), len(actions))
    out = [
        turn(rec, k, _get(obs, k), _get(replies, k), _get(actions, k), _get(obs, k + 1), last=k == n - 1)
        for k in range(n)
    ]
    if out:  # the picture after the last action (BabyAI's final grid)
        out[-1]["frame_after"] = _frame(rec, n)
    elif obs:  # the agent never replied: the first observation alone
        out.append(
            {
                "observation": obs[0],
                "reply": "",
                "action": "",
                "reward": None,
                "done": bool(rec.get("done")),
                "after": "",
                "status": "no reply",
                "frame": "",
            }
        )
    return system, out


def turn(rec: dict, k: int, observation: str, reply: str, action: str, after: str, last: bool) -> dict:
    """Turn k of record `rec` as the page shows it; `after`: the observation that came back."""
    rewards = rec.get("rewards") or []
    credit = _credit_of(rec)
    return {
        "observation": observation,
        "reply": reply,
        "action": action,
        "reward": _num(rewards[k]) if k < len(rewards) else None,
        "done": bool(rec.get("done")) and last,
        "after": after,
        "status": turn_status(action, after),
        "frame": _frame(rec, k),
        # the advantage the run's algorithm gave this turn (and PPO's value), when saved
        "credit": _at(credit.get("credit"), k),
        "value": _at(credit.get("value_sum"), k),
        "tokens": _at(credit.get("tokens"), k),
    }


def turn_status(action: str, after: str) -> str:
    """A turn's mark: "unparsed" when no action could be read from the reply, "refused" when the
    environment answered that it could not do it (`signals.refused`, which counts such turns as
    `signals/invalid_actions`), else "ok"."""
    if not action.strip():
        return "unparsed"
    return "refused" if signals.refused(after) else "ok"


def _get(xs: list[str], k: int) -> str:
    return xs[k] if k < len(xs) else ""


def _frame(rec: dict, k: int) -> str:
    """The record's picture k (before turn k; k = its turns: after the last), if it is ours."""
    frames = rec.get("frames") or []
    frame = frames[k] if k < len(frames) and isinstance(frames[k], str) else ""
    return frame if DATA_URL.fullmatch(frame) else ""


def _credit_of(rec: dict) -> dict:
    """The credit the run's algorithm gave the record's turns, saved with a training step's
    rollouts (credit.turn_credit: its `algo`, `token_level`, per-turn `credit`, ...); {} if none."""
    return rec["credit"] if isinstance(rec.get("credit"), dict) else {}


def _at(xs, k):
    return _num(xs[k], None) if isinstance(xs, list) and k < len(xs) else None


def episode(rec: dict, set_name: str) -> dict:
    """One trajectory record as the page shows it; every field is optional."""
    system, turns = turns_of(rec)
    error = _text(rec.get("error"))
    done = bool(rec.get("done"))
    return {
        "set": set_name,
        "task": rec.get("task", rec.get("data_idx", "")),
        "category": _text(rec.get("category")),
        "success": bool(rec.get("success")),
        "reward": _num(rec.get("reward")),
        "score": _num(rec.get("score")),
        "turns": int(_num(rec.get("turns"), len([t for t in turns if t["reply"] or t["action"]]))),
        "done": done,
        "truncated": not done and not error,
        "error": error,
        "step": rec.get("step"),
        "system": system,
        "steps": turns,
        "credit_algo": _text(_credit_of(rec).get("algo")),
        # its credit sums the turn's tokens' advantages (the page says so beside the algorithm's name)
        "credit_token_level": bool(_credit_of(rec).get("token_level")),
        "token_rows": token_rows(_credit_of(rec)),
    }


TOKEN_FIELDS = ("mask", "forced", "logprob", "ratio", "advantage", "value")  # per token, numbers


def token_rows(credit: dict) -> dict | None:
    """The token inspector's data of a saved training step's record (credit.token_rows: the clip
    bounds and, per row, each token's text and numbers), each row's lists cut to its text's
    length; None when the record has none."""
    rows = [r for r in credit.get("rows") or [] if isinstance(r, dict) and isinstance(r.get("text"), list)]
    if not rows:
        return None
    out = []
    for r in rows:
        n = len(r["text"])
        row = {"turn": int(_num(r.get("turn"))), "text": [_text(x) for x in r["text"]]}
        for key in TOKEN_FIELDS:
            xs = r.get(key)
            if isinstance(xs, list) and len(xs) >= n:
                row[key] = [_num(x, None) for x in xs[:n]]
        out.append(row)
    clip = credit.get("clip")
    clip = [_num(x) for x in clip] if isinstance(clip, list) and len(clip) == 2 else None
    return {"clip": clip, "rows": out}


def load(path: str, credit: dict | None = None) -> dict:
    """A folder (eval output or training run) or a JSONL file -> sets of episodes, summaries,
    training metrics, the alarms the run raised and problems found on the way. `credit`: name ->
    algorithm (`credit_algos`): each turn of a training step's rollouts also gets each one's
    credit on those same episodes (`add_credits`)."""
    out = {"name": path.rstrip("/"), "sets": [], "summaries": {}, "metrics": [], "problems": [], "alarms": []}
    problems = out["problems"]
    summary_file = os.path.join(path, "summary.json")
    summary = (
        read_json(summary_file, problems) if os.path.isdir(path) and os.path.exists(summary_file) else {}
    )

    def add_set(name: str, file: str, step=None):
        rows, bad = read_jsonl(file)
        problems.extend(bad)
        eps = []
        for r in rows:
            if step is not None and r.get("step") is None:
                r["step"] = step
            eps.append(episode(r, name))
        if credit and (step is not None or any("group" in r for r in rows)):  # one training step's batch
            add_credits(eps, rows, credit, summary.get("config") or {})
        out["sets"].append({"name": name, "episodes": eps})

    if os.path.isfile(path):
        if os.path.basename(path) == "metrics.jsonl":
            out["metrics"], bad = read_jsonl(path)
            problems.extend(bad)
            out["alarms"] = alarms_of(out["metrics"])
        else:
            add_set(path, path)
        return out
    if not os.path.isdir(path):
        problems.append(f"{path}: no such file or folder.")
        return out
    name = out["name"]
    if os.path.exists(os.path.join(path, "metrics.jsonl")):  # a training run
        out["metrics"], bad = read_jsonl(os.path.join(path, "metrics.jsonl"))
        problems.extend(bad)
        out["alarms"] = alarms_of(out["metrics"])
        out["config"] = summary.get("config", {})
        for key in ("eval_before", "eval_after"):
            if isinstance(summary.get(key), dict):
                out["summaries"][f"{name} {key}"] = summary[key]
            file = os.path.join(path, key, "trajectories.jsonl")
            if os.path.exists(file):
                add_set(f"{name} {key}", file)
        for file in sorted(glob.glob(os.path.join(path, "rollouts", "step_*.jsonl"))):
            step = int(re.sub(r"\D", "", os.path.basename(file)) or 0)
            add_set(f"{name} step {step}", file, step)
    if os.path.exists(os.path.join(path, "trajectories.jsonl")):  # an eval.py output folder
        if summary and "eval_before" not in summary:
            out["summaries"][name] = summary
        add_set(name, os.path.join(path, "trajectories.jsonl"))
    if not out["sets"] and not out["metrics"]:
        problems.append(f"{path}: found no trajectories.jsonl, metrics.jsonl or rollouts/ here.")
    return out


def alarms_of(metrics: list[dict]) -> list[dict]:
    """The alarms a training run raised (train.py logs `alarm/<name>` = 1 on each step one holds):
    per alarm, its steps and the line train.py printed when it first fired."""
    rows = [r for r in metrics if isinstance(r.get("step"), (int, float))]
    out = []
    for name in signals.ALARMS:
        at = [i for i, r in enumerate(rows) if r.get(f"alarm/{name}")]
        if at:
            out.append(
                {
                    "name": name,
                    "steps": [rows[i]["step"] for i in at],
                    "message": signals.describe(name, rows[: at[0] + 1]),
                }
            )
    return out


def credit_algos(names: str) -> dict:
    """`--credit grpo,gigpo,ppo` -> name -> algorithm (algos.ALGOS; imported only when asked:
    it loads torch and the algorithm files)."""
    from algos import ALGOS

    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ALGOS]
    if unknown:
        raise ValueError(f"--credit: unknown algorithm(s) {', '.join(unknown)}; allowed: {', '.join(ALGOS)}")
    return {n: ALGOS[n] for n in wanted}


def run_config(saved: dict):
    """The run's algorithm settings (algos.Settings) from summary.json's `config`, their defaults
    where absent: all that the algorithms' advantages() read (group_std_eps, step_weight, gamma,
    lam, ...)."""
    from algos import Settings

    known = {f.name for f in dataclasses.fields(Settings)}
    return Settings(**{k: v for k, v in saved.items() if k in known})


def add_credits(eps: list[dict], rows: list[dict], algos: dict, saved_config: dict) -> None:
    """Each turn of one training step's episodes (`eps`, read from records `rows`) gets
    `credits`: name -> the credit algorithm `algos[name]` gives it on these same episodes
    (credit.credit_on_episodes; imported only when asked: it loads torch)."""
    from diagnostics.credit import credit_on_episodes

    by_algo = credit_on_episodes(rows, algos, run_config(saved_config))
    for i, e in enumerate(eps):
        for k, t in enumerate(e["steps"]):
            t["credits"] = {a: _at(by_algo[a][i], k) for a in algos}


# ---------------------------------------------------------------------------------------------
# Writing the page
# ---------------------------------------------------------------------------------------------


def finite(x):
    """`x` with every NaN or infinite float replaced by None: JSON has no NaN (a non-finite loss
    is logged as NaN, and JSON.parse would refuse the whole page)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def embed_json(data) -> str:
    """JSON that is safe inside <script>: no `</script>`, `<!--` or HTML can end or open a tag,
    because `<`, `>` and `&` are written as JSON escapes (U+2028/9 too, for old parsers)."""
    text = json.dumps(finite(data), ensure_ascii=False, allow_nan=False)
    for ch, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, esc)
    return text


def report(paths: list[str], credit: dict | None = None) -> dict:
    runs = [load(p, credit) for p in paths]
    return {
        "title": " vs ".join(r["name"] for r in runs),
        "sets": [s for r in runs for s in r["sets"]],
        "summaries": {k: v for r in runs for k, v in r["summaries"].items()},
        "training": [
            {"name": r["name"], "metrics": r["metrics"], "config": r.get("config", {})}
            for r in runs
            if r["metrics"]
        ],
        "problems": [p for r in runs for p in r["problems"]],
        "alarms": [dict(a, run=r["name"]) for r in runs for a in r["alarms"]],
        # the algorithms of --credit: name -> whether a turn's credit sums its tokens' advantages
        "credit": {name: {"token_level": algo.token_level} for name, algo in (credit or {}).items()},
    }


def page_file(name: str) -> str:
    with open(os.path.join(PAGE, name), encoding="utf-8") as f:
        return f.read()


def write_html(data: dict, out: str) -> None:
    """One self-contained page: report/report.html with its styles, its code and the data inlined
    (the data last, so no text in it is ever taken for a placeholder)."""
    page = (
        page_file("report.html")
        .replace("/*STYLE*/", page_file("report.css"))
        .replace("/*SCRIPT*/", page_file("report.js"))
        .replace("/*DATA*/", embed_json(data))
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)


def write_report(paths: list[str], out: str) -> str:
    """The report of `paths` written to `out` (what train.py and eval.py call at the end)."""
    write_html(report(paths), out)
    return out


def main(argv=None) -> str:
    from config import Parser  # one line for bad input, as train.py and eval.py answer it

    p = Parser(description="Write an HTML report of saved episodes and training curves.")
    p.add_argument("inputs", nargs="+", help="eval output folders, training run folders or JSONL files")
    p.add_argument(
        "--out", default="", help="the HTML file (default: report.html in the first input's folder)"
    )
    p.add_argument(
        "--credit",
        default="",
        help="algorithms whose per-turn credit to compute on the saved rollout "
        "steps, side by side, e.g. grpo,gigpo,ppo (diagnostics/credit.py; default: only the run's own)",
    )
    args = p.parse_args(argv)
    for path in args.inputs:
        if not os.path.exists(path):
            p.error(
                f"{path}: no such file or folder (looked for {os.path.abspath(path)}); allowed: "
                "an eval.py or train.py output folder, or a .jsonl file of trajectories"
            )
    first = args.inputs[0]
    out = args.out or os.path.join(
        first if os.path.isdir(first) else os.path.dirname(first) or ".", "report.html"
    )
    try:
        credit = credit_algos(args.credit) if args.credit else None
    except ValueError as e:
        p.error(str(e))
    data = report(args.inputs, credit)
    write_html(data, out)
    n = sum(len(s["episodes"]) for s in data["sets"])
    print(
        f"wrote {out}: {n} episodes in {len(data['sets'])} sets, "
        f"{sum(len(t['metrics']) for t in data['training'])} training steps"
    )
    for msg in data["problems"]:
        print("warning:", msg)
    for a in data["alarms"]:
        print(f"{a['message']} (steps {', '.join(map(str, a['steps']))})")
    return out


if __name__ == "__main__":
    main()
