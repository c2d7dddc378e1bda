"""ctxmgmt.eval: the replay, the specifics, the baselines and the report."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import ctxmgmt
from ctxmgmt import Definition, get_counter
from ctxmgmt.agents.runner import Runner
from ctxmgmt.eval import Chat
from ctxmgmt.eval.replay import _Prepared, observation_masking, replay_definition, sliding_window
from ctxmgmt.eval.specifics import MAX_PER_TEXT, commands, error_lines, message_specifics, numbers, paths
from ctxmgmt.messages import without_escapes
from tests.agent_runs import agent_run
from tests.conftest import tool_call

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"
PRICES = ctxmgmt.Pricing(input=1.0, output=4.0, cache_read=0.1, cache_write=1.25)


def _call(id_, name, **args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _asst(text=None, *calls):
    m = {"role": "assistant", "content": text}
    if calls:
        m["tool_calls"] = list(calls)
    return m


def _tool(id_, text):
    return {"role": "tool", "tool_call_id": id_, "content": text}


# -- extractors -----------------------------------------------------------------------------
def test_paths_finds_posix_windows_and_file_names_not_urls():
    """Paths with a slash or an extension are found; URL paths and bare and/or words are not."""
    text = "edit /srv/app/x.py, src/a.py and setup.cfg; C:\\x\\y.txt; see https://e.com/a/b.html and/or ./run"
    assert paths(text) == ["/srv/app/x.py", "src/a.py", "setup.cfg", "C:\\x\\y.txt", "./run"]


def test_paths_skip_numbers_and_trailing_punctuation():
    """A decimal number is not a file name, and a sentence's full stop is not part of a path."""
    assert paths("pi is 3.14 and the file is notes.md.") == ["notes.md"]


def test_stream_devices_and_numbers_with_slashes_are_not_paths():
    """``/dev/null`` and the other stream devices a shell line names, and ratios written with
    slashes, are no paths an agent needs again; a file under /dev that is none of them is."""
    text = "ls x 2>/dev/null >/dev/stderr; cat /dev/fd/3 and /dev/sda1; ratio 3.5/4.4 or 0.50/0.75/1.00"
    assert paths(text) == ["/dev/sda1"]


@pytest.mark.parametrize(
    "text",
    [
        "built with Node.js and Vue.js",  # a library's name
        "if require.main === module",  # an attribute
        "mail user@example.com",  # an email's domain
        "see example.com and api.github.com",  # hosts
        "call obj.method and self.value",  # attributes
        "print(elig.TenYearCHD.sum(), df[m].Amount.sum())",  # attribute chains ending in a call
        "logger.log('x'); np.load(buf)",  # method calls named like a file type
    ],
)
def test_identifiers_and_hosts_are_not_paths(text):
    """A library name, an attribute, a host or an email domain is not a path."""
    assert paths(text) == []


def test_file_locations_and_dotfiles_are_paths():
    """A file named with its line as compilers and debuggers write it, and a dotfile with its
    dot, are paths; a method call with a number is not."""
    text = (
        "main.cpp(12): error C2065; Program.cs(10,5): error CS1002; > main.py(5)<module>(); "
        "edit .pre-commit-config.yaml; logger.log(1);"
    )
    assert paths(text) == ["main.cpp", "Program.cs", "main.py", ".pre-commit-config.yaml"]


@pytest.mark.parametrize(
    "name",
    ["setup.cfg", "package.json", "App.tsx", "Cargo.toml", "data.csv", "README.md", "index.js", "a.tar.gz"],
)
def test_bare_file_names_with_a_file_type_are_paths(name):
    """A bare name whose extension is a file type's (stdlib type map or a source file) is a path."""
    assert paths(f"open {name} now") == [name]


def test_a_slash_makes_a_path_whatever_the_extension():
    """A name with a slash is a path even when its extension is no file type (dist/index.main)."""
    assert paths("run dist/index.js and lib/x.main") == ["dist/index.js", "lib/x.main"]


