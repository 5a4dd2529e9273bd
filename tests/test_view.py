"""view.py: the HTML report, read back in a real browser (headless Chromium through Playwright).

The inputs are written here in the shapes eval.py and train.py write, with hostile agent text,
an unparsed reply, a refused action, BabyAI frames, a malformed line and a truncated last line.
"""

import json
import os
import shutil

import numpy as np
import pytest
import torch

import view
from servers.babyai import png_data_url

HOSTILE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><!--'
FRAME = png_data_url(np.tile(np.arange(16, dtype=np.uint8)[:, None, None] * 16, (1, 16, 3)))  # 16x16


def traj(task, success, actions, observations, category="BabyAI-GoToObjS6-v1", done=None, frames=None):
    """A record as eval.py writes it: the conversation holds the first observation, each reply and
    each observation that came back before the episode ended."""
    done = success if done is None else done
    conv = []
    for k, a in enumerate(actions):
        conv.append({"role": "user", "content": observations[k]})
        conv.append(
            {"role": "assistant", "content": f"Thought: I try this.\nAction: {a}" if a else "I am not sure."}
        )
    if not done:  # the last observation is context for a next turn only when the episode goes on
        conv.append({"role": "user", "content": observations[len(actions)]})
    rec = {
        "task": task,
        "category": category,
        "success": success,
        "reward": 0.9 if success else 0.0,
        "score": 0.9 if success else 0.0,
        "turns": len(actions),
        "done": done,
        "error": "",
        "actions": actions,
        "rewards": [0.0] * (len(actions) - 1) + [0.9 if success else 0.0],
        "conversation": conv,
        "observations": observations,
    }
    if frames:
        rec["frames"] = frames
    return rec


def episodes():
    return [
        traj(
            4,
            True,
            ["go to red ball 1"],
            ["You see a red ball 1. Goal: go to the red ball.", "The task is completed."],
            frames=[FRAME, FRAME],
        ),
        traj(
            44,
            False,
            ["turn left", "fly away"],
            ["obs a", "obs b", '"fly away" is not an available action; choose'],
            done=False,
        ),
        traj(
            84,
            False,
            ["", "turn right"],
            [HOSTILE, "obs " + HOSTILE, "obs c"],
            category="BabyAI-GoToRedBall-v0",
            done=False,
        ),
        traj(124, True, ["pickup key 1", "go to door 1"], ["o1", "o2", "The task is completed."]),
        traj(164, False, ["move forward"], ["o1", "o2"], category="BabyAI-GoToRedBall-v0", done=False),
    ]


