"""`frozen_lake`: walk from S to G on a seeded grid without falling into a hole (H).

Each reply is one move: the last of the words up, down, left, right in it (any case). A move off the
grid leaves the player in place; a reply without a move costs a turn and changes nothing. Reward 1
on reaching G, else 0; the episode ends at G, in a hole, or when the turns run out. The ice is not
slippery: a move always goes where it says.
"""

from __future__ import annotations

import re

from rft.environments.frozen_lake_map import LakeMap, generate_map, moved
from rft.environments.protocol import ENVIRONMENTS, Episode, StepResult
from rft.environments.seed_splits import instance_random

_ACTION = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)


def parse_move(reply: str) -> str | None:
    """The last move word in `reply`, lower-cased; None when there is none."""
    found = _ACTION.findall(reply)
    return found[-1].lower() if found else None


@ENVIRONMENTS.register("frozen_lake")
class FrozenLake:
    """A `size`×`size` lake (cells frozen with probability `frozen_p`), `max_turns` moves at most
    (default: 2 × (size − 1) + 4)."""

    tools: tuple[str, ...] = ()

    def __init__(self, size: int = 4, frozen_p: float = 0.8, max_turns: int | None = None) -> None:
        self.size = size
        self.frozen_p = frozen_p
        self.max_turns = max_turns if max_turns is not None else 2 * (size - 1) + 4
        self.episode = Episode("frozen_lake", self.max_turns)
        generate_map(instance_random("frozen_lake", "check", 0), size, frozen_p)  # fail at load
        self.lake = LakeMap(())
        self.position = (0, 0)

    def reset(self, seed: int) -> str:
        rng = instance_random("frozen_lake", f"{self.size}:{self.frozen_p}", seed)
        self.lake = generate_map(rng, self.size, self.frozen_p)
        self.position = self.lake.find("S")
        self.episode.begin()
        return (
            f"You are on a frozen lake, a {self.size}x{self.size} grid. P marks you, S the start, "
            "F safe ice, H a hole (falling in ends the game) and G the goal. Moving off the grid "
            f"leaves you where you are. Reach G in at most {self.max_turns} moves. Reply with one "
            "move: up, down, left or right.\n\n" + self.render()
        )

    def render(self) -> str:
        """The grid with P on the player's cell, one row per line."""
        rows = [list(row) for row in self.lake.rows]
        rows[self.position[0]][self.position[1]] = "P"
        return "\n".join(" ".join(row) for row in rows)

    def step(self, action: str) -> StepResult:
        self.episode.count_step()
        move = parse_move(action)
        if move is None:
            outcome, text = (
                "invalid",
                "I found no move in your reply. Reply with up, down, left or right.",
            )
        else:
            target = moved(self.position, move)
            if not self.lake.inside(target):
                outcome, text = "edge", f"You cannot go {move}: that is the edge of the lake."
            else:
                self.position = target
                outcome = {"H": "hole", "G": "goal"}.get(self.lake.at(target), "moved")
                text = {
                    "hole": f"You went {move} and fell into a hole. Game over.",
                    "goal": f"You went {move} and reached the goal!",
                    "moved": f"You went {move}.",
                }[outcome]
        reward = 1.0 if outcome == "goal" else 0.0
        ended = outcome in ("hole", "goal")
        if not ended and self.episode.out_of_steps:
            ended, text = True, text + " You are out of moves."
        self.episode.finish(ended)
        info: dict[str, float | str] = {"outcome": outcome, "move": move or ""}
        return StepResult(f"{text}\n\n{self.render()}", reward, ended, info)
