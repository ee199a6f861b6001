"""One ALFWorld game in a process of its own, for `alfworld.Game` on the host:

    python -m easylemur.eval.benchmarks.mint.alfworld_game GAMEFILE MAX_STEPS

The game is built as ALFWorld's `AlfredTWEnv.init_env` builds an evaluation game (TextWorld's
gym environment over the one game file, `AlfredDemangler(shuffle=False)`, `AlfredInfos`, the
`won` and `admissible_commands` infos, MAX_STEPS commands at most, after which every command
repeats the last observation). One JSON line out with the first observation, then for each JSON
line in ({"command": ...}) one out ({"observation", "done", "won"}). Whatever the engine prints
goes to stderr.

A process per game because TextWorld parses and renders with TatSu parsers shared by the whole
process, which are not thread-safe: games in threads of one process break each other, and a lock
around them would make every episode wait on the others' games (a loop of commands in one cell
then runs past the cell's time limit); in processes the games play side by side on every core.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the engine's own prints go to stderr, not into the protocol
    gamefile, max_steps = sys.argv[1], int(sys.argv[2])
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env_id = textworld.gym.register_games([gamefile], infos, batch_size=1, asynchronous=False,
                                          max_episode_steps=max_steps,
                                          wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
    env = textworld.gym.make(env_id)
    obs, _ = env.reset()
    out.write(json.dumps({"observation": obs[0]}) + "\n")
    for line in sys.stdin:
        obs, _, done, step_infos = env.step([json.loads(line)["command"]])
        out.write(json.dumps({"observation": obs[0], "done": bool(done[0]), "won": bool(step_infos["won"][0])}) + "\n")
    env.close()


if __name__ == "__main__":
    main()