def test_a_diff_header_names_the_file_not_its_side():
    """``--- a/x`` and ``+++ b/x`` (and ``diff --git a/x b/x``) name the file ``x``: the same
    path the agent writes elsewhere, not two others; a path that starts with ``a/`` elsewhere
    keeps it."""
    patch = "diff --git a/web/src/x.ts b/web/src/x.ts\n--- a/web/src/x.ts\n+++ b/web/src/x.ts\n@@ -1 +1 @@"
    assert paths(patch) == ["web/src/x.ts"]
    assert paths("see a/b/c.py") == ["a/b/c.py"]


def test_error_lines_are_reports_not_code():
    """Code that names an error (raise, except, a logging call, an assignment, a comment) is no error line."""
    code = (
        "except KeyError:\n    raise ValueError('bad')\nlog.error('failed to connect')\n"
        "status = 'FAILED'\nif err != nil { return fmt.Errorf(\"x\") }\n# ERROR handling below\n"
        "    throw new Error('boom');\nERROR_CODE = 5\nFAILED = 1\n  error: string;\n"
    )
    assert error_lines(code) == []


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error (out of memory)",
        "ERROR: status=500 from upstream",
        "KeyError: key=value missing",
        "FAILED tests/t.py::test_a - assert x == {",
        "E       AssertionError: assert {'a': 1} == {",
        "E       assert {'a': 1} == {",
        "[ERROR] build failed; see log {",
    ],
)
def test_an_error_report_holding_code_like_text_is_kept(line):
    """A line shaped like a report (an exception and its message, a level word, pytest's
    ``E``) is an error line even when it holds parentheses, ``key=value`` or ends in ``{``."""
    assert error_lines(f"running\n{line}\ndone") == [" ".join(line.split())]


def test_error_lines_of_each_kind_are_found():
    """Traceback lines, exceptions, compiler errors, test failures, exit statuses, OS errors are found."""
    text = (
        "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\nKeyError: 'sid'\n"
        "E       assert 1 == 2\nFAILED tests/test_a.py::test_b - AssertionError\n"
        "error: could not compile foo\nerror[E0308]: mismatched types\nnpm ERR! code ELIFECYCLE\n"
        "Process exited with code 2\nbash: foo: command not found\n"
        'Exception in thread "main" java.lang.NullPointerException\nall 12 tests passed\n'
    )
    assert error_lines(text) == [
        'File "app.py", line 3, in <module>',
        "KeyError: 'sid'",
        "E assert 1 == 2",
        "FAILED tests/test_a.py::test_b - AssertionError",
        "error: could not compile foo",
        "error[E0308]: mismatched types",
        "npm ERR! code ELIFECYCLE",
        "Process exited with code 2",
        "bash: foo: command not found",
        'Exception in thread "main" java.lang.NullPointerException',
    ]


def test_commands_come_from_shell_arguments_and_dollar_lines():
    """Each line of a cmd/command/bash/code argument is a command, and so is a `$ ` line."""
    m = _asst(
        "ran:\n$ ls  -la\nok",
        _call("c1", "bash", command="pytest -x tests/\ncd /srv"),
        _call("c2", "x", cmd=["git", "status"]),
    )
    assert commands(m) == ["pytest -x tests/", "cd /srv", "git status", "ls -la"]


def test_a_python_tools_code_is_no_command():
    """The lines of a Python tool's code are no commands; a shell tool's code lines are."""
    script = "import os\nprint(os.getcwd())"
    assert commands(_asst(None, _call("c1", "python", code=script))) == []
    assert commands(_asst(None, _call("c1", "run_python", code=script))) == []
    assert commands(_asst(None, _call("c2", "run_shell", code="ls\npwd"))) == ["ls", "pwd"]


