"""MINT's ALFWorld task (easylemur/eval/benchmarks/mint/alfworld.py) against a miniature of MINT's
ALFWorld data (tests/alfworld_fixture.py: MINT's layout, the fixture's own texts and tools, small
games in ALFWorld's real game format played by ALFWorld's own engine): what the model is told
comes from the files, an episode is MINT's dialogue to the character with the game played on the
host through the tools, a replay of MINT-format transcripts gives back their success, the
interpreter cannot reach the game, and MINT's success at the game's step limit is counted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mint_fixture import TEMPLATE, TEXTS, write_mint
import test_mint

from easylemur.eval.benchmarks import registry
from easylemur.eval.benchmarks.mint.protocol import run_budget, success_rate
from easylemur.eval.benchmarks.mint.replay import Replayer, serve

pytest.importorskip("alfworld", reason="ALFWorld's engine is not installed (pip install -e '.[test]' installs it)")
from alfworld_fixture import GAMES, write_alfworld  # noqa: E402 - imports the alfworld package

sandbox, client_chat = test_mint.sandbox, test_mint.client_chat  # MINT's tests' sandbox fixture and endpoint chat
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
SOLVE = ('goto("fridge 1")', 'open_receptacle("fridge 1")', 'goto("countertop 1")',
         'take_from("lettuce 1", "countertop 1")', 'goto("fridge 1")', 'cool("lettuce 1", "fridge 1")',
         'goto("countertop 1")', 'put(object="lettuce 1", receptacle="countertop 1")')


@pytest.fixture(scope="module")
def mint_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaldata") / "mint"
    write_mint(root)
    write_alfworld(root)
    return root


def test_the_games_tools_and_texts_come_from_minTs_files(mint_dir):
    task = registry.build("m_alfworld", str(mint_dir))
    assert [p.task_id for p in task.problems] == [g for g, _ in GAMES]
    assert [(t.name, t.params, t.command) for t in task.tools][:2] == [
        ("put", ("object", "receptacle"), "move {object} to {receptacle}"), ("goto", ("receptacle",), "go to {receptacle}")]
    p, game, tools = task.environment(task.problems[0])
    try:
        # the game's first observation after the fixture's prompt line, its banner dropped
        assert p.prompt == ("Fixture household: do the task. \nYou are in the middle of a room. Looking quickly around "
                            "you, you see a cabinet 1, a countertop 1, and a fridge 1.\nYour task is to: put a cool "
                            "lettuce in countertop.")
        assert p.reference == f"Fixture reference for {GAMES[0][0]}\n"
        tool_desc = TEXTS["tool_header"] + "".join(f"[{i + 1}] {t.signature}\n{t.description}\n"
                                                   for i, t in enumerate(task.tools))
        assert "[1] put(object: str, receptacle: str) -> str (fixture)\nFixture: put an object on a receptacle.\n" \
               "Fixture example: put(\"a 1\", \"b 2\")\n\n[2] goto" in tool_desc
        example = (mint_dir / "mint/tasks/in_context_examples/alfworld/cool/with_tool.txt").read_text()
        assert task.first_message(p, 5, 2, False) == TEMPLATE.format(
            max_total_steps=5, max_propose_solution=2, tool_desc=tool_desc, in_context_example=example,
            task_prompt="Task:\n" + p.prompt)
        # the tools send the fixture's commands ("move X to Y": its grammar knows no "put") and drop
        # the "You arrive at loc N. " prefix as the fixture's process_ob says
        assert tools["goto"].fn("fridge 1") == "The fridge 1 is closed."
        assert game.success() is False
    finally:
        game.close()
    assert task.record(p) == {"task_name": "alfworld/cool", "task_id": GAMES[0][0], "prompt": p.prompt,
                              "reference": p.reference, "metadata": {"task_type": "cool"}}


def _played(task, game_index: int, cells: list[list[str]]) -> tuple:
    """(the problem as its game states it, what each cell of tool calls prints), played straight on
    a game of its own (not through the sandbox)."""
    problem, game, tools = task.environment(task.problems[game_index])
    try:
        out = []
        for cell in cells:
            lines = []
            for call in cell:
                name, args = call.split("(", 1)
                values = [v.split("=")[-1].strip().strip('"') for v in args.rstrip(")").split(",") if v.strip()]
                lines.append(tools[name].fn(*values))
            out.append("\n".join(lines))
        return problem, out
    finally:
        game.close()


@pytest.mark.slow
@needs_bwrap
def test_an_episode_plays_its_game_through_the_tools_and_a_replay_gives_minTs_success(mint_dir, sandbox, tmp_path):
    """Transcripts of MINT's format for the two games are replayed through the harness: game 1 is
    won inside a cell (the episode ends there, as MINT's AlfworldEnv ends it, without a proposal);
    game 2's "done" is refused (no command ended the game), then the budget runs out. The records
    equal the transcripts message for message."""
    task = registry.build("m_alfworld", str(mint_dir))
    T, turns = TEXTS, TEXTS["turns"].format
    p0, (look, first) = _played(task, 0, [["look()"], list(SOLVE)])
    p1, (look2,) = _played(task, 1, [["look()"]])
    cell1 = "<execute>\nprint(look())\n</execute>"
    cell2 = "<execute>\n" + "\n".join(f"print({c})" for c in SOLVE) + "\n</execute>"
    assert first.endswith("You move the lettuce 1 to the countertop 1.")
    won = [{"role": "user", "content": task.first_message(p0, 3, 2, False)},
           {"role": "assistant", "content": "Assistant:\n" + cell1 + "\n"},
           {"role": "user", "content": T["observation"] + look + "\n" + turns(2, 2)},
           {"role": "assistant", "content": "Assistant:\n" + cell2 + "\n"}]
    lost = [{"role": "user", "content": task.first_message(p1, 3, 2, False)},
            {"role": "assistant", "content": "Assistant:\n<solution> done </solution>\n"},
            {"role": "user", "content": T["observation"] + T["wrong"] + turns(2, 1)},
            {"role": "assistant", "content": "Assistant:\n" + cell1 + "\n"},
            {"role": "user", "content": T["observation"] + look2 + "\n" + turns(1, 1) + T["last"]},
            {"role": "assistant", "content": "Assistant:\n" + cell1 + "\n"}]
    out = tmp_path / "outputs" / "F=None" / "max3_p2+tool+cd" / "decision_making" / "alfworld"
    out.mkdir(parents=True)
    (out / "results.jsonl").write_text("".join(json.dumps({"state": {"history": h, "success": s}, "task": task.record(p)})
                                               + "\n" for h, s, p in ((won, True, p0), (lost, False, p1))))
    replayer = Replayer(tmp_path / "outputs")
    server = serve(replayer)
    try:
        records = run_budget(task, client_chat(f"http://127.0.0.1:{server.server_address[1]}/v1"), sandbox, 3,
                             concurrency=2, workers=1)
    finally:
        server.shutdown()
    assert [r["state"]["history"] for r in records] == [won, lost]
    assert [r["state"]["terminate_reason"] for r in records] == ["task_success", "max_steps"]
    assert records[0]["state"]["agent_action_count"] == {"propose_solution": 0, "use_tool": 2, "invalid_action": 0}
    assert success_rate(records) == 0.5 and "easylemur" not in records[0]
    assert replayer.past_end == 0 and replayer.unknown == 0


@needs_bwrap
def test_the_interpreter_cannot_reach_the_game_and_a_step_limit_success_is_counted(mint_dir, sandbox, tmp_path):
    """A cell sees no game file, no engine and no answer; a command is only ever a game command.
    TextWorld ends a game after the config's step limit (4 here) and MINT counts that end as a
    success: easylemur scores it so, and the record and the suite's row say the game was not won."""
    from scripted_endpoint import ScriptedEndpoint

    from easylemur.eval.cli.suite import main

    short = tmp_path / "mint"
    shutil.copytree(mint_dir, short)
    write_alfworld(short, max_steps=4)
    game_file = next(short.rglob("game.tw-pddl"))
    probe = ("import os, importlib.util\n"
             f"print(os.path.exists({str(game_file)!r}), os.path.exists({str(short)!r}), os.listdir('.'))\n"
             "print(importlib.util.find_spec('textworld'), importlib.util.find_spec('alfworld'))\n"
             "print(goto('countertop 1\\ntake lettuce 1 from countertop 1'))")
    seen = []

    def agent(messages):
        seen.append(messages[-1]["content"])
        return f"<execute>\n{probe}\n</execute>" if len(messages) == 1 else \
            "<execute>\nfor _ in range(5):\n    print(look())\n</execute>"

    with ScriptedEndpoint(chat=agent) as ep:
        code = main(["--endpoint", ep.url, "--tasks", "m_alfworld", "--data-dir", str(tmp_path), "--turns", "3",
                     "--budgets", "one-run", "--limit", "1", "--out", str(tmp_path / "out"), "--workers", "1"])
    assert code == 0
    assert seen[1].startswith(TEXTS["observation"] + "False False ['.ipython']\nNone None\nNothing happens.\n"), seen[1]
    row = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]["m_alfworld"]
    record = json.loads((tmp_path / "out" / "m_alfworld" / "k=3" / "results.jsonl").read_text())
    assert row["score"] == 1.0 and row["step_limit_successes"] == 1, row
    assert record["state"]["terminate_reason"] == "task_success" and record["easylemur"] == {"won": False}
