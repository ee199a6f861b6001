"""A miniature of MINT's ALFWorld data, written by the tests beside `mint_fixture`'s miniature of
MINT's repository: MINT's layout (`data/processed/alfworld/`: base_config.yaml, gamefile_id.txt,
json_2.1.1/valid_unseen/<game>/<trial>/game.tw-pddl and gt_traj.txt; mint/tasks/alfworld.py,
mint/tools/alfworld.py and the in-context examples per task type), with the fixture's own texts
and small games of its own in ALFWorld's real game format: a JSON of the PDDL domain and the
text grammar (the ones the installed `alfworld` package ships, the goal written into the
grammar as ALFWorld's game generator writes it) and a PDDL problem written here. The fixture's
tools send the commands of that grammar ("move X to Y"), so a test can tell the commands were
read from the tools file, not assumed."""

from __future__ import annotations

import json
from pathlib import Path

TOOLS = '''
from mint.tools.base import Tool
from mint.datatypes import StepOutput


def process_ob(ob):
    if ob.startswith("You arrive at "):
        ob = ob[ob.find(". ") + 2 :]
    return ob


class AlfWorldTool(Tool):
    def step(self, action: str) -> str:
        return action


SIGNATURE_TEMPLATE = "{name}({args}) -> str (fixture)"

DESCRIPTION_TEMPLATE = """{desc}
Fixture example: {example}
""".lstrip()


class Put(AlfWorldTool):
    name = "put"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="object: str, receptacle: str")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: put an object on a receptacle.", example='put("a 1", "b 2")')

    def __call__(self, object: str, receptacle: str):
        return self.step(f"move {object} to {receptacle}")


class GoTo(AlfWorldTool):
    name = "goto"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="receptacle: str")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: go to a receptacle.", example='goto("b 2")')

    def __call__(self, receptacle: str):
        return self.step(f"go to {receptacle}")


class Take(AlfWorldTool):
    name = "take_from"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="object: str, receptacle: str")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: take an object.", example='take_from("a 1", "b 2")')

    def __call__(self, object: str, receptacle: str):
        return self.step(f"take {object} from {receptacle}")


class Open(AlfWorldTool):
    name = "open_receptacle"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="receptacle: str")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: open it.", example='open_receptacle("c 1")')

    def __call__(self, receptacle: str):
        return self.step(f"open {receptacle}")


class Cool(AlfWorldTool):
    name = "cool"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="object: str, receptacle: str")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: cool an object.", example='cool("a 1", "c 1")')

    def __call__(self, object: str, receptacle: str):
        return self.step(f"cool {object} with {receptacle}")


class Look(AlfWorldTool):
    name = "look"
    signature = SIGNATURE_TEMPLATE.format(name=name, args="")
    description = DESCRIPTION_TEMPLATE.format(desc="Fixture: look around.", example="look()")

    def __call__(self):
        return self.step(f"look")


ALFWORLD_TOOL_CLS = [Put, GoTo, Take, Open, Cool, Look]
'''

TASK = '''
import alfworld

PREFIXES = {
    "pick_and_place": "put",
    "pick_cool_then_place": "cool",
}


class AlfWorldTask(Task):
    @classmethod
    def load_tasks(cls, path: str = "./data/processed/alfworld"):
        def generator():
            for _ in range(N_TASKS):
                prompt = "Fixture household: do the task. \\n" + ob
        return generator(), N_TASKS
'''

CONFIG = """dataset:
  eval_ood_data_path: '$ALFWORLD_DATA/json_2.1.1/valid_unseen'
env:
  type: 'AlfredTWEnv'
  domain_randomization: False
general:
  training_method: 'dagger'
dagger:
  training:
    max_nb_steps_per_episode: {max_steps}
"""

# The games: (id, goal text, where the lettuce is, whether the fridge starts closed)
GAMES = (
    ("pick_cool_then_place_in_recep-Lettuce-None-CounterTop-1/trial_T1", "put a cool lettuce in countertop"),
    ("pick_and_place_simple-Apple-None-Fridge-1/trial_T2", "put some apple in fridge"),
)
GOALS = {
    "Lettuce": "(and (coolable ?o) (objectType ?o LettuceType) (receptacleType ?r CounterTopType) (isCool ?o) "
               "(inReceptacle ?o ?r))",
    "Apple": "(and (objectType ?o AppleType) (receptacleType ?r FridgeType) (inReceptacle ?o ?r))",
}
OBJECTS = {"Lettuce": "Lettuce_bar__plus_00_dot_10", "Apple": "Apple_bar__plus_00_dot_20",
           "Egg": "Egg_bar__plus_00_dot_30"}
