"""Environments: determinism per seed, disjoint seed splits, solvable lakes, rewards that are right."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.environments import (
    ENVIRONMENTS,
    EVAL_SEED_START,
    SEED_LIMIT,
    EnvironmentStateError,
    split_of,
    split_seeds,
)
from rft.environments.frozen_lake import parse_move
from rft.environments.frozen_lake_map import LakeMap, shortest_path
from rft.environments.multiplication import parse_answer
from rft.errors import ConfigError

seeds = st.integers(min_value=0, max_value=SEED_LIMIT - 1)
replies = st.text(max_size=60)
STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


# --- seeds ---------------------------------------------------------------------------------------


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**4), st.integers(0, 10**4))
def test_train_and_eval_seeds_never_overlap(train_start, eval_start, train_n, eval_n):
    train = split_seeds("train", train_n, train_start)
    held_out = split_seeds("eval", eval_n, eval_start)
    assert not set(train) & set(held_out)
    assert all(split_of(s) == "train" for s in train[:50])
    assert all(split_of(s) == "eval" for s in held_out[:50])


@given(seeds)
def test_every_seed_is_in_exactly_one_split(seed):
    assert split_of(seed) == ("train" if seed < EVAL_SEED_START else "eval")


def test_seeds_outside_the_splits_are_refused():
    for bad in (-1, SEED_LIMIT, True, "3"):
        with pytest.raises(ValueError, match="seeds are integers"):
            split_of(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="leave the split"):
        split_seeds("train", 2, EVAL_SEED_START - 1)
    with pytest.raises(ValueError, match="unknown seed split 'test'"):
        split_seeds("test", 1)


# --- every environment -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["frozen_lake", "guess_number", "multiplication"])
@settings(max_examples=40)
@given(
    seed=seeds,
    actions=st.lists(replies | st.sampled_from(["up", "left", "50", "Answer: 7"]), max_size=6),
)
def test_the_same_seed_gives_the_same_episode(name, seed, actions):
    def play():
        env = ENVIRONMENTS.get(name)()
        transcript = [env.reset(seed)]
        for action in actions:
            result = env.step(action)
            transcript.append(result)
            if result.done:
                break
        return transcript

    assert play() == play()


@pytest.mark.parametrize("name", ["frozen_lake", "guess_number", "multiplication"])
def test_step_outside_an_episode_is_refused(name):
    env = ENVIRONMENTS.get(name)()
    with pytest.raises(EnvironmentStateError, match="before reset"):
        env.step("up")
    env.reset(1)
    for _ in range(env.max_turns):
        if env.step("no move, no number").done:
            break
    with pytest.raises(EnvironmentStateError, match="after the episode ended"):
        env.step("up")


def test_registered_names_and_offered_tools():
    assert ENVIRONMENTS.names() == ["frozen_lake", "guess_number", "multiplication"]
    assert ENVIRONMENTS.get("multiplication")().tools == ("calculator",)
    assert ENVIRONMENTS.get("frozen_lake")().tools == ()


# --- frozen_lake -----------------------------------------------------------------------------------


def solve(rows: tuple[str, ...]) -> list[str] | None:
    """The test's own BFS: moves of a shortest safe path from S to G."""
    size = len(rows)
    cells = {(r, c): rows[r][c] for r in range(size) for c in range(size)}
    start = next(cell for cell, letter in cells.items() if letter == "S")
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cells[cell] == "G":
            path = []
            while came[cell] is not None:
                cell, move = came[cell]  # type: ignore[misc]
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in STEPS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt in cells and nxt not in came and cells[nxt] != "H":
                came[nxt] = (cell, move)
                queue.append(nxt)
    return None


@settings(max_examples=60)
@given(seeds, st.integers(2, 8), st.floats(0.55, 1.0))
def test_generated_lakes_are_solvable_and_the_solution_wins(seed, size, frozen_p):
    env = ENVIRONMENTS.get("frozen_lake")(size=size, frozen_p=frozen_p, max_turns=size * size)
    first = env.reset(seed)
    rows = env.lake.rows
    letters = "".join(rows)
    assert len(rows) == size and all(len(row) == size for row in rows)
    assert letters.count("S") == 1 and letters.count("G") == 1
    assert set(letters) <= set("SFHG")
    assert "P" in first
    path = solve(rows)
    assert path is not None
    assert shortest_path(env.lake) == len(path)
    rewards = [env.step(f"I will move {move.upper()}.") for move in path]
    assert [r.reward for r in rewards] == [0.0] * (len(path) - 1) + [1.0]
    assert [r.done for r in rewards] == [False] * (len(path) - 1) + [True]
    assert rewards[-1].info["outcome"] == "goal"


@given(seeds)
def test_holes_edges_and_invalid_replies(seed):
    env = ENVIRONMENTS.get("frozen_lake")(size=4)
    env.reset(seed)
    env.lake = LakeMap(("SH", "FG"))  # a known small map: right is a hole, up is the edge
    env.position = (0, 0)
    edge = env.step("up")
    assert (edge.reward, edge.done, edge.info["outcome"], env.position) == (
        0.0,
        False,
        "edge",
        (0, 0),
    )
    invalid = env.step("I am not sure")
    assert (invalid.info["outcome"], env.position) == ("invalid", (0, 0))
    hole = env.step("go right")
    assert (hole.reward, hole.done, hole.info["outcome"]) == (0.0, True, "hole")


