"""The web page at /ui, in a real headless Chromium (Debian's chromium and chromium-driver),
against a live server: edit and validate, save, simulate, run an agent, read its timeline.

Screenshots of each page go to $CTXMGMT_SCREENSHOTS (a temporary folder by default)."""

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import httpx
import pytest

from ctxmgmt import Client, ContextManager, ManagerRegistry, default_registry
from ctxmgmt.api import ServerConfig, create_app
from ctxmgmt.store import DefinitionStore
from ctxmgmt.store.agents import MemoryStore
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
    assert "Removed by this entry" in browser.find_element(By.ID, "details").text
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


def register(client, definition=None):
    """An agent on the 'chat' model (16k window), with a stored definition by name or none."""
    body = {
        "name": "a",
        "type": "conversational",
        "llm": {"model_id": "chat", "parameters": {"max_iteration": 8}},
    }
    body["tools"] = [{"type": "big"}]
    if definition:
        body["context_management_name"] = definition
    return client.register_agent(body)


def memory_with(server_store, agent_id, messages):
    """A memory of the agent holding these messages exactly as given (odd shapes included)."""
    memory = MemoryStore(server_store.engine)
    memory_id = memory.create(agent_id)
    memory.append(memory_id, messages, None, expected_length=0)
    return memory_id


@pytest.fixture
def store_server(tmp_path, agent_models, tools):
    store = DefinitionStore.open(f"sqlite:///{tmp_path / 'ui.db'}")
    with LiveServer(create_app(store, models=agent_models, tools=tools)) as live:
        yield store, live
    store.engine.dispose()


def test_odd_stored_messages_show_as_placeholders_and_the_rest_renders(browser, store_server, shots):
    """A null part, null, number or object content, a non-list tool_calls each show as "this
    message cannot be shown: <reason>" in place; every other message still renders."""
    store, server = store_server
    client = Client(server.url)
    agent_id = register(client)
    client.close()
    odd = [
        ({"role": "user", "content": [{"type": "text", "text": "fine"}, None]}, "content part 1 is null"),
        ({"role": "user", "content": None}, "its content is null"),
        ({"role": "tool", "tool_call_id": "c", "content": 42}, "its content is a number"),
        ({"role": "user", "content": {"text": "x"}}, "its content is an object"),
        ({"role": "assistant", "content": "", "tool_calls": {"id": "c"}}, "its tool_calls is an object"),
        ({"role": "user", "content": [None]}, "content part 0 is null"),
    ]
    good = [
        {"role": "user", "content": "first good"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "grep"}}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "parts good"}, {"type": "image_url", "image_url": {}}],
        },
        {"role": "assistant", "content": "last good"},
    ]
    messages = [good[0], odd[0][0], good[1], *[m for m, _ in odd[1:]], good[2], good[3]]
    memory_id = memory_with(store, agent_id, messages)
    browser.get(f"{server.url}/ui#/memory/{memory_id}")
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#memory li")))
    items = browser.find_elements(By.CSS_SELECTOR, "#memory li")
    assert len(items) == len(messages)
    placeholders = [li.text for li in items if "unshowable" in li.get_attribute("class")]
    assert len(placeholders) == len(odd)
    for (_, reason), text in zip(odd, placeholders, strict=True):
        assert "this message cannot be shown: " in text and reason in text, text
    text = browser.find_element(By.ID, "memory").text
    for shown in ("first good", "(calls grep)", "parts good", "[image_url]", "last good"):
        assert shown in text
    assert not browser.find_elements(By.CSS_SELECTOR, "#main .error")
    browser.save_screenshot(str(shots / "7-memory-odd-messages.png"))
    no_console_errors(browser)


