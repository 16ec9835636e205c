"""Frozen-lake maps: seeded generation of solvable grids and the breadth-first search that checks them.

A map is a square of cells: S (start), F (frozen, safe), H (hole), G (goal). Each cell other than S
and G is a hole with probability `1 - frozen_p`; S and G are placed at random, distinct cells, and a
map is drawn again until a path of safe cells joins them (four-neighbour moves).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from rft.errors import ConfigError

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
MAX_DRAWS = 10_000

Cell = tuple[int, int]


@dataclass(frozen=True)
class LakeMap:
    """The grid as rows of S/F/H/G letters."""

    rows: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.rows)

    def at(self, cell: Cell) -> str:
        return self.rows[cell[0]][cell[1]]

    def find(self, letter: str) -> Cell:
        for r, row in enumerate(self.rows):
            if letter in row:
                return r, row.index(letter)
        raise ValueError(f"the map has no {letter!r}")

    def inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.size and 0 <= cell[1] < self.size


def moved(cell: Cell, action: str) -> Cell:
    dr, dc = MOVES[action]
    return cell[0] + dr, cell[1] + dc


def shortest_path(lake: LakeMap) -> int | None:
    """Moves on the shortest safe path from S to G, or None when G cannot be reached."""
    start, goal = lake.find("S"), lake.find("G")
    distance = {start: 0}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return distance[cell]
        for action in MOVES:
            nxt = moved(cell, action)
            if lake.inside(nxt) and nxt not in distance and lake.at(nxt) != "H":
                distance[nxt] = distance[cell] + 1
                queue.append(nxt)
    return None


def generate_map(rng: random.Random, size: int, frozen_p: float) -> LakeMap:
    """A solvable `size`×`size` map drawn from `rng` (ConfigError if none comes in MAX_DRAWS)."""
    if size < 2:
        raise ConfigError(f"frozen_lake: size must be at least 2, got {size}")
    if not 0.0 < frozen_p <= 1.0:
        raise ConfigError(f"frozen_lake: frozen_p must be in (0, 1], got {frozen_p}")
    cells = [(r, c) for r in range(size) for c in range(size)]
    for _ in range(MAX_DRAWS):
        start, goal = rng.sample(cells, 2)
        grid = [["F" if rng.random() < frozen_p else "H" for _ in range(size)] for _ in range(size)]
        grid[start[0]][start[1]] = "S"
        grid[goal[0]][goal[1]] = "G"
        lake = LakeMap(tuple("".join(row) for row in grid))
        if shortest_path(lake) is not None:
            return lake
    raise ConfigError(
        f"frozen_lake: no solvable {size}x{size} map in {MAX_DRAWS} draws with "
        f"frozen_p={frozen_p}; raise frozen_p"
    )