def test_running_out_of_moves_ends_the_episode_without_reward():
    env = ENVIRONMENTS.get("frozen_lake")(max_turns=3)
    env.reset(11)
    results = [env.step("hmm") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert "out of moves" in results[-1].observation
    assert sum(r.reward for r in results) == 0.0


@given(st.lists(st.sampled_from(["up", "DOWN", "Left", "right", "upward", "x", " "]), max_size=8))
def test_the_last_move_word_is_the_action(words):
    expected = [w.lower() for w in words if w.lower() in STEPS]
    assert parse_move(" ".join(words)) == (expected[-1] if expected else None)


def test_impossible_lake_settings_are_refused_at_construction():
    with pytest.raises(ConfigError, match="size must be at least 2"):
        ENVIRONMENTS.get("frozen_lake")(size=1)
    with pytest.raises(ConfigError, match="frozen_p must be in"):
        ENVIRONMENTS.get("frozen_lake")(frozen_p=0.0)


# --- guess_number ----------------------------------------------------------------------------------


@given(seeds, st.integers(-50, 50), st.integers(1, 2000))
def test_binary_search_always_wins_within_the_budget(seed, low, width):
    env = ENVIRONMENTS.get("guess_number")(low=low, high=low + width)
    env.reset(seed)
    lo, hi = low, low + width
    for turn in range(env.max_turns):
        guess = (lo + hi) // 2
        result = env.step(f"My guess is {guess}")
        if result.info["outcome"] == "correct":
            assert (result.reward, result.done) == (1.0, True)
            assert turn < env.max_turns - 1  # the spare turn is never needed
            return
        assert (result.reward, result.done) == (0.0, False)
        if result.info["outcome"] == "higher":
            lo = guess + 1
        else:
            assert result.info["outcome"] == "lower"
            hi = guess - 1
    pytest.fail("binary search did not find the number")


@given(seeds, st.integers(1, 100))
def test_feedback_points_at_the_number(seed, guess):
    env = ENVIRONMENTS.get("guess_number")()
    env.reset(seed)
    result = env.step(str(guess))
    target = env.target
    expected = "correct" if guess == target else "higher" if target > guess else "lower"
    assert result.info["outcome"] == expected
    assert result.reward == (1.0 if guess == target else 0.0)


@given(seeds, replies)
def test_any_reply_gets_an_answer(seed, reply):
    env = ENVIRONMENTS.get("guess_number")()
    env.reset(seed)
    result = env.step(reply)
    assert result.info["outcome"] in ("invalid", "out_of_range", "correct", "higher", "lower")
    assert result.observation


def test_out_of_guesses_reveals_the_number():
    env = ENVIRONMENTS.get("guess_number")(low=1, high=10, max_turns=2)
    env.reset(3)
    wrong = 1 if env.target != 1 else 2
    env.step(str(wrong))
    last = env.step("12.5")
    assert last.done and last.reward == 0.0
    assert f"the number was {env.target}" in last.observation


# --- multiplication --------------------------------------------------------------------------------


@given(
    seeds,
    st.sampled_from(["Answer: {}", "The answer is {}.", "so {} is it", "ANSWER {}"]),
    st.booleans(),
    st.integers(-3, 3),
)
def test_reward_is_one_exactly_when_the_answer_is_the_product(seed, form, commas, off_by):
    env = ENVIRONMENTS.get("multiplication")()
    prompt = env.reset(seed)
    a, b = env.factors
    assert f"{a} * {b}" in prompt
    assert all(100 <= f <= 9999 for f in (a, b))
    answer = a * b + off_by
    written = f"{answer:,}" if commas else str(answer)
    result = env.step(f"{a} * {b} needs the tool. " + form.format(written))
    assert result.reward == (1.0 if off_by == 0 else 0.0)
    assert result.done
    assert result.info["answer"] == answer


def test_a_reply_without_a_number_scores_zero():
    env = ENVIRONMENTS.get("multiplication")()
    env.reset(5)
    result = env.step("I cannot do this.")
    assert (result.reward, result.done, result.info["outcome"]) == (0.0, True, "no_answer")


@given(replies)
def test_answer_parsing_never_fails(reply):
    value = parse_answer(reply)
    assert value is None or isinstance(value, int)


def test_held_out_problems_are_not_training_problems():
    env = ENVIRONMENTS.get("multiplication")()

    def problems(split: str) -> set[tuple[int, int]]:
        found = set()
        for seed in split_seeds(split, 2000):
            env.reset(seed)
            found.add(env.factors)
        return found

    assert not problems("train") & problems("eval")


def test_digit_settings_are_checked():
    with pytest.raises(ConfigError, match="min_digits <= max_digits"):
        ENVIRONMENTS.get("multiplication")(min_digits=5, max_digits=4)
    env = ENVIRONMENTS.get("multiplication")(min_digits=2, max_digits=2)
    env.reset(0)
    assert all(10 <= f <= 99 for f in env.factors)