def test_a_20_mb_tool_result_and_a_long_list_are_paged(browser, store_server, shots):
    """A 20 MB message shows its first characters and a "show more" that adds a step at a
    time (the page stays short, the DOM text bounded); the list shows 50 messages a page."""
    store, server = store_server
    client = Client(server.url)
    agent_id = register(client)
    client.close()
    huge = "0123456789" * 2_000_000  # 20 MB
    messages = [{"role": "user", "content": f"message {i}"} for i in range(120)]
    messages[1] = {"role": "tool", "tool_call_id": "c", "content": huge}
    memory_id = memory_with(store, agent_id, messages)
    browser.get(f"{server.url}/ui#/memory/{memory_id}")
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#memory li")), timeout=30)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#memory li")) == 50
    height = browser.execute_script("return document.documentElement.scrollHeight")
    length = browser.execute_script("return document.body.textContent.length")
    assert height < 20_000 and length < 100_000, (height, length)
    more = browser.find_element(By.CSS_SELECTOR, "#memory li[data-index='1'] button.more")
    assert "4,000 of 20,000,000 characters shown" in more.text
    more.click()
    wait(
        browser,
        ec.text_to_be_present_in_element(
            (By.CSS_SELECTOR, "#memory li[data-index='1'] button.more"), "54,000 of"
        ),
    )
    shown = browser.execute_script(
        "return document.querySelector(\"#memory li[data-index='1'] .text\").textContent"
    )
    assert shown == huge[:54_000]
    assert (
        browser.execute_script("return document.documentElement.scrollHeight") < 20_000
    )  # it scrolls in its box
    browser.save_screenshot(str(shots / "8-memory-long.png"))
    browser.set_window_size(390, 844)  # a phone: the long text wraps, nothing is wider than the screen
    assert browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth") <= 1
    browser.save_screenshot(str(shots / "8-memory-long-phone.png"))
    browser.set_window_size(1280, 900)
    browser.find_element(By.CSS_SELECTOR, ".pager a[rel=next]").click()
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#memory li[data-index='50']")))
    indices = [li.get_attribute("data-index") for li in browser.find_elements(By.CSS_SELECTOR, "#memory li")]
    assert indices == [str(i) for i in range(50, 100)]
    assert browser.find_element(By.CSS_SELECTOR, "#memory li[data-index='99']").text.endswith("message 99")
    no_console_errors(browser)


class FreeForm(ContextManager):
    """A plugin whose config takes any JSON: the editor's round trip is tested on it."""

    type_name = "FreeFormTestManager"
    config_schema = {"type": "object"}

    def apply(self, context, runtime):
        return context


HOSTILE_STRINGS = [
    "x\u0085y",
    "\u0085",
    "\u2028",
    "\u2029",
    " lead",
    "trail ",
    "",
    "yes",
    "on",
    "off",
    "no",
    "y",
    "1",
    "1e3",
    "0x10",
    "010",
    "1_000",
    ".inf",
    "null",
    "~",
    "true",
    "<<",
    "=",
    "2001-12-14",
    "a: b",
    "a #b",
    "#c",
    "- d",
    "multi\nline\n",
    "tab\there",
    "\r\n",
    "\x01\x1f\x7f\x80\x9f",
    "\u00a0nbsp",
    "\ufeff",
    "😀",
    "é",
    "'single'",
    '"double"',
    "back\\slash",
    "%x",
    "@x",
    "`x",
    "!x",
    "&x",
    "*x",
    "|",
    ">",
    "?",
    "[",
    "{",
    "a,b",
    "  ",
    "\t",
]
HOSTILE_NUMBERS = [
    "1e-7",
    "1E+30",
    "-0.0",
    "1.0",
    "0",
    "-0",
    "123456789012345678",
    "0.1",
    "2.5e-300",
    "1E5",
    "-3",
]