@pytest.mark.parametrize(
    "tool", ["execute_code", "run_code", "jupyter_execute", "code_interpreter", "ipython"]
)
def test_a_code_runners_code_is_no_command(tool):
    """A code runner's ``code`` (execute_code, run_code, a notebook) holds no commands, though
    its name says it runs or executes."""
    assert commands(_asst(None, _call("c1", tool, code="import os\nprint(os.getcwd())"))) == []


def test_eval_and_the_summariser_agree_on_what_a_shell_command_is():
    """The eval's commands and the summariser's ledger use one rule: a shell tool's ``code``
    and ``script`` lines are commands for both, a Python tool's for neither."""
    from ctxmgmt.messages import is_shell_call, shell_keys

    assert shell_keys("bash", {"script": "ls", "code": "pwd"}) == ["script", "code"]
    assert is_shell_call("run_shell", {"code": "ls"}) and not is_shell_call("python", {"code": "ls"})
    assert not is_shell_call("execute_code", {"code": "ls"}) and is_shell_call("anything", {"cmd": ["ls"]})
    for tool, code in (("python", "import os"), ("bash", "ls -la")):
        m = _asst(None, _call("c1", tool, code=code))
        assert (commands(m) == [code]) is (tool == "bash")


def test_commands_ignore_other_arguments():
    """An argument not named like a shell command (a path to read) gives no command."""
    assert commands(_asst(None, _call("c1", "read_file", path="src/a.py"))) == []


def test_error_lines_are_normalised():
    """Failure lines lose a leading timestamp and extra spaces; a traceback header alone is not one."""
    text = (
        "ok\n2024-01-01T10:00:00Z ERROR:  connection refused\n"
        "Traceback (most recent call last):\nKeyError: 'sid'\n"
    )
    assert error_lines(text) == ["ERROR: connection refused", "KeyError: 'sid'"]


def test_numbers_finds_ids_versions_ports_and_line_references():
    """UUIDs, commit hashes, versions, host ports, file:line and long numbers; not 3.14 or words."""
    text = (
        "at app.py:42 on localhost:8080, commit 3f2a9c1d, v1.2 and 1.2.3, "
        "id 123e4567-e89b-12d3-a456-426614174000, 31337 deadbeef 3.14"
    )
    assert numbers(text) == [
        "app.py:42",
        "localhost:8080",
        "3f2a9c1d",
        "v1.2",
        "1.2.3",
        "123e4567-e89b-12d3-a456-426614174000",
        "31337",
    ]


def test_extractors_are_bounded():
    """A hostile text gives at most MAX_PER_TEXT specifics per category."""
    text = " ".join(f"/tmp/f{i}.txt" for i in range(5000))
    assert len(paths(text)) == MAX_PER_TEXT


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.text(max_size=300))
@example("/\\x:")
@example("\x1b[31mERROR\x1b[0m: src/\x1b[1mapp.py\x1b[0m not found")
def test_extractors_never_fail_and_find_what_is_there(text):
    """On any text, every specific found (but a command) occurs in the text as found (as a
    model reads it: without a terminal's escape sequences)."""
    found = message_specifics({"role": "tool", "tool_call_id": "x", "content": text})
    text = without_escapes(text)
    flat = " ".join(text.split())
    for cat in ("paths", "numbers"):
        assert all(s in text for s in found[cat])
    assert all(s in flat for s in found["error_lines"] if len(s) < 200)


# -- the replay -----------------------------------------------------------------------------
DEFINITION = {
    "name": "tight",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 600}}],
        "pre_llm": [
            {
                "type": "SummarizationManager",
                "config": {"preserve_recent_messages": 2},
                "activation": {"tokens_exceed": 900},
            }
        ],
    },
}