RECEPTACLES = {"CounterTop": ("CounterTop_bar__plus_01_dot_00", "loc_bar_1_bar_0_bar_0_bar_45"),
               "Fridge": ("Fridge_bar__plus_02_dot_00", "loc_bar_2_bar_0_bar_0_bar_60"),
               "Cabinet": ("Cabinet_bar__plus_03_dot_00", "loc_bar_3_bar_0_bar_0_bar_45")}
START = "loc_bar_0_bar_0_bar_0_bar_30"


def _problem(target: str) -> str:
    objects = ["agent1 - agent"] + [f"{n} - object" for n in OBJECTS.values()]
    objects += [f"{t}Type - otype" for t in OBJECTS] + [f"{t}Type - rtype" for t in RECEPTACLES]
    objects += [f"{n} - receptacle" for n, _ in RECEPTACLES.values()]
    objects += [f"{loc} - location" for _, loc in RECEPTACLES.values()] + [f"{START} - location"]
    where = {"Lettuce": "CounterTop", "Apple": "CounterTop", "Egg": "Fridge"}
    init = [f"(atLocation agent1 {START})"]
    for t, (name, loc) in RECEPTACLES.items():
        init += [f"(receptacleType {name} {t}Type)", f"(receptacleAtLocation {name} {loc})"]
        init += [f"(canContain {t}Type {o}Type)" for o in OBJECTS]
    init += [f"(openable {RECEPTACLES['Fridge'][0]})", f"(openable {RECEPTACLES['Cabinet'][0]})"]
    for t, name in OBJECTS.items():
        recep, loc = RECEPTACLES[where[t]]
        init += [f"(objectType {name} {t}Type)", f"(pickupable {name})", f"(coolable {name})",
                 f"(inReceptacle {name} {recep})", f"(objectAtLocation {name} {loc})"]
    return ("(define (problem plan_fixture)\n(:domain alfred)\n(:objects\n" + "\n".join(objects) + "\n)\n(:init\n"
            + "\n".join(init) + f"\n)\n(:goal (and (exists (?r - receptacle) (exists (?o - object) {GOALS[target]}))))\n)\n")


def write_alfworld(root: Path, max_steps: int = 50) -> list[str]:
    """Writes the miniature under `root` (the MINT copy of `mint_fixture.write_mint`); returns the game ids."""
    import alfworld

    data = Path(alfworld.__file__).parent / "data"
    domain, grammar = (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()
    base = root / "data" / "processed" / "alfworld"
    for game_id, goal in GAMES:
        d = base / "json_2.1.1" / "valid_unseen" / game_id
        d.mkdir(parents=True, exist_ok=True)
        target = "Lettuce" if "Lettuce" in game_id else "Apple"
        game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", goal), "pddl_problem": _problem(target),
                "solvable": True}
        (d / "game.tw-pddl").write_text(json.dumps(game))
        (d / "gt_traj.txt").write_text(f"Fixture reference for {game_id}\n")
    (base / "gamefile_id.txt").write_text("".join(g + "\n" for g, _ in GAMES))
    (base / "base_config.yaml").write_text(CONFIG.format(max_steps=max_steps))
    for rel, text in (("mint/tools/alfworld.py", TOOLS), ("mint/tasks/alfworld.py", TASK)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.lstrip("\n"))
    for kind in ("put", "cool"):
        d = root / "mint" / "tasks" / "in_context_examples" / "alfworld" / kind
        d.mkdir(parents=True, exist_ok=True)
        (d / "with_tool.txt").write_text(f"Fixture ALFWorld example ({kind}).\n\nTask:\nDo it.\n")
        (d / "with_tool_and_feedback.txt").write_text(f"Fixture ALFWorld example ({kind}) with feedback.\n\nTask:\nDo it.\n")
    return [g for g, _ in GAMES]
