"""math_boxed_reward and math_dapo_reward: the verdict table of docs/rewards.md (read from the page,
so the page says what the code does), the deadline that kills a comparison that would hang, the
DAPO answer position, and the load-time refusals (missing package, Trinity's overlong args)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import psutil
import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.registry import Requirement
from rft.rewards import REWARD_FUNCTIONS, RewardInputError
from rft.rewards.math_equivalence import EquivalenceWorker
from rft.rewards.math_verified import last_boxed
from tests.unit.config_samples import MINIMAL

DOC = Path(__file__).resolve().parents[2] / "docs" / "rewards.md"
TASKSET = "buffer.explorer_input.taskset"
# generous: a deadline that an ordinary answer meets even on a loaded two-core machine
TIMEOUT_S = 10.0


def verdict_table() -> list[tuple[str, str, str, str]]:
    """(kind, reference, reply, verdict) per row of the page's math-verify table."""
    text = DOC.read_text(encoding="utf-8")
    body = text.split("<!-- table: math-verify verdicts -->")[1].split("<!-- end table -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:  # past the header and its rule
        kind, reference, reply, verdict = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append((kind, _code(reference), _code(reply), verdict))
    return rows


def _code(cell: str) -> str:
    match = re.match(r"`([^`]*)`", cell)
    assert match, f"table cell {cell!r} does not start with a code span"
    return match.group(1)


TABLE = verdict_table()


def test_the_table_covers_every_kind_both_ways() -> None:
    kinds = {kind for kind, *_ in TABLE}
    for kind in ("fraction", "decimal", "negative", "set", "interval", "percentage", "unit"):
        verdicts = {verdict for k, _, _, verdict in TABLE if k == kind}
        assert verdicts == {"equal", "not equal"}, kind
    assert {"LaTeX", "malformed", "pathological"} <= kinds


@pytest.mark.parametrize(("kind", "reference", "reply", "verdict"), TABLE)
def test_math_boxed_reward_verdicts(kind: str, reference: str, reply: str, verdict: str) -> None:
    reward_fn = REWARD_FUNCTIONS.get("math_boxed_reward")
    reward, info = reward_fn(reply, {"answer": reference}, timeout_s=TIMEOUT_S)
    seen = "timed out" if info["timed_out"] else ("equal" if reward == 1.0 else "not equal")
    assert seen == verdict, f"{kind}: {reference!r} vs {reply!r}: {info}"
    assert info["accuracy"] == reward  # no think check asked: the reward is the accuracy


def test_a_hanging_comparison_is_killed_and_the_next_one_runs() -> None:
    worker = EquivalenceWorker()
    try:
        assert worker.compare("\\boxed{5}", "\\boxed{5.0}", TIMEOUT_S).equal
        assert worker._process is not None
        first_pid = worker._process.pid
        hung = worker.compare("\\boxed{5}", "\\boxed{9^{9^{9^{9}}}}", 1.0)
        assert hung.timed_out and not hung.equal
        assert worker.restarts == 1
        assert not psutil.pid_exists(first_pid)  # killed and reaped, not left computing
        after = worker.compare("\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", TIMEOUT_S)
        assert after.equal and not after.timed_out
        assert worker._process.pid != first_pid
    finally:
        worker.close()


def test_comparisons_work_from_a_worker_thread() -> None:
    # math-verify's own SIGALRM timeout refuses to run off the main thread; rft's deadline does not
    results: list[float] = []
    reward_fn = REWARD_FUNCTIONS.get("math_boxed_reward")
    thread = threading.Thread(
        target=lambda: results.append(
            reward_fn("\\boxed{1/2}", {"answer": "0.5"}, timeout_s=TIMEOUT_S)[0]
        )
    )
    thread.start()
    thread.join()
    assert results == [1.0]


def test_math_boxed_reward_think_format_score() -> None:
    reward_fn = REWARD_FUNCTIONS.get("math_boxed_reward")
    task = {"answer": "3"}
    good = "<think>1+2</think> \\boxed{3}"
    assert reward_fn(good, task, with_think=True, timeout_s=TIMEOUT_S)[0] == 1.0
    reward, info = reward_fn("\\boxed{3}", task, with_think=True, format_score_coef=0.25)
    assert (reward, info["format_score"]) == (0.75, -0.25)
    reward, _ = reward_fn("<think><think>\\boxed{4}</think>", task, with_think=True)
    assert reward == -0.1


def test_math_dapo_reward_reads_the_answer_after_the_thinking() -> None:
    reward_fn = REWARD_FUNCTIONS.get("math_dapo_reward")
    task = {"answer": "\\frac{3}{4}"}
    assert reward_fn("<think>maybe \\boxed{0.75}</think> so 0.5", task)[0] == 0.0
    assert reward_fn("<think>maybe \\boxed{0.5}</think> so \\boxed{0.75}", task)[0] == 1.0
    reward, info = reward_fn("<think>hmm</think> The answer is $3/4$.", task)
    assert (reward, info["boxed"]) == (1.0, 0.0)  # no box: the last expression after </think>


def test_a_reference_solution_is_read_by_its_box_and_a_bad_reference_is_named() -> None:
    reward_fn = REWARD_FUNCTIONS.get("math_boxed_reward")
    solution = {"solution": "Since 2x = 1, x = \\boxed{\\frac{1}{2}}."}
    assert reward_fn("\\boxed{0.5}", solution, answer_key="solution")[0] == 1.0
    with pytest.raises(RewardInputError, match=r"payload\['answer'\] = '\\\\text\{\}'"):
        reward_fn("\\boxed{2}", {"answer": "\\text{}"})


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("a \\boxed{1} then \\boxed{\\frac{1}{2}} end", "\\frac{1}{2}"),
        ("\\boxed{\\{1,\\{2\\}\\}}", "\\{1,\\{2\\}\\}"),
        ("\\fbox{7}", "7"),
        ("so \\boxed 42$ done", "42"),
        ("\\boxed{\\frac{1}{2}", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text: str, boxed: str | None) -> None:
    assert last_boxed(text) == boxed


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_trinitys_overlong_args_of_math_dapo_reward_are_refused_with_the_pointer(
    tmp_path: Path,
) -> None:
    overrides = [
        f"{TASKSET}.default_reward_fn_type=math_dapo_reward",
        f"{TASKSET}.reward_fn_args={{enable_overlong_penalty: true, timeout_s: 3, tries: 2}}",
    ]
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, MINIMAL), overrides)
    by_key = {p.path: str(p) for p in info.value.problems}
    assert set(by_key) == {
        f"{TASKSET}.reward_fn_args.enable_overlong_penalty",
        f"{TASKSET}.reward_fn_args.tries",
    }
    assert (
        "algorithm.overlong_penalty" in by_key[f"{TASKSET}.reward_fn_args.enable_overlong_penalty"]
    )
    assert "is not an argument of math_dapo_reward" in by_key[f"{TASKSET}.reward_fn_args.tries"]
    cfg = load_config(
        write(tmp_path, MINIMAL), [overrides[0], f"{TASKSET}.reward_fn_args.timeout_s=3"]
    )
    assert cfg.buffer.explorer_input.taskset is not None
    assert cfg.buffer.explorer_input.taskset.reward_fn_args == {"timeout_s": 3}


def test_without_math_verify_the_config_is_refused_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Requirement, "missing", lambda self: self.package == "math_verify")
    own = f"{TASKSET}.default_reward_fn_type"
    # explorer_input's reward is the taskset's too (filled in at load): said at both keys
    for key, said in ((own, [own]), ("buffer.explorer_input.default_reward_fn_type", None)):
        with pytest.raises(ConfigValidationError) as info:
            load_config(write(tmp_path, MINIMAL), [f"{key}=math_boxed_reward"])
        assert [p.path for p in info.value.problems] == (said or [key, own])
        assert (
            "needs the math_verify package, which is not installed: pip install 'rft[math]'"
            in str(info.value)
        )