def test_the_replay_sends_what_the_runner_sent(store, agent_models, tools, chat_server):
    """Replayed on the runner's own record, every request is the one the runner sent the model."""
    store.create("tight", DEFINITION)
    runner = Runner(store, agent_models, tools)
    agent_id = runner.register(
        {
            "name": "helper",
            "type": "conversational",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "big"}, {"type": "echo"}],
            "system_prompt": "Be brief.",
            "context_management_name": "tight",
        }
    )
    chat_server.reply(tool_call(("echo", {"path": "src/app.py"}), ("big", {"size": 3000})))
    chat_server.reply(tool_call(("big", {"size": 2000})))
    chat_server.reply(tool_call(("echo", {"cmd": "pytest -x"})))
    chat_server.reply(tool_call(("big", {"size": 1000}), ("echo", {"n": 1})))
    chat_server.reply("done with src/app.py")
    result = runner.execute(agent_id, "fix src/app.py")
    assert result.finished
    record = runner.memory.messages(result.memory_id)
    sent = [r["messages"][1:] for r in chat_server.requests]  # without the system prompt
    conv = Chat("run", record, "Be brief.", chat_server.requests[0]["tools"], "fake-model")
    prep = _Prepared(conv, get_counter("fake-model"))
    replayed = [
        list(req) for _, req in replay_definition(prep, ctxmgmt.load_definition(DEFINITION), 16000, PRICES)
    ]
    assert any(len(r) < len(record) for r in sent)  # the definition did change what was sent
    assert json.loads(json.dumps(replayed)) == sent


def _hand_made():
    """A path read at call 1, cut away (summarised) by call 5, used again at call 5."""
    big = "\n".join(f"line {i}: nothing to see here" for i in range(400))
    msgs = [{"role": "user", "content": "Fix the failing build."}]
    msgs.append(_asst("Reading the config.", _call("c0", "read_file", path="config/settings.toml")))
    msgs.append(_tool("c0", "[server]\nport = 8080\n"))
    for k in range(1, 4):
        msgs.append(_asst(f"Step {k}.", _call(f"c{k}", "read_file", path=f"src/mod{k}.py")))
        msgs.append(_tool(f"c{k}", big))
    msgs.append(_asst("Back to config/settings.toml.", _call("c9", "read_file", path="config/settings.toml")))
    msgs.append(_tool("c9", "[server]\nport = 8080\n"))
    msgs.append(_asst("Done."))
    return Chat("hand", msgs, "You fix builds.", None, "gpt-4o")


CUT_ALL = {
    "name": "cut-all",
    "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 3}}]},
}


def test_a_path_cut_and_used_again_is_needed_and_not_kept():
    """At call 5 the path read at call 1 is needed; a definition that dropped it does not keep it."""
    report = ctxmgmt.eval([_hand_made()], [CUT_ALL], [100_000], baselines=False)
    calls = report.row("cut-all", 100_000).calls
    fifth = calls[4]
    assert fifth.needed["paths"] >= 1 and fifth.kept["paths"] < fifth.needed["paths"]
    assert all(c.needed["paths"] == 0 for c in calls[:2])  # nothing was cut before the third call


def test_a_definition_that_keeps_everything_keeps_every_needed_specific():
    """When nothing is removed nothing is needed; a same-size window keeps what the definition keeps."""
    window = {"type": "SlidingWindowManager", "config": {"max_messages": 10000}}
    keep = {"name": "keep", "settings": {"fit": False}, "hooks": {"pre_llm": [window]}}
    report = ctxmgmt.eval([_hand_made()], [keep], [100_000])
    row = report.row("keep", 100_000).totals
    assert sum(row.needed.values()) == 0
    base = report.row("sliding-window", 100_000, "sliding_window", of="keep").totals
    assert base.tokens == row.tokens and sum(base.needed.values()) == 0


def test_a_summary_that_quotes_the_path_keeps_it():
    """A specific found verbatim in a message the definition added (a summary) is kept."""
    conv = _hand_made()
    prep = _Prepared(conv, get_counter("gpt-4o"))
    from ctxmgmt.eval.replay import Call, _Kept

    i = prep.calls[4]
    summary = {"role": "user", "content": "Summary: read config/settings.toml (port 8080)."}
    kept, lost = Call("hand", 5), Call("hand", 5)
    _Kept(prep).measure(i, [prep.messages[0], summary, *prep.messages[i - 2 : i]], kept)
    _Kept(prep).measure(i, [prep.messages[0], *prep.messages[i - 2 : i]], lost)
    assert kept.needed["paths"] == lost.needed["paths"] >= 1
    assert kept.kept["paths"] == lost.kept["paths"] + 1