def write_run(folder, eps, bad_lines=True, summary=None):
    os.makedirs(folder, exist_ok=True)
    lines = [json.dumps(e) for e in eps]
    if bad_lines:
        lines.insert(2, '{"task": 999, "success": tru')  # line 3: malformed
        lines.append(json.dumps(eps[0])[:40])  # a truncated last line (a crash while writing)
    with open(os.path.join(folder, "trajectories.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if summary is not None:
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(summary, f)
    return folder


# --- reading, without a browser ------------------------------------------------------------------


def test_a_malformed_or_truncated_line_is_named_and_the_rest_is_read(tmp_path):
    run = write_run(str(tmp_path / "ev"), episodes())
    rows, problems = view.read_jsonl(os.path.join(run, "trajectories.jsonl"))
    assert len(rows) == 5
    assert len(problems) == 2
    assert "line 3:" in problems[0] and "not valid JSON" in problems[0]
    assert "line 7:" in problems[1] and "last line" in problems[1] and "last line" not in problems[0]


def test_turns_show_the_reply_the_action_and_what_the_environment_did():
    system, turns = view.turns_of(episodes()[1])
    assert [t["status"] for t in turns] == ["ok", "refused"]
    assert turns[1]["reply"].endswith("Action: fly away") and turns[1]["action"] == "fly away"
    assert turns[0]["observation"] == "obs a" and turns[0]["after"] == "obs b"
    assert [t["done"] for t in turns] == [False, False]
    _, turns = view.turns_of(episodes()[2])
    assert turns[0]["status"] == "unparsed"  # no action could be read from the reply
    _, turns = view.turns_of(episodes()[0])
    assert turns[0]["done"] and turns[0]["frame"] == FRAME and turns[0]["frame_after"] == FRAME
    ep = view.episode(episodes()[4], "s")
    assert ep["truncated"] and not ep["done"]


def test_a_record_with_only_some_fields_still_loads():
    ep = view.episode({"task": 3, "conversation": [{"role": "user", "content": "hello"}]}, "s")
    assert ep["task"] == 3 and ep["turns"] == 0 and ep["steps"][0]["observation"] == "hello"
    ep = view.episode({"actions": ["a", "b"]}, "s")
    assert ep["turns"] == 2 and [t["action"] for t in ep["steps"]] == ["a", "b"]
    ep = view.episode({"frames": ["javascript:alert(1)"], "actions": ["a"]}, "s")
    assert ep["steps"][0]["frame"] == ""  # only PNG data URLs become pictures


def test_untrusted_text_cannot_close_the_script_or_open_a_tag(tmp_path):
    run = write_run(str(tmp_path / "ev"), episodes())
    out = view.main([run, "--out", str(tmp_path / "r.html")])
    html = open(out).read()
    assert html.count("</script>") == 2  # the data block's and the code's own
    assert "<img src=x" not in html and "window.__pwned" in html  # the text is there, escaped
    data = html.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    assert json.loads(data)["sets"][0]["episodes"][2]["steps"][0]["observation"] == HOSTILE


# --- in the browser ------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
]


@pytest.fixture(scope="module")
def browser():
    pw_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        pytest.skip("needs Chromium (apt-get install -y chromium)")
    pw = pw_api.sync_playwright().start()
    b = pw.chromium.launch(
        executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
        headless=True,
        args=ARGS,
    )
    yield b
    b.close()
    pw.stop()


def open_page(browser, path):
    """A page on the report, collecting console errors, page errors and any network request."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.errors, page.requests = [], []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on(
        "request", lambda r: page.requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None
    )
    page.goto("file://" + os.path.abspath(path))
    return page


def test_report_in_chromium_table_filter_episode_view(browser, tmp_path):
    eps = episodes()
    run = write_run(
        str(tmp_path / "ev"),
        eps,
        summary={
            "success_rate": 0.4,
            "pass_at_k": {"1": 0.4, "2": 0.6, "4": 0.7},
            "by_category": {c: {"pass_at_k": {"1": 0.3, "2": 0.5, "4": 0.6}} for c in ("A", "B")},
        },
    )
    out = view.main([run])
    assert out == os.path.join(run, "report.html")
    page = open_page(browser, out)
    page.evaluate("location.hash = '#episodes'")
    assert page.inner_text("#count") == "5 of 5 episodes"  # both bad lines skipped, the rest shown
    assert page.locator("#episodes tbody tr").count() == 5
    problems = page.inner_text("#problems")
    assert "line 3:" in problems and "line 7:" in problems
    page.select_option("#f-outcome", "success")
    assert page.inner_text("#count") == "2 of 5 episodes"
    page.select_option("#f-outcome", "")
    page.select_option("#f-category", "BabyAI-GoToRedBall-v0")
    assert page.inner_text("#count") == "2 of 5 episodes"
    page.select_option("#f-category", "")
    page.click("#episodes th[data-key=score]")  # sort by score, ascending, then descending
    assert page.locator("#episodes tbody tr td:nth-child(5)").all_inner_texts() == [
        "0",
        "0",
        "0",
        "0.900",
        "0.900",
    ]
    page.click("#episodes th[data-key=task]")
    page.click("#episodes th[data-key=task]")
    assert page.locator("#episodes tbody tr td:nth-child(2)").all_inner_texts() == [
        "164",
        "124",
        "84",
        "44",
        "4",
    ]
    page.fill("#f-text", "fly away")
    assert page.inner_text("#count") == "1 of 5 episodes"
    page.click("#episodes tbody tr")  # the refused one
    page.wait_for_selector("#episode-view", state="visible")  # the hash routes it, a task later
    assert page.is_visible("#episode-view") and not page.is_visible("#episodes-view")
    assert page.locator(".turn").count() == 2
    assert page.locator(".turn mark").all_inner_texts() == ["turn left", "fly away"]
    assert "refused by the environment" in page.locator(".turn").nth(1).inner_text()
    page.screenshot(path=str(tmp_path / "episode.png"), full_page=True)
    # the hostile episode: its text is shown as text, nothing of it ran, the unparsed turn is marked
    page.evaluate("location.hash = '#episode-2'")
    assert HOSTILE in page.locator(".turn .obs").first.inner_text()
    assert "did not parse" in page.locator(".turn").first.inner_text()
    assert page.evaluate("window.__pwned") is None
    # the BabyAI episode shows its grid before the turn and after the last one
    page.evaluate("location.hash = '#episode-0'")
    assert page.locator(".turn img").count() == 2
    assert page.evaluate("document.querySelector('.turn img').naturalWidth") == 16
    page.evaluate("location.hash = '#overview'")
    assert page.locator("#passk svg").count() == 2  # overall, and one curve per category
    assert page.locator("#passk svg").nth(1).locator("polyline").count() == 2
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
    assert os.path.getsize(tmp_path / "overview.png") > 1000
    assert page.errors == [] and page.requests == []


def test_training_run_curves_rollouts_and_before_after_comparison(browser, tmp_path):
    run = tmp_path / "train"
    eps = episodes()
    before = [dict(e, success=e["task"] == 124) for e in eps]
    after = [dict(e, success=e["task"] != 124) for e in eps]  # 4 tasks gained, task 124 lost
    write_run(str(run / "eval_before"), before, bad_lines=False)
    write_run(str(run / "eval_after"), after, bad_lines=False)
    os.makedirs(run / "rollouts")
    for step in (2, 4):
        with open(run / "rollouts" / f"step_{step:06d}.jsonl", "w") as f:
            f.write("\n".join(json.dumps(e) for e in eps[:step]) + "\n")
    keys = [
        "charts/success",
        "charts/reward",
        "charts/turns",
        "losses/kl",
        "losses/entropy",
        "losses/clipfrac",
    ]
    with open(run / "metrics.jsonl", "w") as f:
        for step in range(1, 5):
            f.write(
                json.dumps({"step": step, "horizon": 3 if step <= 2 else 5, **{k: step / 10 for k in keys}})
                + "\n"
            )
        f.write('{"step": 5, "charts/succ')  # the run was killed mid-line
    with open(run / "summary.json", "w") as f:
        json.dump(
            {
                "config": {"steps": 4},
                "eval_before": {"success_rate": 0.0},
                "eval_after": {"success_rate": 0.6},
            },
            f,
        )
    out = view.main([str(run), "--out", str(tmp_path / "r.html")])
    page = open_page(browser, out)
    page.evaluate("location.hash = '#training'")
    charts = page.locator("#training-view svg.chart")
    assert charts.count() == 7  # the six keys and the horizon
    assert charts.first.locator("polyline").get_attribute("points").count(",") == 4  # four steps drawn
    assert page.locator("#training-view table tr").count() == 3  # header + steps 2 and 4
    page.evaluate("location.hash = '#compare'")
    text = page.inner_text("#cmp-counts")
    assert "5 shared tasks" in text and "(B better): 4" in text and "(B worse): 1" in text
    page.evaluate("location.hash = '#episodes'")
    assert page.inner_text("#count") == f"{5 + 5 + 2 + 4} of 16 episodes"
    assert "line 5:" in page.inner_text("#problems")
    page.screenshot(path=str(tmp_path / "training.png"), full_page=True)
    assert page.errors == [] and page.requests == []


# --- end to end: what eval.py and train.py write, viewed ------------------------------------------


def test_eval_with_render_records_a_frame_per_observation_and_writes_its_report(browser, tmp_path):
    import eval as evaluation

    out = tmp_path / "ev"
    evaluation.main(
        [
            "--model",
            "tiny",
            "--task-ids",
            "4,44",
            "--n-samples",
            "2",
            "--horizon",
            "3",
            "--render",
            "true",
            "--out",
            str(out),
        ]
    )
    lines = [json.loads(x) for x in open(out / "trajectories.jsonl")]
    assert len(lines) == 4
    for t in lines:
        assert len(t["observations"]) == len(t["frames"]) == t["turns"] + 1
        assert all(view.DATA_URL.fullmatch(f) for f in t["frames"])
    table = open(out / "summary.md").read()
    assert "| all " in table and "k=1" in table and "k=2" in table
    page = open_page(browser, out / "report.html")
    page.evaluate("location.hash = '#episodes'")
    assert page.inner_text("#count") == "4 of 4 episodes"
    page.click("#episodes tbody tr")
    page.wait_for_selector("#episode-view", state="visible")  # the hash routes it, a task later
    assert page.locator(".turn").count() == lines[0]["turns"]
    assert page.locator(".turn img").count() == lines[0]["turns"] + 1  # before each turn, after the last
    assert page.evaluate("document.querySelector('.turn img').naturalWidth") > 0
    page.screenshot(path=str(tmp_path / "babyai.png"), full_page=True)
    assert page.errors == []


def test_training_run_with_saved_rollouts_has_curves_samples_and_before_after(browser, tmp_path):
    from train import Config, train

    assert Config().save_rollouts_every == 0  # off by default
    train(
        Config(
            steps=2,
            tasks_per_step=2,
            group_size=2,
            minibatch_size=4,
            eval_episodes=3,
            rounds="2,3",
            steps_per_stage=1,
            out=str(tmp_path),
            save_every=2,
            save_rollouts_every=1,
        )
    )
    for step in (1, 2):
        rows = [json.loads(x) for x in open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl")]
        assert len(rows) == 4 and {r["step"] for r in rows} == {step}
    for key in ("eval_before", "eval_after"):
        assert len(open(tmp_path / key / "trajectories.jsonl").readlines()) == 3
    page = open_page(browser, tmp_path / "report.html")
    page.evaluate("location.hash = '#training'")
    assert page.locator("#training-view svg.chart").count() >= 8
    assert page.locator("#training-view table tr").count() == 3  # header + steps 1 and 2
    page.evaluate("location.hash = '#compare'")
    assert page.locator("#cmp-a").input_value() != page.locator("#cmp-b").input_value()
    assert "3 shared tasks" in page.inner_text("#cmp-counts")
    page.evaluate("location.hash = '#episodes'")
    assert page.inner_text("#count") == "14 of 14 episodes"
    # every turn of the saved rollouts shows the credit the update gave it (diagnostics/credit.py)
    turns = sum(
        r["turns"]
        for step in (1, 2)
        for r in map(json.loads, open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl"))
    )
    page.evaluate("location.hash = '#credit'")
    cells = page.locator("#credit-view td.credit").all_inner_texts()
    assert len(cells) == turns and all(c.startswith(("+", "-")) for c in cells)
    page.evaluate("location.hash = '#episode-' + document.querySelectorAll('#credit-view a')[0].textContent")
    assert page.locator(".turn .credits").count() == page.locator(".turn").count() > 0
    # and every token of its trained rows, with the ratio the update saw (on-policy: 1 at one epoch)
    rec = json.loads(open(tmp_path / "rollouts" / "step_000001.jsonl").readline())
    rows = rec["credit"]["rows"]
    assert rows and all(len(r["ratio"]) == len(r["mask"]) == len(r["text"]) for r in rows)
    assert "".join(rows[0]["text"][: rows[0]["mask"].index(1)]).startswith("<|im_start|>")
    assert page.locator("#tokens .tok").count() > page.locator("#tokens .tok.off").count() > 0
    assert page.errors == []


# --- learning signals: alarm banners and the credit each algorithm gives each turn ----------------


def signals_run(folder):
    """A GRPO run of 4 steps: a no-signal alarm at steps 2-4 and a non-finite step 3 (its loss NaN);
    step 2's rollouts saved with the credit the update gave each turn."""
    import grpo
    from diagnostics.credit import turn_credit
    from eval import write_trajectories
    from tests.test_signals import credit_batch
    from train import Config

    os.makedirs(folder / "rollouts")
    trajs, batch = credit_batch(False)
    grpo.advantages(batch, Config())
    for t, c in zip(trajs, turn_credit(batch, "grpo", grpo.GRPO)):
        t.credit = c
    write_trajectories(str(folder / "rollouts" / "step_000002.jsonl"), trajs, step=2)
    with open(folder / "metrics.jsonl", "w") as f:
        for step in range(1, 5):
            row = {
                "step": step,
                "horizon": 3,
                "charts/success": 0.5,
                "losses/loss": float("nan") if step == 3 else 0.1,
                "signals/flat_groups": 1.0 if step > 1 else 0.2,
                "signals/flat_failed": 1.0 if step > 1 else 0.1,
                "signals/flat_succeeded": 0.0,
                "signals/nonfinite_skips": int(step == 3),
            }
            row.update({"alarm/no_signal": 1.0} if step > 1 else {})
            row.update({"alarm/non_finite": 1.0} if step == 3 else {})
            f.write(json.dumps(row) + "\n")
    with open(folder / "summary.json", "w") as f:
        json.dump({"config": {"algo": "grpo", "steps": 4}}, f)
    return trajs, batch


def signals_config():
    from train import Config

    return Config()


def test_alarms_are_banners_pointing_at_their_steps_and_credit_is_the_algorithms(browser, tmp_path):
    import gigpo
    import grpo
    import ppo

    run = tmp_path / "run"
    trajs, batch = signals_run(run)
    out = view.main([str(run), "--credit", "grpo,gigpo,ppo", "--out", str(tmp_path / "r.html")])
    html = open(out).read()
    data = json.loads(html.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    assert [a["name"] for a in data["alarms"]] == ["non_finite", "no_signal"]  # in signals.ALARMS' order
    assert (
        data["training"][0]["metrics"][2]["losses/loss"] is None
    )  # NaN: JSON has none, the page still parses
    page = open_page(browser, out)
    banners = page.locator("#alarms .alarm")
    assert banners.count() == 2
    assert "steps 2\u20134" in banners.nth(1).inner_text() and "too hard" in banners.nth(1).inner_text()
    assert "steps 3" in banners.nth(0).inner_text() and "lower --lr" in banners.nth(0).inner_text()
    # the credit table: the run's own column and the three algorithms, on the same saved episodes
    page.evaluate("location.hash = '#credit'")
    heads = page.locator("#credit-view th").all_inner_texts()
    assert heads[5:] == ["run: grpo", "grpo", "gigpo", "ppo (sum over the turn's tokens)"]
    rows = page.locator("#credit-view table tr")
    shown = [
        [float(x) for x in rows.nth(i + 1).locator("td.credit").all_inner_texts()]
        for i in range(rows.count() - 1)
    ]
    a_grpo = grpo.group_advantages(batch.rewards, batch.groups)
    a_gigpo = gigpo.gigpo_advantages(batch.rewards.tolist(), batch.groups.tolist(), batch.anchors)
    ppo.advantages(batch, signals_config(), None)  # the run saved no critic values: PPO's zero critic
    k = 0
    for n, t in enumerate(trajs):
        for turn in range(t.turns):
            own, g, gi, p = shown[k]
            assert own == pytest.approx(float(a_grpo[n]), abs=1e-3) and g == own
            assert gi == pytest.approx(a_gigpo[n][turn], abs=1e-3)
            rows_n = (batch.traj == n).nonzero().squeeze(-1)
            assert p == pytest.approx(float(batch.advantages[rows_n[turn]].sum()), abs=1e-3)
            k += 1
    assert k == len(shown) == sum(t.turns for t in trajs)
    # an episode page: each turn's credit chip, coloured by its sign
    page.evaluate("location.hash = '#episode-1'")  # trajectory 1 failed: GRPO pushes its turns down
    chips = page.locator(".turn .credits .credit")
    assert chips.count() == 2 * 4 and "rgba(198, 40, 40" in chips.first.evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
    page.screenshot(path=str(tmp_path / "credit.png"), full_page=True)
    assert page.errors == [] and page.requests == []


def test_a_credit_summed_over_tokens_is_labelled_so_as_the_data_says(browser, tmp_path):
    """The mark "(sum over the turn's tokens)" follows each --credit algorithm's `token_level` and
    the saved records' `credit.token_level`: the page knows no algorithm by name."""
    from algos import ALGOS

    run = tmp_path / "run"
    signals_run(run)
    saved = run / "rollouts" / "step_000002.jsonl"
    records = [json.loads(x) for x in open(saved)]
    for r in records:  # the run's own credit, from a token-level algorithm the page has never seen
        r["credit"].update(algo="my_algo", token_level=True)
    saved.write_text("\n".join(map(json.dumps, records)) + "\n")
    out = view.main([str(run), "--credit", ",".join(ALGOS), "--out", str(tmp_path / "r.html")])
    page = open_page(browser, out)
    page.evaluate("location.hash = '#credit'")
    summed = " (sum over the turn's tokens)"
    label = {name: name + (summed if algo.token_level else "") for name, algo in ALGOS.items()}
    assert {label[n] != n for n in ALGOS} == {True, False}  # both kinds are checked
    heads = page.locator("#credit-view th").all_inner_texts()
    assert heads[5:] == ["run: my_algo" + summed] + list(label.values())
    page.evaluate("location.hash = '#episode-0'")
    chips = page.locator(".turn .credits").first.locator(".credit")  # the first turn's
    assert chips.evaluate_all("cs => cs.map((c) => c.title)") == [
        "credit, my_algo" + summed + ":",
        *(label[n] + ":" for n in ALGOS),
    ]
    assert page.errors == [] and page.requests == []


def test_credit_rejects_an_unknown_algorithm_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    signals_run(run)
    with pytest.raises(SystemExit) as e:
        view.main([str(run), "--credit", "grpo,nope"])
    err = capsys.readouterr().err
    assert (
        e.value.code == 2 and "unknown algorithm(s) nope; allowed: grpo" in err and len(err.splitlines()) == 1
    )


# --- the token inspector: each token of a trained row, as the update saw it ------------------------


class DigitTokenizer:
    """Token id i reads as "<i>"."""

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


def watched_batch():
    """credit_batch's trajectories (one row per turn) under the action mask, each row's last agent
    token forced (one id allowed: log-prob 0, as <|im_end|> after an action), after GRPO's
    advantages, with one minibatch of every row through a watched loss whose new log-probs move
    each free agent token by 0.5 * sign, so that some ratios leave [0.8, 1.2]. Watching changes
    nothing in the loss, and records a row only once a backward gives the loss a weight."""
    import grpo
    from batch import make_batch
    from diagnostics.credit import watch_ratios
    from tests.test_signals import credit_batch
    from train import Config

    trajs, _ = credit_batch(False)
    for t in trajs:
        for row in t.rows:
            last = len(row.mask) - 1  # the row's last agent token
            row.allowed = {
                p: [i] if p == last else [i, 99] for p, (i, m) in enumerate(zip(row.ids, row.mask)) if m
            }
            row.logprobs[last] = 0.0
    batch = make_batch(trajs, 0)
    cfg = Config()
    grpo.advantages(batch, cfg)
    seen = {}
    algo = watch_ratios(grpo.GRPO, seen)
    mb = batch.select(torch.arange(len(batch))).trim()
    forced = (mb.allowed >= 0).sum(-1) == 1
    step = torch.where(torch.arange(mb.loss_mask.shape[1]) % 2 == 0, 0.5, -0.5) * mb.loss_mask * ~forced
    logp = (mb.old_logprobs + step).requires_grad_()
    watched, _ = algo.loss(logp, None, mb, cfg, None)
    assert torch.equal(watched, grpo.GRPO.loss(logp, None, mb, cfg, None)[0])  # untouched
    (watched * 0).backward(retain_graph=True)
    assert seen == {}  # a weight-0 pass (the update's filler) trained nothing: no trace
    watched.backward()
    assert (
        watch_ratios(grpo.GRPO, None) is grpo.GRPO
    )  # a step whose rollouts are not saved: the algorithm itself
    return trajs, batch, seen, step, cfg


def test_the_watched_loss_records_each_rows_ratio_and_the_token_rows_line_up_with_the_batch():
    from diagnostics.credit import token_rows

    trajs, batch, seen, step, cfg = watched_batch()
    assert sorted(seen) == sorted(zip(batch.traj.tolist(), batch.turn.tolist()))
    for b, key in enumerate(zip(batch.traj.tolist(), batch.turn.tolist())):
        assert torch.allclose(seen[key], step[b].exp())  # 1 off the agent tokens
    out = token_rows(batch, DigitTokenizer(), seen, cfg)
    assert len(out) == len(trajs) and all(o["clip"] == pytest.approx([0.8, 1.2]) for o in out)
    for n, t in enumerate(trajs):
        rows = out[n]["rows"]
        assert [r["turn"] for r in rows] == list(range(len(t.rows)))
        for r, row in zip(rows, t.rows):
            assert r["text"] == [f"<{i}>" for i in row.ids] and r["mask"] == row.mask
            assert r["logprob"] == pytest.approx(row.logprobs, abs=1e-4)
            assert r["forced"] == [int(len(row.allowed.get(p, [])) == 1) for p in range(len(row.ids))]
            assert len(r["ratio"]) == len(r["advantage"]) == len(row.ids) and "value" not in r
    assert token_rows(batch, DigitTokenizer(), None, cfg)[0]["rows"][0].keys() == {
        "turn",
        "text",
        "mask",
        "forced",
        "logprob",
        "advantage",
    }
    batch.allowed = None  # sampling without the action mask: nothing forced, no `forced`
    assert "forced" not in token_rows(batch, DigitTokenizer(), None, cfg)[0]["rows"][0]


def test_the_weight_0_filler_pass_leaves_no_trace_in_the_token_inspector(monkeypatch):
    """A process with fewer micro-batches than another repeats a filler at weight 0 (the batch's
    row 0, maybe trained in an earlier minibatch: update.accumulate_gradients). The inspector keeps
    the ratios of the passes that trained a row only, never one from a step that did not train it."""
    import dataclasses

    from accelerate import Accelerator

    import grpo
    import update
    from diagnostics.credit import watch_ratios
    from tests.test_micro_batches import small_batch, small_model
    from train import Config

    cfg = Config(micro_batch_size=2)
    batch = small_batch(False)
    grpo.advantages(batch, cfg)
    mb = batch.select(torch.arange(2, 6)).trim()  # trajectories 1-4, two micro-batches
    filler = batch.select(torch.arange(1)).trim()  # trajectory 0's turn 0, not in this minibatch
    one = update.dist.global_max
    # another process has one micro-batch more: this one runs a third pass, the filler
    monkeypatch.setattr(update.dist, "global_max", lambda x: x + 1 if isinstance(x, int) else one(x))
    seen, passes = {}, []
    watched = watch_ratios(grpo.GRPO, seen)
    counted = dataclasses.replace(
        watched, loss=lambda *a: passes.append(a[2].traj.tolist()) or watched.loss(*a)
    )
    update.accumulate_gradients(small_model(), mb, counted, cfg, None, Accelerator(cpu=True), filler)
    assert len(passes) == 3 and passes[-1] == [0]  # the filler ran
    assert sorted(seen) == sorted(zip(mb.traj.tolist(), mb.turn.tolist()))  # and left no trace


def test_the_token_inspector_shows_every_token_its_mask_the_outcome_and_where_the_clip_bit(browser, tmp_path):
    import grpo
    from diagnostics.credit import token_rows, turn_credit
    from eval import write_trajectories

    trajs, batch, seen, step, cfg = watched_batch()
    for t, c, rows in zip(
        trajs, turn_credit(batch, "grpo", grpo.GRPO), token_rows(batch, DigitTokenizer(), seen, cfg)
    ):
        t.credit = {**c, **rows}
    os.makedirs(tmp_path / "run" / "rollouts")
    write_trajectories(str(tmp_path / "run" / "rollouts" / "step_000001.jsonl"), trajs, step=1)
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "charts/success": 0.5}) + "\n")
    page = open_page(browser, view.main([str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]))
    page.evaluate("location.hash = '#episode-0'")
    rows = trajs[0].rows
    tokens = page.locator("#tokens .tok")
    assert tokens.count() == sum(len(r.ids) for r in rows)
    assert page.locator("#tokens .tok.off").count() == sum(r.mask.count(0) for r in rows)
    assert page.locator("#tokens .tokens").count() == len(rows)
    # the outcome sits on the trajectory's last agent token: the last row's last mask-1 token
    outcome = page.locator("#tokens .tok.outcome")
    assert (
        outcome.count() == 1
        and outcome.inner_text() == f"<{rows[-1].ids[rows[-1].mask.index(1) + rows[-1].mask.count(1) - 1]}>"
    )
    # the clip bit where A > 0 and the ratio is above 1.2 or A < 0 and below 0.8
    adv = float(grpo.group_advantages(batch.rewards, batch.groups)[0])
    bit = sum(
        1
        for b in (batch.traj == 0).nonzero().squeeze(-1).tolist()
        for x, m in zip(step[b].exp().tolist(), batch.loss_mask[b].tolist())
        if m and ((adv > 0 and x > 1.2) or (adv < 0 and x < 0.8))
    )
    assert bit > 0 and page.locator("#tokens .tok.clipped").count() == bit
    summary = page.inner_text("#token-summary")
    assert f"bit on {bit} token(s)" in summary
    # the sign rule beside the range, so that "0.61 to 1.65 ... bit on 3" reads as no contradiction
    assert "direction the advantage pushes: above 1.20 with A > 0, below 0.80 with A < 0" in summary
    # forced tokens (one id allowed): marked, and the page says what they add to the loss
    forced = sum(1 for r in rows for p in range(len(r.ids)) if len(r.allowed.get(p, [])) == 1)
    assert forced == len(rows) and page.locator("#tokens .tok.forced").count() == forced
    assert f"{sum(r.mask.count(1) for r in rows)} trained tokens (loss mask 1)" in summary
    assert f"{forced} of them forced by the action mask" in summary
    assert "add no gradient, yet count in the token mean's denominator" in summary
    title = tokens.first.get_attribute("title")
    assert "mask 0" in title and "ratio" in title and "advantage" in title
    assert "forced by the action mask" in page.locator("#tokens .tok.forced").first.get_attribute("title")
    # colour by: the advantage by default (every agent token the same colour under GRPO), then the ratio
    colours = lambda which: set(page.locator(which).evaluate_all("ts => ts.map(t => t.style.background)"))
    assert len(colours("#tokens .tok:not(.off)")) == 1
    page.select_option("#token-colour", "ratio")
    assert len(colours("#tokens .tok:not(.off):not(.forced)")) == 2  # above 1 and below 1
    assert {c.replace(" ", "").endswith(",0)") for c in colours("#tokens .tok.forced")} == {
        True
    }  # ratio 1: none

    # the numbers table beside the tokens, for the token clicked (kept across colourings)
    def numbers():
        cells = page.locator("#token-numbers tr")
        return {
            cells.nth(i).locator("th").inner_text(): cells.nth(i).locator("td").inner_text()
            for i in range(cells.count())
        }

    assert page.locator("#token-numbers").count() == 0
    page.locator("#tokens .tok.forced").first.click()
    got = numbers()
    assert got["forced"].startswith("yes") and got["loss mask"] == "1 (trained)"
    assert got["log-prob at sampling"] == "0.0000" and got["ratio \u03c0/\u03c0_old"] == "1.0000"
    assert "no gradient" in got["in the loss"] and "denominator" in got["in the loss"]
    page.locator("#tokens .tok.clipped").first.click()
    assert numbers()["clip [0.80, 1.20]"].startswith("bit: A ") and "no gradient" in numbers()["in the loss"]
    page.select_option("#token-colour", "logprob")
    assert page.locator("#tokens .tok.picked.clipped").count() == 1 and "clip [0.80, 1.20]" in numbers()
    tokens.first.click()
    got = numbers()
    assert got["loss mask"] == "0 (context)" and got["in the loss"].startswith("nothing")
    assert got["ratio \u03c0/\u03c0_old"] == got["advantage"] == "\u2013"  # placeholders the loss never reads
    box, panel = page.locator(".token-rows").bounding_box(), page.locator("#token-numbers").bounding_box()
    assert (
        panel["x"] >= box["x"] + box["width"] and panel["y"] < box["y"] + box["height"]
    )  # beside, not below

    # the star at the outcome token sits on its own badge: it contrasts in every colouring
    def luminance(css):
        r, g, b = (int(float(x)) / 255 for x in css[css.index("(") + 1 : -1].split(",")[:3])
        lin = lambda c: c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
        return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)

    for view_name in page.locator("#token-colour option").evaluate_all("os => os.map(o => o.value)"):
        page.select_option("#token-colour", view_name)
        star = page.locator("#tokens .tok.outcome").evaluate(
            "t => { const s = getComputedStyle(t, '::after'); "
            "return [s.content, s.color, s.backgroundColor]; }"
        )
        assert star[0] == '"\u2605"' and star[2].startswith("rgb(")  # an opaque badge
        hi, lo = sorted((luminance(star[1]), luminance(star[2])), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (view_name, star)  # WCAG AA contrast
    page.click("#to-tokens")
    assert page.evaluate("window.scrollY") > 0  # scrolled down to the inspector
    page.screenshot(path=str(tmp_path / "tokens.png"), full_page=True)
    assert page.errors == []
