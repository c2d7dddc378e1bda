"""The web page at /ui, in a real headless Chromium (Debian's chromium and chromium-driver),
against a live server: edit and validate, save, simulate, run an agent, read its timeline.

Screenshots of each page go to $CTXMGMT_SCREENSHOTS (a temporary folder by default)."""

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from ctxmgmt import Client
from ctxmgmt.api import ServerConfig, create_app
from ctxmgmt.store import DefinitionStore
from tests.conftest import LiveServer, tool_call

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    if os.environ.get("CTXMGMT_REQUIRE_BROWSER"):
        raise RuntimeError("the browser tests need Debian's chromium and chromium-driver (see .ci/run)")
    pytest.skip(
        "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

INVALID = """name: log-reader
description: Cut long logs.
hooks:
  post_tool:
    - type: ToolsOutputTruncate
      config:
        max_output_length: 2000
"""
VALID = """name: log-reader
description: Cut long logs; keep the newest turns past 1,500 tokens.
hooks:
  post_tool:
    - type: ToolsOutputTruncateManager
      config:
        max_output_length: 2000
  pre_llm:
    - type: SlidingWindowManager
      config:
        max_messages: 6
      activation:
        tokens_exceed: 1500
"""


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = Path(os.environ.get("CTXMGMT_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def server(tmp_path, agent_models, tools):
    store = DefinitionStore.open(f"sqlite:///{tmp_path / 'ui.db'}")
    with LiveServer(create_app(store, models=agent_models, tools=tools)) as live:
        yield live
    store.engine.dispose()


def wait(driver, condition, timeout=15):
    return WebDriverWait(driver, timeout).until(condition)


def set_text(driver, element, text):
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'));", element, text
    )


def stray_text(driver, element_id):
    """Text that sits directly in a container, outside any element (a null turned into "null")."""
    return driver.execute_script(
        "return [...document.getElementById(arguments[0]).childNodes]"
        ".filter(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim()).map(n => n.textContent)",
        element_id,
    )


def no_console_errors(driver):
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def test_edit_save_simulate_run_and_read_the_timeline(browser, server, chat_server, shots):
    """An error shows inline with its pointer and line; the fixed definition saves; a
    simulation shows what was cut; an agent's execution shows one timeline point per LLM call
    and a marker where a manager fired, whose click shows what it did."""
    browser.get(f"{server.url}/ui#/definitions/_new")
    editor = wait(browser, ec.presence_of_element_located((By.ID, "definition-text")))
    set_text(browser, editor, INVALID)
    alert = wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#problems [role=alert]")))
    assert "line 5" in alert.text and "/hooks/post_tool/0/type" in alert.text
    assert "ToolsOutputTruncateManager" in alert.text  # the fix is suggested
    assert not browser.find_element(By.ID, "save").is_enabled()
    browser.save_screenshot(str(shots / "1-definition-error.png"))

    set_text(browser, editor, VALID)
    wait(browser, ec.text_to_be_present_in_element((By.ID, "status"), "Valid."))
    browser.find_element(By.ID, "save").click()
    wait(browser, ec.text_to_be_present_in_element((By.ID, "status"), "Saved log-reader (version 1)"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "log-reader (version 1)"
    browser.find_element(By.ID, "save").click()  # saved again: now a replace of the stored one
    wait(browser, ec.text_to_be_present_in_element((By.ID, "status"), "Saved log-reader (version 2)"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "log-reader (version 2)"

    Select(browser.find_element(By.ID, "simulate-hook")).select_by_value("post_tool")
    browser.find_element(By.ID, "simulate").click()
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#after li.added")))
    assert browser.find_elements(By.CSS_SELECTOR, "#before li.removed")
    assert "ToolsOutputTruncateManager" in browser.find_element(By.ID, "simulate-trace").text
    assert not stray_text(browser, "simulate-output")
    browser.save_screenshot(str(shots / "2-definition-simulated.png"))
    browser.get(f"{server.url}/ui#/definitions/log-reader")  # opened again: the stored one, as YAML
    stored = wait(browser, ec.presence_of_element_located((By.ID, "definition-text")))
    assert stored.get_attribute("value").startswith("name: log-reader\ndescription:")

    client = Client(server.url)
    assert client.get("log-reader")["version"] == 2
    agent_id = client.register_agent(
        {
            "name": "log-reader",
            "type": "conversational",
            "llm": {"model_id": "chat", "parameters": {"max_iteration": 8}},
            "tools": [{"type": "big"}],
            "context_management_name": "log-reader",
        }
    )
    for _ in range(4):
        chat_server.reply(tool_call(("big", {"size": 6000})))
    chat_server.reply("The database refuses connections.")
    answer = client.execute(agent_id, "Why does checkout fail?")
    record = client.execution(answer["execution_id"])
    client.close()

    browser.get(f"{server.url}/ui#/agents")
    wait(browser, ec.element_to_be_clickable((By.CSS_SELECTOR, f"[data-agent='{agent_id}']"))).click()
    row = wait(
        browser,
        ec.presence_of_element_located((By.CSS_SELECTOR, f"[data-execution='{answer['execution_id']}']")),
    )
    browser.save_screenshot(str(shots / "3-executions.png"))
    row.find_element(By.TAG_NAME, "a").click()
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
    points = browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-call]")
    assert [p.get_attribute("data-call") for p in points] == [
        str(n) for n in range(1, record["llm_calls"] + 1)
    ]
    markers = browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-manager]")
    kinds = {m.get_attribute("data-manager") for m in markers}
    assert {"ToolsOutputTruncateManager", "SlidingWindowManager"} <= kinds
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-line=window]")
    window = next(m for m in markers if m.get_attribute("data-manager") == "SlidingWindowManager")
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", window)
    details = wait(browser, ec.presence_of_element_located((By.ID, "entry")))
    assert '"type": "SlidingWindowManager"' in details.text
    assert "Removed by this hook run" in browser.find_element(By.ID, "details").text
    assert not stray_text(browser, "details")
    assert "Why does checkout fail?" in browser.find_element(By.ID, "main").text
    share = round(record["cache"]["reusable_share"] * 100)
    assert f"{share}% reusable" in browser.find_element(By.ID, "cache").text  # the prompt cache line
    browser.save_screenshot(str(shots / "4-execution-timeline.png"))
    no_console_errors(browser)

    browser.set_window_size(390, 844)  # a phone
    browser.refresh()
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
    overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page is {overflow}px wider than a phone's screen"
    browser.save_screenshot(str(shots / "5-execution-phone.png"))
    no_console_errors(browser)


def test_with_auth_the_key_is_asked_once_and_kept_for_the_session(browser, tmp_path, shots):
    """On a server with API keys, the page asks for a key, keeps it for the session, and then
    reads through the API with it."""
    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": "reader", "scope": "read", "key_sha256": hashlib.sha256(b"r-secret").hexdigest()}
            ]
        }
    )
    store = DefinitionStore.open(f"sqlite:///{tmp_path / 'auth.db'}")
    with LiveServer(create_app(store, config=config)) as live:
        browser.get(f"{live.url}/ui#/definitions")
        form = wait(browser, ec.visibility_of_element_located((By.ID, "key-form")))
        browser.save_screenshot(str(shots / "6-api-key.png"))
        browser.find_element(By.ID, "key-input").send_keys("r-secret")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Definitions (0)"))
        browser.get(f"{live.url}/ui#/agents")  # another page, same session: no new prompt
        wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Agents (0)"))
        assert not browser.find_element(By.ID, "key-form").is_displayed()
        severe = [
            e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]
        ]
        assert not severe, severe
    store.engine.dispose()
