"""What the end-to-end tests share: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven through Selenium). Without them a browser test skips, unless
REPRODQN_REQUIRE_CHROMIUM=1 (CI sets it), where it fails instead."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser_tools():
    if CHROMIUM and DRIVER:
        return CHROMIUM, DRIVER
    reason = (
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    )
    if os.environ.get("REPRODQN_REQUIRE_CHROMIUM") == "1":
        pytest.fail(reason + "; REPRODQN_REQUIRE_CHROMIUM=1 demands it")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver(browser_tools):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = browser_tools
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=Service(chromedriver))
    yield browser
    browser.quit()
