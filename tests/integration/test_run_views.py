"""What a person sees of a finished run (slow suite; the docs' pictures of plots and TensorBoard
come from here): `rft run` of a short loop whose spans go to the local stack's Zipkin (the
exporter's default endpoint) and whose metrics go to TensorBoard event files. Its summary names
the trace UI; `rft metrics plot` draws its metrics; TensorBoard, started on the run's event files,
lists the run's scalars in headless Chromium. Pictures: metrics-reward.png,
metrics-step-time.png and tensorboard.png (in `$RFT_SCREENSHOTS`, else the test's own folder)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.config.connections import StackSettings
from tests.integration.browser import headless_chromium, screenshot_path
from tests.integration.test_rft_loop import run_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rft(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rft.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, f"rft {args[0]}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_finished_run_is_seen_in_its_trace_ui_plots_and_tensorboard(
    stack: StackSettings, zipkin: str, unique: str, tmp_path: Path
) -> None:
    tensorboard_dir = tmp_path / "tb"
    raw = run_config(stack, unique, tmp_path)
    raw["buffer"]["total_steps"] = STEPS
    raw["monitor"] = {
        "monitor_type": ["console", "tensorboard"],
        "monitor_args": {"tensorboard": {"log_dir": str(tensorboard_dir)}},
        "trace_exporter": "zipkin",
    }
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))

    summary = rft("run", "--config", str(config)).stdout
    assert f"traces: {zipkin}/zipkin/" in summary.splitlines()

    plots = tmp_path / "plots"
    rft("metrics", "plot", "--config", str(config), "-o", str(plots))
    for drawn, shown in (
        ("reward.png", "metrics-reward.png"),
        ("trainer_step_time.png", "metrics-step-time.png"),
    ):
        assert (plots / drawn).stat().st_size > 0
        shutil.copy(plots / drawn, screenshot_path(tmp_path, shown))

    port = free_port()
    board = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(tensorboard_dir)]
        + ["--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                assert board.poll() is None, board.stderr.read() if board.stderr else ""
                assert time.monotonic() < deadline, "TensorBoard did not answer in 120 s"
                time.sleep(0.5)
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support.ui import WebDriverWait

        shown = ["explorer/reward_mean", "explorer/rollout_tokens_per_s", "trainer/step_time_s"]

        def lines(driver: Any) -> set[str]:
            return set(driver.find_element(By.TAG_NAME, "body").text.splitlines())

        with headless_chromium() as browser:
            browser.get(url + "#timeseries")
            # TensorBoard reads the event files a few seconds after it starts, and its page
            # fetches them again every 30 s: wait for both components' runs
            WebDriverWait(browser, 90).until(lambda d: {"explorer", "trainer"} <= lines(d))
            browser.find_element(By.XPATH, "//button[@aria-label='Close side pane']").click()
            tags = browser.find_element(By.XPATH, "//input[@placeholder='Filter tags (regex)']")
            tags.send_keys(f"^({'|'.join(shown)})$", Keys.ESCAPE)
            # a card's title is its component over "/<metric>"
            WebDriverWait(browser, 30).until(
                lambda d: (
                    {f"{len(shown)} cards", *(f"/{t.split('/')[1]}" for t in shown)} <= lines(d)
                )
            )
            time.sleep(2)  # the charts draw after their tags are listed
            browser.save_screenshot(str(screenshot_path(tmp_path, "tensorboard.png")))
    finally:
        board.terminate()
        board.wait(timeout=30)