def test_the_sliding_window_keeps_the_task_and_whole_call_groups():
    """The sliding baseline keeps the task and the newest whole call groups within the budget."""
    prep = _Prepared(_hand_made(), get_counter("gpt-4o"))
    i = prep.calls[4]
    budget = prep.fixed + prep.tokens[0] + prep.tokens_of(i - 2, i) + 5
    messages, _ = sliding_window(prep, i, budget)
    assert messages == [prep.messages[0], *prep.messages[i - 2 : i]]
    assert not ctxmgmt.check_messages(messages)


def test_observation_masking_keeps_the_last_n_results():
    """Tool results older than the newest N become the placeholder; the rest stays as it was."""
    prep = _Prepared(_hand_made(), get_counter("gpt-4o"))
    i = prep.calls[4]
    messages, _ = observation_masking(prep, i, 2)
    tools = [m for m in messages if m["role"] == "tool"]
    assert [m["content"] for m in tools[:2]] == [ctxmgmt.eval.replay.MASK_PLACEHOLDER] * 2
    assert tools[2:] == [m for m in prep.messages[:i] if m["role"] == "tool"][2:]
    assert not ctxmgmt.check_messages(messages)


def test_every_shipped_definition_replays_a_generated_run_without_invalid_requests():
    """Every shipped definition, on a generated 40-turn run at 8k and 32k: valid requests, none over."""
    messages, _ = agent_run(40, seed=3)
    conv = Chat("gen", messages, "You are a coding agent.", None, "gpt-4o")
    names = sorted(ctxmgmt.definitions.shipped_definitions())
    report = ctxmgmt.evaluate([conv], names, [8000, 32000], baselines=False)
    for row in report.rows:
        t = row.totals
        assert t.calls == len([m for m in messages[1:] if m["role"] == "assistant"])
        assert (t.invalid, t.over_window) == (0, 0), row.name


def test_the_report_json_has_the_documented_schema():
    """The JSON has the schema's keys at the top, in each row and in each call."""
    data = json.loads(EXAMPLE.read_text())
    conv = Chat("ex", data["messages"], data["system_prompt"], data["tools"], data["model"])
    report = ctxmgmt.evaluate([conv], ["default"], 8000, pricing=PRICES)
    out = json.loads(json.dumps(report.to_dict()))
    assert out["schema"] == "ctxmgmt.eval/1"
    assert set(out) == {
        "schema",
        "windows",
        "definitions",
        "mask_last",
        "pricing",
        "categories",
        "conversations",
        "rows",
    }
    assert [(r["name"], r["kind"]) for r in out["rows"]] == [
        ("default", "definition"),
        ("sliding-window", "sliding_window"),
        ("observation-masking", "observation_masking"),
    ]
    row = out["rows"][0]
    for key in (
        "calls",
        "tokens_sent",
        "estimated_cost",
        "reusable_prefix_share",
        "over_window",
        "invalid_requests",
        "firings",
        "time_ms",
        "needed",
        "kept",
        "kept_share",
        "per_conversation",
        "per_call",
    ):
        assert key in row, key
    assert row["calls"] == len(row["per_call"]) == out["conversations"][0]["calls"]
    assert set(row["per_call"][0]) >= {"call", "tokens", "reusable_prefix_tokens", "needed", "kept", "fired"}


def test_the_svg_is_well_formed_with_a_line_per_row():
    """The plot parses as XML and draws a line per row in each panel, with a legend entry each."""
    report = ctxmgmt.evaluate([_hand_made()], [CUT_ALL, "default"], [4000, 16000])
    root = ET.fromstring(report.svg())
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(report.rows) <= len(lines) <= 2 * len(report.rows)  # no share line where nothing was needed
    labels = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert labels.count("sliding-window (= cut-all)") == 4


