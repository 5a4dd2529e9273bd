"""An invalid reply has one definition (machinery/signals.py's `refused`), and every place that counts
invalid replies uses it: the training signals, sft.py's valid-reply share and view.py's turn status."""

import eval as evaluation
import servers.textcraft as T
import sft
import view
from agent import Trajectory
from machinery import signals


def test_textcraft_wrong_ingredients_quantities_and_items_are_invalid_replies_everywhere(tmp_path):
    env = T.TextCraftEnv()
    task = next(i for i, g in enumerate(T.GOALS) if T.DEPTH[g] == 2)
    goal = T.GOALS[task]
    recipe = T.RECIPES[goal][0]
    ingredients = [(min(T.TAG_MEMBERS[x]) if x in T.TAGS else x, n) for x, n in recipe.inputs]
    one_too_many = ", ".join(f"{n + 1} {x}" for x, n in ingredients)
    first = env.reset(task)["observation"]
    tr = Trajectory(task=task, group=0, messages=[{"role": "user", "content": first}], observations=[first])
    said = {
        f"get 1 {min(T.GETTABLE)}": "Got ",
        f"craft {recipe.count} {goal} using {one_too_many}": "Wrong quantities",
        f"craft 1 {goal} using 1 dirt": "Wrong ingredients",
        "get 2 unobtainium": "Could not find",
        "inventory": "Inventory",
    }
    for action, start in said.items():  # an episode as agent.rollout records it
        answer = env.step(action)["observation"]
        assert answer.startswith(start), (action, answer)
        tr.messages += [{"role": "assistant", "content": action}, {"role": "user", "content": answer}]
        tr.actions.append(action)
        tr.observations.append(answer)
    refused = [False, True, True, True, False]

    assert signals.invalid_turns(tr.actions, tr.observations) == sum(refused)
    assert signals.episode_facts([tr])[0]["invalid"] == sum(refused)
    evaluation.write_trajectories(str(tmp_path / "trajectories.jsonl"), [tr])
    (rec,) = sft.read_records(str(tmp_path / "trajectories.jsonl"))
    assert sft.valid_replies([rec]) == (refused.count(False), len(refused))
    _, turns = view.turns_of(rec)
    assert [t["status"] == "refused" for t in turns] == refused