def same(a, b):
    """Equal, and of the same JSON type (an int is not a float, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def test_the_editor_round_trip_keeps_every_value_exact(browser, tmp_path, shots):
    """Opened in the editor as YAML and saved unchanged, a definition holding hostile strings
    (U+0085, U+2028, YAML words, leading spaces, controls), keys and numbers (1e-7, 1E+30,
    -0.0, 1.0, 18 digits) is stored exactly as it was."""
    registry = ManagerRegistry()
    for name in default_registry.names():
        registry.register(default_registry.get(name), builtin=default_registry.is_builtin(name))
    registry.register(FreeForm)
    store = DefinitionStore.open(f"sqlite:///{tmp_path / 'yaml.db'}")
    store.registry = registry
    config = {
        "strings": {f"s{i}": s for i, s in enumerate(HOSTILE_STRINGS)},
        "keys": {s: i for i, s in enumerate(HOSTILE_STRINGS)},
        "lists": [None, True, False, [], {}, [[1]], {"a": [{"b": None}]}, HOSTILE_STRINGS],
    }
    numbers = ", ".join(f'"n{i}": {n}' for i, n in enumerate(HOSTILE_NUMBERS))
    config_text = json.dumps(config)[:-1] + ", " + numbers + "}"
    text = (
        '{"name": "hostile", "description": ' + json.dumps("x\u0085y \u2028 yes: 1e-7 ") + ", "
        '"hooks": {"pre_llm": [{"type": "FreeFormTestManager", "config": ' + config_text + "}]}}"
    )
    with LiveServer(create_app(store)) as live:
        created = httpx.post(
            f"{live.url}/_plugins/_ml/context_management/hostile",
            content=text.encode(),
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert created.status_code == 200, created.text
        before = store.get("hostile").document()
        assert same(before["hooks"]["pre_llm"][0]["config"]["n0"], 1e-7)  # stored as sent
        browser.get(f"{live.url}/ui#/definitions/hostile")
        wait(browser, ec.text_to_be_present_in_element((By.ID, "status"), "Valid."))
        browser.find_element(By.ID, "save").click()
        wait(browser, ec.text_to_be_present_in_element((By.ID, "status"), "Saved hostile (version 2)"))
        browser.save_screenshot(str(shots / "9-editor-hostile.png"))
        after = store.get("hostile").document()
        no_console_errors(browser)
    store.engine.dispose()
    assert same(after, before), json.dumps([after, before])[:2000]


CREDIT = """name: credit
description: A summariser that finds nothing to do, a window near the top, one far above it.
hooks:
  pre_llm:
    - type: SummarizationManager
      config:
        preserve_recent_messages: 1000
      activation:
        message_count_exceed: 2
    - type: SlidingWindowManager
      config:
        max_messages: 6
      activation:
        tokens_exceed: 15800
    - type: SlidingWindowManager
      config:
        max_messages: 6
      activation:
        tokens_exceed: 100000
"""


def run_with(server, chat_server, text, calls, size):
    """An execution of an agent whose definition is this YAML, through `calls` tool calls of
    `size` characters and an answer: its record."""
    import yaml

    definition = yaml.safe_load(text)
    client = Client(server.url)
    client.create(definition["name"], definition)
    agent_id = register(client, definition["name"])
    for _ in range(calls):
        chat_server.reply(tool_call(("big", {"size": size})))
    chat_server.reply("Done.")
    record = client.execution(client.execute(agent_id, "Why?")["execution_id"])
    client.close()
    return record


def credit_execution(server, chat_server):
    """An execution on a 16k window whose fit step cuts calls 4 and 5 while a summariser
    fires and changes nothing: its record."""
    return run_with(server, chat_server, CREDIT, 4, 18000)


def overlaps(boxes):
    """The pairs of boxes (text, left, top, right, bottom) that intersect."""
    return [
        (a[0], b[0])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
    ]


BOXES = """return [...document.querySelectorAll(arguments[0])].map(t => {
  const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })"""


def test_the_chart_fits_what_was_sent_with_readable_labels_that_never_overlap(
    browser, server, chat_server, shots
):
    """With a 16k window and a threshold of 100,000, the chart's scale fits the requests and
    the window (the data fills most of its height), the far threshold is named under it,
    and the labels of the window, the fit step and a threshold just under the window do not
    overlap and are at least 11 px tall, on a desktop and on a phone."""
    record = credit_execution(server, chat_server)
    assert max(c["calibrated_before"] for c in record["calls"]) > 12_000  # the fit step cut it
    for width, height, name in ((1280, 900, "10-chart-desktop.png"), (390, 844, "11-chart-phone.png")):
        browser.set_window_size(width, height)
        browser.get("about:blank")  # a fresh load at this width, not a same-page hash
        browser.get(f"{server.url}/ui#/executions/{record['execution_id']}")
        wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
        labels = browser.execute_script(BOXES, "svg.timeline text.line-label")
        assert sorted(t[0] for t in labels) == [
            "SlidingWindowManager[1] fires over 15,800",
            "fit: requests kept under 12,000",
            "window 16,000",
        ]
        texts = browser.execute_script(BOXES, "svg.timeline text")  # labels, ticks, call numbers
        assert not overlaps(texts), overlaps(texts)
        assert min(t[4] - t[2] for t in texts) >= 11, texts  # readable at this width
        assert "SlidingWindowManager[2] fires over 100,000" in browser.find_element(By.ID, "off-scale").text
        plot = browser.execute_script(
            "const s = document.querySelector('svg.timeline').getBoundingClientRect();"
            "const ys = [...document.querySelectorAll('svg.timeline circle')]"
            ".map(c => c.getBoundingClientRect().top);"
            "return [s.top, s.bottom, Math.min(...ys)]"
        )
        assert (plot[1] - plot[2]) / (plot[1] - plot[0]) > 0.6, plot  # the highest request near the top
        overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        browser.save_screenshot(str(shots / name))
    no_console_errors(browser)


def test_each_change_is_credited_to_the_entry_that_made_it(browser, server, chat_server, shots):
    """A summariser that fired and changed nothing shows no removals; the fit step's removals
    show under the fit step, with its own count."""
    record = credit_execution(server, chat_server)
    run = next(r for r in record["hooks"] if r["call"] == 4 and r["hook"] == "pre_llm")
    fit = next(c for c in run["changes"] if c["index"] == 3)
    browser.get(f"{server.url}/ui#/executions/{record['execution_id']}")
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
    click = "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))"
    summariser = browser.find_element(By.CSS_SELECTOR, "[data-manager=SummarizationManager][data-at='4']")
    browser.execute_script(click, summariser)
    wait(browser, ec.presence_of_element_located((By.ID, "unchanged")))
    assert "Removed" not in browser.find_element(By.ID, "details").text
    browser.execute_script(click, browser.find_element(By.CSS_SELECTOR, "[data-manager=fit][data-at='4']"))
    wait(
        browser,
        ec.text_to_be_present_in_element((By.ID, "details"), f"Removed by this entry ({fit['removed']})"),
    )
    assert not browser.find_elements(By.ID, "unchanged")
    browser.save_screenshot(str(shots / "12-credit.png"))
    no_console_errors(browser)


TWO_CHANGERS = """name: two
description: Two entries that change the same hook run.
hooks:
  {hook}:
    - type: SlidingWindowManager
      config:
        max_messages: 4
      activation:
        message_count_exceed: 4
    - type: ToolsOutputTruncateManager
      config:
        max_output_length: 100