def test_an_invalid_conversation_is_refused_with_its_pointer():
    """A tool result answering no call is refused before any replay, named by conversation and pointer."""
    bad = Chat("bad-run", [{"role": "user", "content": "x"}, _tool("nope", "y"), _asst("z")])
    with pytest.raises(ctxmgmt.ContextError) as err:
        ctxmgmt.evaluate([bad])
    assert err.value.problems[0].source == "bad-run" and err.value.problems[0].pointer.startswith(
        "/messages/1"
    )


def test_bad_parameters_say_what_to_give():
    """A window of 0 or a negative mask count is a ValueError naming the parameter."""
    with pytest.raises(ValueError, match="windows"):
        ctxmgmt.evaluate([_hand_made()], ["default"], [0])
    with pytest.raises(ValueError, match="mask_last"):
        ctxmgmt.evaluate([_hand_made()], mask_last=-1)


def test_the_package_is_callable_as_documented():
    """ctxmgmt.eval(...) is ctxmgmt.evaluate(...), and the package's parts stay importable."""
    report = ctxmgmt.eval([_hand_made()], ["default"], [16000], baselines=False)
    assert isinstance(report, ctxmgmt.eval.Report) and ctxmgmt.eval.run is ctxmgmt.evaluate
    assert isinstance(Definition, type)


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "time_ms"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_the_same_eval_twice_gives_the_same_report():
    """A replay is deterministic: the same input gives the same report bytes, timings aside
    (the archives' references a summary lists are the same every run)."""
    messages, _ = agent_run(40, seed=3)
    conv = Chat("run", messages, "You are a careful coding agent.", None, "gpt-4o")

    def report():
        got = ctxmgmt.eval([conv], ["default", "long-running-agent"], windows=[4000, 8000], pricing=PRICES)
        return json.dumps(_without_times(got.to_dict()), sort_keys=True)

    first, second = report(), report()
    assert '"m-' not in first  # the report holds figures, not the requests
    assert first == second


def test_repeatable_refs_look_random_and_do_not_leak():
    """In repeatable_refs, references repeat run to run, shaped like random ones; outside, random."""
    from ctxmgmt.archive import new_ref, repeatable_refs
    from ctxmgmt.offload.base import check_ref

    with repeatable_refs("s"):
        a = [new_ref("messages"), new_ref("tool_result")]
    with repeatable_refs("s"):
        b = [new_ref("messages"), new_ref("tool_result")]
    assert a == b and a[0] != a[1].replace("t-", "m-")
    assert all(check_ref(r) for r in a)
    assert new_ref("messages") != new_ref("messages")


def _needed_and_kept_afresh(prep, i, request):
    """The needed and kept specifics at one call, from the definition (every earlier message)."""
    from ctxmgmt.eval.replay import _flat
    from ctxmgmt.eval.specifics import CATEGORIES, message_text

    present = {j for j, m in enumerate(prep.messages[:i]) if any(r is m for r in request)}
    originals = {id(prep.messages[j]) for j in present}
    new = [_flat(message_text(m)) for m in request if id(m) not in originals]
    added = "\n".join([prep.system_text, *new])
    needed, kept = {}, {}
    for cat in CATEGORIES:
        held = {s for j in present for s in prep.reused[j][cat]}
        last = prep.last_use[cat]
        gone = {s for j in range(i) if j not in present for s in prep.reused[j][cat] if last[s] >= i}
        needed[cat] = len(gone)
        kept[cat] = sum(1 for s in gone if s in held or s in added)
    return needed, kept


