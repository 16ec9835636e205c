"""Headless Chromium for tests that look at a page the way a person would: Selenium driving the
Debian packages' `chromium` and `chromedriver` (`make setup` installs them as root:
infra/browser/install.sh). Where either is missing, the test skips and says which.

Screenshots go to `$RFT_SCREENSHOTS` when set (the docs' pictures are refreshed with
`RFT_SCREENSHOTS=docs/img`), else to the test's own temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

WINDOW = (1400, 900)


@contextmanager
def headless_chromium() -> Iterator[webdriver.Chrome]:
    found = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        pytest.skip(
            f"no {' and no '.join(missing)} on PATH: the browser tests drive Debian's chromium "
            "and chromium-driver packages, which `make setup` installs only as root with "
            "apt-get (infra/browser/install.sh)"
        )
    options = Options()
    options.binary_location = str(found["chromium"])
    for arg in (
        "--headless=new",
        "--no-sandbox",  # as root, Chromium refuses to start with its sandbox on
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(arg)
    # an explicit driver path: Selenium then downloads nothing
    driver = webdriver.Chrome(options=options, service=Service(str(found["chromedriver"])))
    try:
        yield driver
    finally:
        driver.quit()


def screenshot_path(tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("RFT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