"""


def two_changers(server, chat_server, hook):
    """An execution whose `hook` runs a sliding window and a truncation that both change
    the conversation at call 2: its record."""
    return run_with(server, chat_server, TWO_CHANGERS.format(hook=hook), 3, 400)


def details_of(browser, selector):
    """The details shown for the marker the selector finds, once clicked."""
    marker = browser.find_element(By.CSS_SELECTOR, selector)
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", marker)
    wait(browser, ec.presence_of_element_located((By.ID, "entry")))
    return browser.find_element(By.ID, "details").text


def test_two_entries_changing_one_hook_run_are_each_credited_their_own(browser, server, chat_server):
    """When a sliding window and a truncation both change one post_tool run, each marker
    shows what that entry removed and added, not the run's total."""
    record = two_changers(server, chat_server, "post_tool")
    run = next(r for r in record["hooks"] if r["call"] == 2 and r["hook"] == "post_tool")
    assert run["removed"] == 3 and [(c["index"], c["removed"], c["added"]) for c in run["changes"]] == [
        (0, 2, 0),
        (1, 1, 1),
    ]
    browser.get(f"{server.url}/ui#/executions/{record['execution_id']}")
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
    window = details_of(browser, "[data-manager=SlidingWindowManager][data-hook=post_tool][data-at='2']")
    assert "Removed by this entry (2)" in window and "Added" not in window
    cut = details_of(browser, "[data-manager=ToolsOutputTruncateManager][data-hook=post_tool][data-at='2']")
    assert "Removed by this entry (1)" in cut and "Added by this entry: summaries, cut results (1)" in cut
    no_console_errors(browser)


def test_changes_that_cannot_be_told_apart_are_credited_to_the_run_with_its_entries_named(
    browser, server, chat_server
):
    """When a run's outputs cannot be split by entry (a truncation at pre_llm makes its list
    afresh), a marker shows the run's removals under the names of the entries that changed it."""
    record = two_changers(server, chat_server, "pre_llm")
    run = next(r for r in record["hooks"] if r["call"] == 3 and r["hook"] == "pre_llm")
    assert "changes" not in run and run["removed"] == 3
    browser.get(f"{server.url}/ui#/executions/{record['execution_id']}")
    wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "svg.timeline [data-call]")))
    text = details_of(browser, "[data-manager=SlidingWindowManager][data-hook=pre_llm][data-at='3']")
    named = "this hook run (SlidingWindowManager[0], ToolsOutputTruncateManager[1])"
    assert f"Removed by {named} (3)" in text
    no_console_errors(browser)