@pytest.mark.parametrize("name", ["default", "long-running-agent"])
def test_the_incremental_kept_check_counts_as_the_definition_says(name):
    """Counted call by call, incrementally, the needed and kept specifics are those computed afresh
    from every earlier message, for a definition and for a sliding window that shrinks and grows."""
    from ctxmgmt.eval.replay import Call, _Kept

    messages, _ = agent_run(30, seed=5)
    prep = _Prepared(Chat("run", messages, "sys", None, "gpt-4o"), get_counter("gpt-4o"))
    window_kept = _Kept(prep)
    checked = 0
    for call, request in replay_definition(prep, ctxmgmt.load_definition(name), 3000, PRICES):
        if request is None:
            continue
        i = prep.calls[call.call - 1]
        assert (call.needed, call.kept) == _needed_and_kept_afresh(prep, i, request)
        checked += sum(call.needed.values())
        # A window whose budget goes up and down: carriers leave and come back.
        budget = prep.fixed + (900 if call.call % 3 else 4000)
        made, _ = sliding_window(prep, i, budget)
        got = Call("run", call.call)
        window_kept.measure(i, made, got)
        assert (got.needed, got.kept) == _needed_and_kept_afresh(prep, i, made)
    assert checked > 0


def test_evaluate_replays_with_or_without_an_offload_store():
    """evaluate(store=False) replays as a deployment without a store: a manager that needs one fails there."""
    offload = {"max_output_length": 400, "offload": True, "without_store": "fail"}
    needs = {
        "name": "needs-store",
        "settings": {"fit": False},
        "hooks": {"post_tool": [{"type": "ToolsOutputTruncateManager", "config": offload}]},
    }
    messages, _ = agent_run(12, seed=1)
    conv = Chat("run", messages, "You are a coding agent.", None, "gpt-4o")
    failed = {}
    for store in (True, False):
        t = ctxmgmt.evaluate([conv], [needs], [100_000], baselines=False, store=store).row(
            "needs-store", 100_000
        )
        failed[store] = t.totals.refused + t.totals.trace_errors
    assert failed[True] == 0 and failed[False] > 0, failed


def test_the_small_windows_bench_divides_the_reusable_share_by_the_requests_sent():
    """bench_small_windows' reusable shares are over the requests sent: a refused call counts in neither."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_small_windows", ROOT / "bench" / "bench_small_windows.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from ctxmgmt.eval.replay import Call

    sent = [Call("r", 1, tokens=1000, reusable=750), Call("r", 2, tokens=1000, reusable=250)]
    refused = [Call("r", 3, refused="cannot fit"), Call("r", 4, refused="cannot fit")]
    assert bench.reusable_shares(sent + refused) == bench.reusable_shares(sent) == (0.5, 0.5)


@pytest.mark.parametrize("model", ["openai/gpt-4o", "openai/azure/gpt-4o"])
def test_a_provider_prefixed_model_is_counted_as_the_bare_model(model):
    """A model named with a provider prefix (Inspect AI's openai/gpt-4o) is counted and priced as gpt-4o."""
    from ctxmgmt.eval.replay import bare_model

    messages, _ = agent_run(12, seed=2)

    def report(name):
        conv = Chat("run", messages, "You are a coding agent.", None, name)
        return _without_times(ctxmgmt.evaluate([conv], ["default"], [4000]).to_dict())

    assert bare_model(model) == "gpt-4o" and bare_model("gpt-4o") == "gpt-4o" and bare_model(None) is None
    assert report(model) == report("gpt-4o")


def test_a_coloured_specific_is_the_plain_one():
    """A tool's coloured output holds the same specifics as its plain one: the measure and
    the summary read past the escape sequences alike."""
    coloured = "\x1b[31mERROR\x1b[0m: cannot open \x1b[1msrc/app/run.py\x1b[0m (exit code 2)"
    plain = "ERROR: cannot open src/app/run.py (exit code 2)"
    assert message_specifics({"role": "tool", "tool_call_id": "x", "content": coloured}) == message_specifics(
        {"role": "tool", "tool_call_id": "x", "content": plain}
    )
    assert message_specifics({"role": "tool", "tool_call_id": "x", "content": plain})["error_lines"]
