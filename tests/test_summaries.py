"""The offline summariser keeps what matters: planted facts survive, ranked by importance."""

import json
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, get_counter, load_definition
from ctxmgmt.digest import LEDGER_ITEMS, digest, error_lines, fold_errors, merge_ledger, outcome, uncontained
from ctxmgmt.messages import text_of
from ctxmgmt.summaries import bound, merge, parse_rendered, render, summarize_offline
from tests.agent_runs import agent_run

MODEL = "gpt-4o-mini"


def context_text(ctx: Context) -> str:
    parts = [ctx.system_prompt or ""]
    for m in ctx.messages:
        parts.append(text_of(m.get("content")))
        parts += [c["function"]["arguments"] for c in m.get("tool_calls") or ()]
    return "\n".join(parts)


# Every project flavour (seed % 5: Python, Node, Rust, Go, devops) at each size.
RUNS = [(turns, seed) for turns in (40, 160, 300) for seed in (0, 1, 2, 3, 4, 8, 13)]


@pytest.mark.parametrize(("turns", "seed"), RUNS)
def test_default_keeps_95_percent_of_planted_facts_verbatim(turns, seed):
    """On coding-agent runs of 40 to 300 turns, three times the window, the shipped default
    keeps at least 95% of the planted facts (task, constraints, numbers, error lines, files
    changed, URLs), and at least 95% of the error lines, verbatim in the context."""
    messages, facts = agent_run(turns, seed=seed)
    tokens = get_counter(MODEL).messages(messages)[0]
    ctx = Context("You are a coding agent.", messages, (), MODEL, max(8000, tokens // 3))
    out = context_text(load_definition("default").apply("pre_llm", ctx).context)
    critical = [
        f
        for k in ("task", "constraints", "numbers", "error_lines", "files_changed", "urls")
        for f in facts[k]
    ]
    kept = [f for f in critical if f in out]
    assert len(kept) >= 0.95 * len(critical), sorted(set(critical) - set(kept))[:10]
    errors = [f for f in facts["error_lines"] if f in out]
    assert len(errors) >= 0.95 * len(facts["error_lines"])


def test_error_lines_of_many_toolchains_are_found_and_code_is_not():
    """Failure lines of compilers, test runners, shells and HTTP are found verbatim; source
    code that merely mentions errors, passing tests and zero counts are not."""
    log = "\n".join(
        [
            "src/parse.c:88:13: error: use of undeclared identifier 'buf_len'",
            "error[E0382]: borrow of moved value: `cfg`",
            "FAILED tests/test_api.py::test_refund - AssertionError: assert 402 == 200",
            "panic: runtime error: index out of range [5] with length 5",
            "npm ERR! code ERESOLVE",
            "src/app.ts(14,7): error TS2322: Type 'string' is not assignable to type 'number'.",
            "bash: jq: command not found",
            'Exception in thread "main" java.lang.NullPointerException',
            "HTTP/1.1 503 Service Unavailable",
            "thread 'main' panicked at src/lib.rs:306:5:",
            "make: *** [Makefile:48: migrate] Error 1",
            "    raise KeyError(key)",
            '  if err != nil { return fmt.Errorf("open: %w", err) }',
            "test_error_handling PASSED",
            "Found 0 errors in 12 files",
        ]
    )
    found = error_lines(log)
    assert found == log.splitlines()[:11]


def test_a_web_pages_prose_and_markup_are_not_error_lines():
    """A failure phrase that prose says too ("could not", "not found") far into a page's long
    line, or in its markup, is no error line; the same phrase at a line's start, or a failure a
    tool reports anywhere, is."""
    page = "Sample size calculators. " * 60 + "I could not find a good calculator for this design."
    reports = [
        "bash: jq: command not found",
        "curl: (6) Could not resolve host: example.invalid",
        '127.0.0.1 - "GET /search?' + "q=x&" * 40 + ' HTTP/1.1" 403 Forbidden',
        "2024/01/01 12:00:00 main.go:42: open /srv/" + "a/" * 60 + "x.json: no such file or directory",
        "<urlopen error timed out>",
        '<failure message="Expected file not found"/>',
    ]
    markup = [
        "<title>Page not found &middot; GitHub Pages</title>",
        "<center><h1>404 Not Found</h1></center>",
    ]
    assert error_lines("\n".join([page, *markup, *reports])) == reports


def test_a_long_lines_error_item_shows_its_failure():
    """A failure far into a long line is shown with the text around it, not the line's start."""
    line = "step " * 200 + "TypeError: unsupported operand type(s) for +: 'int' and 'str' " + "tail " * 100
    (item,) = error_lines(line)
    assert item.startswith("…") and "TypeError: unsupported operand" in item and len(item) <= 300
    (item,) = error_lines("x" * 288 + " ValueError: the message says what went wrong")
    assert item.endswith("ValueError: the message says what went wrong")


def _error_lines_searching_everything(text):
    """error_lines as it was before lines were picked by their words: every line searched."""
    from ctxmgmt.digest import _error_item, _reported

    found, pos = {}, 0
    while True:
        following = text.find("\n", pos)
        match = _reported(text, pos, len(text) if following < 0 else following + 1)
        if match is None:
            if following < 0:
                return list(found)
            pos = following + 1
            continue
        line = _error_item(text, match)
        if line is not None:
            found.setdefault(line, None)
        following = text.find("\n", match.end())
        pos = len(text) if following < 0 else following + 1


FRAGMENTS = [
    "src/parse.c:88:13: error: x", "error[E0382]: moved", "FAILED t.py::a - AssertionError: assert 4 == 2",
    "panic: boom", "npm ERR! code E", "a.ts(1,7): error TS2322: T", "jq: command not found",
    "java.lang.NullPointerException", "HTTP/1.1 503 Service Unavailable", "panicked at src/lib.rs:3:5:",
    "make: *** Error 1", "E   assert 1 == 2", "E: Unable to locate package", "not ok 3 - x", "✗ t", "× t",
    "FAIL", "FAIL\t", "exit code 2", "exited with 1", "422 Unprocessable", "Segmentation fault",
    "\u0130", "\u017f", "Error \u0663", "4\u0660\u0663 Forbidden", "\u00e9Error: x", "FAIL\u2003",
    "x:\u0661:2: y", "missing \u00e9t\u00e9 entry",
    "KeyError: 'session_id'", "x is not defined", "could not", "  raise KeyError(k)", "0 errors", "ok",
    "plain words here", "value: 1", "\t", " ", "", "ERROR", "Fatal:", "a:1:2: W123 y", "no such file",
    "2026-11-27 10:00:01", "10:00:\u0661\u0662", "CRITICAL", "[ALERT]", "app[12]:", "INFO", "level=error",
    '"level": "fatal"', '{"severity":"ERROR"}', "E1127 10:00:01.123456", "F1127 1\u0660:00:01.123456",
    "[main]", "[crit]", "ERR]", "ERRO[0000]", '"level":50', '"log.level":"error"', "+0000]", ",123:", "/Main",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(FRAGMENTS), max_size=30),
    st.lists(st.sampled_from(["\n", " ", "", "\r\n"]), max_size=30),
)
@example(["FAIL", "x"], ["\n"])
@example(["\u0130", "ERROR: x"], ["\n"])
@example(["\udcff", "FAIL", "error: x"], ["\n", "", "\n"])  # a lone surrogate: searched as "?"
@example(["\udcff\u00e9 ok", "x.py:1:2: error", "\udcffValueError: y"], ["\n", "\n"])
def test_picking_lines_by_their_words_finds_what_searching_everything_finds(parts, seps):
    """Only the lines where the RE2 superset finds something are searched (a text with a lone
    surrogate too), and the failure lines found are the same."""
    text = "".join(p + (seps[i] if i < len(seps) else "\n") for i, p in enumerate(parts))
    assert error_lines(text) == _error_lines_searching_everything(text)


PATH_FRAGMENTS = [
    "src/a.py", "./b/c.txt", "../up/x.md", "~/home.rc", "/etc/hosts", "a.py", "pkg/__init__.py",
    "x@y.com/a.js", "a+b/c-d.ts", "v1.2.3", "0.05s", "end.", ".", "..", "/", "//", "./", "~", ":", "@",
    "+", "-", "_", "(", ")", "[", "]", "'", '"', "`", ",", ";", "=", "|", "\\", "é/ü.py", "e\u0301/x.py",
    "日本/語.rs", "\u00a0", "\v", "\u2003", "\ud800", "x" * 260, "a" * 256 + "/b.py", "file:src/a.py",
    "https://h.io/p/q.py", "a.b.c.d.e.f.g/h.py", "1/2", "x.\u0663", "\u0663.py", "Makefile", "a/b/c",
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(PATH_FRAGMENTS), st.text(max_size=12)),
        max_size=24,
    ),
    st.lists(st.sampled_from(["", " ", "\n", "\t", ":", "/", ".", "@"]), max_size=24),
)
@example(["file:src/a.py"], [""])
@example(["a" * 256 + "/b.py"], [" "])
@example(["x", "\ud800", "src/a.py"], ["", ""])
@example(["e\u0301/x.py"], [""])
def test_paths_searched_run_by_run_are_those_a_whole_search_finds(parts, seps):
    """Searching for paths only within the runs of characters a path may hold finds what
    searching the whole text finds, in the same order (lookbehinds, word ends, non-ASCII,
    lone surrogates)."""
    from ctxmgmt.digest import _PATH, _paths, _paths_by_runs

    text = "".join(p + (seps[i] if i < len(seps) else " ") for i, p in enumerate(parts))
    assert _paths_by_runs(text) == _PATH.findall(text)
    sparse = text + " plain words" * (len(text) * 5 + 1)  # dots and slashes are rare: run by run
    assert _paths(sparse) == [p for p in _PATH.findall(sparse) if re.search(r"[^\W\d_]", p)]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS),
            st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
        ),
        max_size=8,
    )
)
@example(["Error \u0663"])
@example(["4\u0660\u0663 Forbidden"])
@example(["FAIL\x0b"])
@example(["FAIL\x1c"])
def test_the_fast_prefilter_matches_every_line_the_failure_pattern_matches(parts):
    """Whatever the exact pattern finds on a line, the RE2 prefilter finds something too."""
    from ctxmgmt.digest import _FAILURE, _FAILURE_SUPERSET

    line = " ".join(parts)
    if _FAILURE.search(line + "\n"):
        assert _FAILURE_SUPERSET.search(line + "\n") is not None


def test_progress_is_aggregated_not_previews():
    """Tool calls become one line per tool with counts, paths and failures, never raw output."""
    msgs = [{"role": "user", "content": "Make the tests pass."}]
    for i in range(12):
        call = {
            "id": f"r{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'},
        }
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"r{i}", "content": "import os\nword salad " * 50},
        ]
    for i in range(3):
        call = {
            "id": f"t{i}",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"cmd": "pytest"}'},
        }
        result = "1 passed" if i == 2 else f"FAILED tests/test_x.py::test_{i} - ValueError: bad {i}"
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": result},
        ]
    sections = digest(msgs)
    assert sections["progress"] == [
        "read_file ×12 (src/m0.py, src/m1.py, … src/m11.py; 12 paths)",
        "run_tests ×3: 2 failed, last ok",
    ]
    assert "word salad" not in render(sections, len(msgs))
    assert sections["errors"] == [  # the newest first, then the command that failed
        "FAILED tests/test_x.py::test_1 - ValueError: bad 1",
        "FAILED tests/test_x.py::test_0 - ValueError: bad 0",
        "failed commands: `pytest`",
    ]


def test_a_merge_ranks_again_and_keeps_old_errors_over_new_noise():
    """Merged with a stretch of chatter and reads, an earlier summary's errors and files stay
    within a tight budget; progress and decisions give way first."""
    old = {
        "goal": ["Fix the importer."],
        "errors": [f"ERROR E{i:04d}: ImportError in src/m{i}.py line {i}" for i in range(12)],
        "files_changed": ["src/importer.py (×3)"],
    }
    chatter = [{"role": "user", "content": "go on"}]
    for i in range(40):
        call = {"id": f"c{i}", "type": "function", "function": {"name": f"tool{i}", "arguments": "{}"}}
        chatter += [
            {
                "role": "assistant",
                "content": f"I decided to go with option {i} because it is simpler.",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"},
        ]
    merged = summarize_offline(chatter, old)
    count = get_counter(MODEL).text
    kept = bound(merged, 100, 400, count)
    assert kept["errors"] == old["errors"] and kept["files_changed"] == old["files_changed"]
    assert len(kept["progress"]) < len(merged["progress"])
    assert count(render(kept, 100)) <= 400


def test_merged_counts_add_up():
    """The same error in two stretches is one item whose count adds up, ranked first."""
    a = {"errors": ["KeyError: 'user_id' (×2)", "ERROR: x"]}
    b = {"errors": ["ERROR: y", "KeyError: 'user_id'"]}
    assert merge(a, b)["errors"][0] == "KeyError: 'user_id' (×3)"


def test_merging_two_stretches_adds_up_calls_paths_failures_and_failed_commands():
    """Summarised in two stretches, the progress and failed commands say what one summary
    of the whole would: calls and failures add up, paths and commands are kept."""

    def run(i, ok):
        args = f'{{"cmd": "make t{i}"}}'
        call = {"id": f"r{i}", "type": "function", "function": {"name": "run", "arguments": args}}
        result = "all good" if ok else f"make: *** [Makefile:{i}: t{i}] Error 2"
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"r{i}", "content": result},
        ]

    first = [m for i in range(4) for m in run(i, ok=False)]
    second = [m for i in range(4, 7) for m in run(i, ok=i == 6)]
    merged = summarize_offline(second, summarize_offline(first))
    assert merged["progress"] == ["run ×7: 6 failed, last ok"]
    [commands] = [e for e in merged["errors"] if e.startswith("failed commands")]
    assert (
        commands == "failed commands: `make t1`, `make t2`, `make t3`, `make t4`, `make t5` (and 1 earlier)"
    )
    assert merged["errors"][-1] == commands


@pytest.mark.parametrize(
    "state",
    [
        {"summary": {"sections": {"goal": 5}}},
        {"summary": {"sections": {"goal": ["a"]}, "summarized": "many"}},
        {"summary": {"sections": {"goal": ["a"]}, "archives": [{"ref": 1}]}},
        {"summary": {"sections": {"goal": "abc"}}},
        {"summary": {"sections": {}, "execution": {"id": "e", "count": "x", "saving": "y"}}},
    ],
)
def test_a_state_ctxmgmt_did_not_write_is_ignored_not_a_crash(state):
    """A client's malformed summary state is ignored (the summary is read back from the
    messages): the summariser and the fit step work as without it."""
    msgs = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"step {i} " + "z" * 400} for i in range(40)
    ]
    ctx = Context(messages=msgs, state=state, model=MODEL, context_window=4000)
    result = load_definition("default").apply("pre_llm", ctx, execution="e")
    assert all(e["error"] is None for e in result.trace)


def test_the_goal_keeps_the_task_and_the_newest_requests():
    """With many user requests, the goal keeps the first task and the newest requests first,
    so a tight budget drops the oldest requests."""
    msgs = [{"role": "user", "content": "the original task"}]
    msgs += [{"role": "user", "content": f"request {i}"} for i in range(2000)]
    goal = digest(msgs)["goal"]
    assert goal[0] == "the original task" and goal[1] == "request 1999" and len(goal) == 31
    kept = bound({"goal": goal}, 10, 60, get_counter(MODEL).text)["goal"]
    assert kept[0] == "the original task" and kept[1] == "request 1999"


def test_blocks_an_agent_adds_beside_tool_results_are_no_ask_the_users_words_there_are():
    """Tagged blocks alone beside tool results (Claude Code's <system-reminder>, which its user
    turn holds with the results) are no request: the goal is the task and what the user wrote;
    the paths the blocks name are still kept. The same blocks as a user message of its own ask."""
    call = {"id": "c0", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    msgs = [{"role": "user", "content": "Fix the failing login test."}]
    for n in range(6):
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"c{n}"}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"contents {n}"},
            {"role": "user", "content": f"<system-reminder>src/auth/f{n}.py changed</system-reminder>"},
        ]
    msgs[-1] = {**msgs[-1], "content": msgs[-1]["content"] + "\nAlso keep the old API."}
    sections = digest(msgs)
    assert sections["goal"] == ["Fix the failing login test.", "Also keep the old API."]
    assert "src/auth/f0.py" in json.dumps(sections)
    alone = [{"role": "user", "content": "<task>Port the parser</task>"}]
    assert digest(alone)["goal"] == ["<task>Port the parser</task>"]


def test_the_archive_guide_survives_a_client_that_sends_only_messages(tmp_path):
    """Read back from the summary message, the guide keeps the earlier references."""
    from ctxmgmt.offload import LocalOffloader

    store = LocalOffloader(tmp_path)
    d = load_definition({"name": "s", "hooks": {"pre_llm": [{"type": "SummarizationManager"}]}})
    msgs = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"step {i} " + "z" * 300} for i in range(30)
    ]
    first = d.apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
    [ref] = [a["ref"] for a in first.context.state["summary"]["archives"]]
    more = [
        *first.context.messages,
        *({"role": "assistant", "content": f"more {i} " + "z" * 300} for i in range(30)),
    ]
    second = d.apply("pre_llm", Context(messages=more), offloader=store, session="s")  # no state sent back
    assert ref in next(
        m["content"] for m in second.context.messages if m["content"].startswith("[ctxmgmt:summary]")
    )


def test_the_archive_guide_says_how_to_read_once_and_reads_back_both_shapes():
    """The guide says once how to read an archive, then one short line per archive; a
    summary rendered the older way (how to read on every line) is read back the same."""
    refs = [{"ref": f"m-{i:032x}", "count": 10 + i} for i in range(5)]
    text = render({"goal": ["task"]}, 60, refs)
    guide = text.split("## Archived messages\n", 1)[1].splitlines()
    assert guide[0].startswith('context_read(ref="m-') and len(guide) == 6
    assert guide[1:] == [f"- {a['ref']}: {a['count']} messages" for a in refs]
    older = (
        text.split("## Archived messages", 1)[0]
        + "## Archived messages\n"
        + "\n".join(
            f'- {a["ref"]}: {a["count"]} messages; context_read(ref="{a["ref"]}") returns them' for a in refs
        )
    )
    assert parse_rendered(text)[2] == parse_rendered(older)[2] == refs
    counter = get_counter(MODEL)
    assert counter.text(text) < counter.text(older) - 5 * 15


def test_a_paths_item_says_its_strongest_actions_and_its_count_only_when_used_often():
    """A path's ledger item names what was done to it beyond reading (a path changed was read
    too); it carries no count when used once or twice (it costs a third less), its count when
    the agent came back to it three times or more: that count ranks it with the commands, in
    the stretch and, read back from the item, after a merge."""
    commands = [
        "cat src/app.py",
        "sed -i s/a/b/ src/app.py",
        "cat docs/a.md",
        "cat README.md",
        "cat README.md",
    ]
    run = _tool_run(
        "bash", lambda i: json.dumps({"cmd": commands[i % 5]}), ["x = 1", "", "# a", "b", "b"] * 2
    )
    one = summarize_offline(run)["specifics"]
    assert "src/app.py: edited (×4)" in one and "docs/a.md: read" in one
    assert not any(i.startswith("docs/a.md") and "×" in i for i in one)
    assert one.index("src/app.py: edited (×4)") < one.index("docs/a.md: read")
    merged = summarize_offline(run, summarize_offline(run))["specifics"]
    assert "src/app.py: edited (×8)" in merged and "docs/a.md: read" in merged
    calls = [i for i in merged if i.startswith("`")]
    assert merged.index("src/app.py: edited (×8)") < merged.index(calls[-1])


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls src/x.py 2>/dev/null", ["src/x.py: read"]),
        ("cat src/x.py 2>&1 | head", ["src/x.py: read"]),
        ("grep -n main src/x.py > /dev/null 2>&1", ["src/x.py: read"]),
        ("cat src/x.py > out/x.txt", ["src/x.py: read", "out/x.txt: edited"]),
        ("cat src/x.py >| out/x.txt", ["src/x.py: read", "out/x.txt: edited"]),
        ("cat src/x.py >& out/x.log 2>&1", ["src/x.py: read", "out/x.log: edited"]),
        ("python gen.py >> src/x.py", ["gen.py: ran", "src/x.py: edited"]),
        ('python -c "print(1>0)" src/x.py', ["src/x.py: ran"]),
        ("awk '$1 > 5' src/x.py", ["src/x.py: named"]),
        ('cat src/x.py > "out/x.txt"', ["src/x.py: read", "out/x.txt: edited"]),
        ("cat > out/x.md <<'EOF'\nsee docs > out/api.md\nEOF", ["out/x.md: edited"]),
        ("ls src/x.py >& 2", ["src/x.py: read"]),
    ],
)
def test_a_redirect_edits_its_target_only_and_one_to_dev_null_is_no_write(command, expected):
    """A shell command that redirects into a file edits that file (its name quoted or not), and
    does to the others what it does without the redirect; a redirect to /dev/null or to
    another descriptor writes nothing, a '>' inside quotes is no redirect, and a here-document's
    body is no command (a path it names was named, not edited)."""
    run = _tool_run("bash", lambda i: json.dumps({"cmd": command}), ["ok"])
    specifics = summarize_offline(run)["specifics"]
    assert all(item in specifics for item in expected), specifics
    assert all(item == "out/api.md: named" for item in specifics if "api.md" in item), specifics


def _tool_run(name, args, results):
    """Calls of one tool with the given results, as OpenAI chat messages."""
    out = [{"role": "user", "content": "Look at the service logs and find why it fails."}]
    for i, result in enumerate(results):
        call = {"id": f"t{i}", "type": "function", "function": {"name": name, "arguments": args(i)}}
        out += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": result},
        ]
    return out


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-27 10:00:01 ERROR worker-3: timeout reading /var/data/in/3.csv after 30 s",
        "2026-11-27 10:00:01.123 ERROR [main] c.f.Importer - cannot parse row 17",
        "2026-11-27 10:00:01,123 ERROR c.f.Importer - cannot parse row 17",
        "Nov 27 10:00:01 host app[123]: ERROR worker crashed",
        "E1127 10:00:01.123456  1234 reader.go:42] timeout reading shard 7",
        "2026-11-27 10:00:01 CRITICAL payment service unreachable",
        "2026-11-27T10:00:01.123Z [FATAL] scheduler: job 42 lost its lease",
        "ERROR worker crashed while flushing",
        'level=error ts=2026-11-27T10:00:01Z msg="scrape failed" target=db',
        '{"level":"error","msg":"upload rejected","file":"a.csv"}',
        '{"severity": "ERROR", "message": "db down"}',
        "12:00:00.123 [main] ERROR c.f.Bar - cannot parse row 17",
        "2026/11/27 10:00:01 [crit] 12#0: *1 SSL_do_handshake() broke off",
        "[2026-11-27 10:00:00 +0000] [123] [ERROR] Worker timeout (pid:124)",
        "[2026-11-27 10:00:00,123: ERROR/MainProcess] Task import.run raised unexpectedly",
        "SEVERE: Servlet.service() for servlet [x] threw an exception",
        "[12:00:00 ERR] Unhandled exception in request",
        "ERRO[0000] cannot connect to the Docker daemon",
        '{"level":50,"time":1,"msg":"payment refused"}',
        '{"log.level":"error","message":"queue full"}',
        '2026-11-27T10:00:00.1Z stderr F {"level":"error","msg":"boom"}',
    ],
)
def test_a_logs_lines_at_an_error_level_are_error_lines(line):
    """A log's line at an error level (after its time and a few fields, opening the line,
    glog's, logfmt's, a JSON record's) is an error line, whatever else it says."""
    assert error_lines(f"2026-11-27 10:00:00 INFO starting\n{line}\n2026-11-27 10:00:02 INFO done") == [line]


ESC = "\x1b"


@pytest.mark.parametrize(
    ("coloured", "line"),
    [
        (  # Rust's tracing, with its colours
            f"{ESC}[2m2026-11-27T10:00:01.123456Z{ESC}[0m {ESC}[31mERROR{ESC}[0m {ESC}[2mapp::db{ESC}[0m"
            f"{ESC}[2m:{ESC}[0m connection refused",
            "2026-11-27T10:00:01.123456Z ERROR app::db: connection refused",
        ),
        (  # pytest --color=yes
            f"{ESC}[31mFAILED{ESC}[0m tests/test_parser.py::test_row - AssertionError: assert 4 == 2",
            "FAILED tests/test_parser.py::test_row - AssertionError: assert 4 == 2",
        ),
        (  # cargo, forced colours
            f"{ESC}[1m{ESC}[31merror[E0382]{ESC}[0m{ESC}[1m: borrow of moved value: `v`{ESC}[0m",
            "error[E0382]: borrow of moved value: `v`",
        ),
        (
            f"{ESC}[0;31mERROR{ESC}[0m: {ESC}]8;;file:///a.py{ESC}\\a.py{ESC}]8;;{ESC}\\ not found",
            "ERROR: a.py not found",
        ),
    ],
)
def test_a_terminals_colours_are_read_past(coloured, line):
    """A tool that prints colours (forced: CI, ``--color=always``): its error lines are found,
    and shown without the escape sequences; so are its paths, URLs and exit status."""
    assert error_lines(f"compiling\n{coloured}\ndone") == [line]
    listing = (
        f"{ESC}[01;34msrc{ESC}[0m\n{ESC}[01;32msrc/app/run.py{ESC}[0m see {ESC}[4mhttps://x.io/d{ESC}[0m"
    )
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -R"}'}}
    result = f"{listing}\n{coloured}\n{ESC}[31mexit code 2{ESC}[0m"
    sections = digest(
        [
            {"role": "user", "content": "Build it."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
        ]
    )
    assert line in "\n".join(sections["errors"]) and ESC not in json.dumps(sections, ensure_ascii=False)
    assert "https://x.io/d" in sections["critical_context"]
    assert any("src/app/run.py" in item for item in sections["specifics"])
    assert outcome(f"ok\n{ESC}[31mexit code 2{ESC}[0m") == "exit 2"


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-27 10:00:01 INFO no ERROR found in batch 3",
        "2026-11-27 10:00:01 INFO alerting ALERT rules loaded",
        "W1127 10:00:01.123456  1234 reader.go:42] slow shard 7",
        "The ERROR code table is below.",
        "    if level == ERROR: return",
        "logger.setLevel(logging.ERROR)",
        "ERROR = 40",
        "CRITICAL path analysis shows the database is the bottleneck",
        "ALERT the on-call team when p99 > 250 ms",
        "uvicorn app:main --port 8000 --log-level=error",
        "uvicorn app:main --log-level=error --port 8000",
        '{"id": 1, "label": "KeyError", "count": 3}',
        '{"url": "/x", "status": "404 Not Found"}',
    ],
)
def test_an_error_level_named_but_not_logged_at_is_no_error_line(line):
    """A line at another level that names one, a warning, prose, code, a flag and a JSON
    record of data are not error lines."""
    assert error_lines(line) == []


def test_reading_logs_full_of_error_lines_is_not_a_failure():
    """Ten successful read_log calls whose output holds ERROR lines are reported as ten calls,
    none failed, and their thirty retry lines fold into one with the attempts' range."""
    log = "\n".join(
        [f"2024-05-01 10:00:{i:02d} ERROR db: connection refused (attempt {i})" for i in range(1, 31)]
        + ["2024-05-01 10:01:00 INFO gave up"]
    )
    messages = _tool_run("read_log", lambda i: f'{{"path": "/var/log/app{i}.log"}}', [log] * 10)
    sections = summarize_offline(messages)
    assert sections["progress"][0].startswith("read_log ×10") and "failed" not in sections["progress"][0]
    folded = [e for e in sections["errors"] if "attempt 1\u201330" in e]
    assert len(folded) == 1 and len(sections["errors"]) == 1, sections["errors"]
    assert "/var/log/app9.log: read" in sections["specifics"]  # a call that only read a path


@pytest.mark.parametrize(
    ("result", "message", "expected"),
    [
        ("2024 ERROR connection refused\n2024 INFO recovered\nok", {}, "ok"),
        ("ERROR: this line is in a log that was read\nINFO: done", {}, "ok"),
        ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'", {}, "failed"),
        ("building\n[exit code: 2]", {}, "exit 2"),
        ("Error: exit code 0 was written here\ncompiled\nexit code: 0", {}, "ok"),
        ("bash: line 1: zsteg: command not found", {}, "failed"),
        ("all fine, error-free", {"is_error": True}, "failed"),
        ("======= 2 failed, 40 passed in 3.1s =======", {}, "failed"),
        ("======= 42 passed in 3.1s =======", {}, "ok"),
        ("make: *** [Makefile:3: t3] Error 2", {}, "failed"),
        ("x" * 10_000 + "\nERROR" * 1000 + "\ndone", {}, "ok"),
        ("INFO start\nERROR worker 3 crashed\nERROR worker 4 crashed", {}, "ok"),
    ],
)
def test_an_outcome_comes_from_the_status_and_the_edges_not_the_word_error(result, message, expected):
    """A call's outcome comes from its flag, its exit code or the shape of its first and last
    lines; a success whose output contains "error" stays a success."""
    assert outcome(result, message) == expected


def test_folding_keeps_lines_that_differ_in_what_they_say():
    """Lines that differ in a port, an index or several numbers stay verbatim; only a counter
    folds, and a folded range widens when merged with more attempts."""
    ports = [f"dial tcp 127.0.0.1:{p}: connect: connection refused" for p in (5432, 6379, 8081, 9092)]
    files = [f"ERROR E{i:04d}: ImportError in src/m{i}.py line {i}" for i in range(5)]
    assert fold_errors(ports + files) == ports + files
    once = fold_errors([f"retry {i} failed" for i in range(1, 6)])
    assert once == ["retry 1\u20135 failed (×5)"]
    assert fold_errors([*once, "retry 6 failed", "retry 7 failed"]) == ["retry 1\u20137 failed (×7)"]


def test_folding_lines_that_hold_a_hash_sign():
    """A line's own '#' is not a number's place: such lines fold by their counter, never fail."""
    lines = [f"error #1 at step {i}" for i in range(3, 6)]
    assert fold_errors(lines) == ["error #1 at step 3\u20135 (×3)"]
    odd = ["a#1", "a1#", "a#1", "\ue000 1", "\ue000 2", "\ue000 3"]
    assert fold_errors(odd) == ["a#1", "a#1", "a1#", "\ue000 1", "\ue000 2", "\ue000 3"]


def test_lines_that_differ_only_in_their_timing_fold_into_their_range():
    """A test runner's lines that differ only in how long they took are one failure: folded,
    with the durations' range and the count; other numbers or units keep lines apart."""
    runs = [f"× ranking computes ranking with unicode {t}ms" for t in (29, 3, 35)]
    assert fold_errors([*runs, "× ranking computes ranking with unicode 11ms (×2)"]) == [
        "× ranking computes ranking with unicode 3\u201335ms (×5)"
    ]
    assert fold_errors(["FAILED in 0.12s", "FAILED in 1.5s"]) == ["FAILED in 0.12\u20131.5s (×2)"]
    apart = ["✕ parses dates (3 ms)", "✕ parses dates (4 s)", "✕ parses times (5 ms)", "took 3s and 4s"]
    assert fold_errors(apart) == apart
    # A duration that is set, not measured, says something: a timeout, a wait.
    assert fold_errors(["Timeout: 30s", "Timeout: 300s", "timed out after 5s", "timed out after 9s"]) == [
        "Timeout: 30s",
        "Timeout: 300s",
        "timed out after 5s",
        "timed out after 9s",
    ]
    assert fold_errors(["deployed 3 us-east", "deployed 4 us-east"]) == [
        "deployed 3 us-east",
        "deployed 4 us-east",
    ]
    # Timestamped lines fold by their timing, stamps left out; a folded decimal range widens.
    stamped = [
        "[12:00:01] took 0.9\u20131.1s (×2)",
        "[12:00:02] took 0.8\u20131.1s (×2)",
        "[12:00:03] took 0.7s",
    ]
    assert fold_errors(stamped) == ["took 0.7\u20131.1s (×5)"]


def test_pytests_margin_line_goes_when_its_summary_line_says_it():
    """``E   TypeError: x`` is the same failure as ``FAILED t.py::test_a - TypeError: x``: the
    summary keeps the line that says more, once; other error lines stay."""
    log = (
        "E       TypeError: prune_query() got an unexpected keyword argument 'metadata'\n"
        "tests/test_document.py:130: TypeError\n"
        "FAILED tests/test_document.py::test_dry_run - TypeError: prune_query() got an unexpected "
        "keyword argument 'metadata'\n"
        "E       assert 204 == 500\n"
    )
    run = _tool_run("bash", lambda i: json.dumps({"cmd": "pytest -q"}), [log + "[exit code: 1]"])
    errors = summarize_offline(run)["errors"]
    assert not any(e.startswith("E       TypeError") for e in errors), errors
    assert any(e.startswith("FAILED tests/test_document.py::test_dry_run") for e in errors)
    assert "tests/test_document.py:130: TypeError" in errors and "E       assert 204 == 500" in errors
    # Only the message of a failed test's line says an E line again; the larger count stays.
    assert uncontained(["E   1", "FAILED t.py::test_b - exit 1"]) == ["E   1", "FAILED t.py::test_b - exit 1"]
    assert uncontained(["E   KeyError: 'x' (×5)", "FAILED t.py::test_a - KeyError: 'x'"]) == [
        "FAILED t.py::test_a - KeyError: 'x' (×5)"
    ]


def test_a_merge_ranks_the_telling_error_lines_before_bare_labels():
    """Merged, an error line that says something particular comes before a frequent bare
    label (``[exit code: 1]``), which a tight budget then drops first."""
    telling = "FAILED t.py::test_a - KeyError: 'order_id' (×2)"
    merged = merge({"errors": ["[exit code: 1] (×41)"]}, {"errors": [telling]})
    assert merged["errors"] == [telling, "[exit code: 1] (×41)"]


def test_a_path_the_files_changed_section_lists_is_not_in_the_ledger_twice():
    """A path only edited (and read) is one line, in Files changed; a path deleted or run
    keeps its ledger item, which says so."""
    kept = ["`make` → ok", "src/b.py: edited, deleted", "src/c.py: ran", "src/d.py: read"]
    changed = {"files_changed": ["src/a.py (×2)", "src/b.py", "src/c.py"]}
    merged = merge(changed, {"specifics": ["src/a.py: edited", *kept]})
    assert sorted(merged["specifics"]) == kept


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.text(alphabet="#12 -\u2013ab\ue000:.ms", max_size=12), max_size=8))
@example(["x #1 2", "x #1 3", "x #1 4"])
@example(["a 1ms", "a 2ms (×3)", "a 1.5\u20132ms"])
@example(
    [
        "[12:00:01] took 0.9\u20131.1s (×2)",
        "[12:00:02] took 0.8\u20131.1s (×2)",
        "[12:00:03] took 0.7\u20131.1s",
    ]
)
@example(["a 9\u20131 b", "a 8\u20131 b", "a 7\u20131 b"])
def test_folding_never_fails_and_keeps_every_count(items):
    """On any lines, folding gives lines whose counts add up to the lines given."""
    from ctxmgmt.digest import split_count

    out = fold_errors(items)
    assert sum(split_count(i)[1] for i in out) == sum(split_count(i)[1] for i in items)


def test_the_ledger_keeps_commands_with_outcomes_paths_with_actions_and_ids():
    """The specifics ledger names each command with its last outcome, each path with what was
    done to it, and the ids the agent used; a merge adds counts and keeps the newer outcome."""
    first = _tool_run(
        "bash",
        lambda i: json.dumps({"cmd": ["cat data/orders.csv", "pytest -x tests/test_io.py"][i]}),
        ["id,total\nORD-88213,12", "===== 1 failed in 0.2s ====="],
    )
    second = _tool_run(
        "bash", lambda i: json.dumps({"cmd": "pytest -x tests/test_io.py"}), ["== 3 passed =="]
    )
    one = summarize_offline(first)
    assert "`pytest -x tests/test_io.py` → failed" in one["specifics"]
    assert "data/orders.csv: read" in one["specifics"] and "ORD-88213" in one["specifics"]
    merged = summarize_offline(second, one)
    assert "`pytest -x tests/test_io.py` → ok (×2)" in merged["specifics"]
    assert any(i.startswith("`pytest -x tests/test_io.py`") for i in merged["specifics"][:2])
    assert "data/orders.csv: read" in merged["specifics"]


def test_the_ledger_gives_a_python_tools_code_no_command_rank():
    """A Python tool's code lines are no shell commands: they do not take the ledger's top
    tier (``import os`` → ok) before the shell commands and the paths the agent acted on."""
    runs = _tool_run(
        "python",
        lambda i: json.dumps({"code": f"import os\nprint(os.listdir('data/{i}'))"}),
        ["['a.csv']", "['b.csv']"],
    )
    shell = _tool_run("bash", lambda i: json.dumps({"cmd": "pytest -x tests/test_io.py"}), ["== 1 failed =="])
    shell[1]["tool_calls"][0]["id"] = shell[2]["tool_call_id"] = "s0"
    items = summarize_offline(runs + shell[1:])["specifics"]
    assert not any(i.startswith("`import os`") for i in items)
    assert items[0] == "`pytest -x tests/test_io.py` → failed"


_LOG_LINE = st.sampled_from(
    [
        "ERROR db: connection refused",
        "error: could not open socket",
        "FATAL worker crashed",
        "Traceback (most recent call last):",
        "KeyError: 'x'",
        "INFO request served in 12 ms",
        "1 failed",
        "exit code: 1",
    ]
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(middle=st.lists(_LOG_LINE, min_size=7, max_size=40))
@example(middle=["Traceback (most recent call last):", "KeyError: 'x'", "exit code: 1"] * 3)
def test_error_words_between_a_clean_start_and_end_never_make_a_failure(middle):
    """Whatever error lines a log holds in its middle, an output that starts and ends cleanly
    (a successful read of that log) is ``ok``: only its edges and its flag decide."""
    text = "\n".join(["reading /var/log/app.log", "---", "---", *middle, "---", "---", "end of file"])
    assert outcome(text) == "ok"


def test_a_tight_budget_keeps_the_first_specifics_before_emptying_them():
    """Within a budget too small for every section, the ledger keeps its first (most needed)
    items while the less important sections give way; the result fits."""
    sections = {
        "goal": ["Fix the importer: " + " ".join(f"step {i} of the plan," for i in range(20))],
        "errors": [f"E{i:03d} ImportError in src/module_{i}.py" for i in range(40)],
        "specifics": ["`pytest -x tests/test_io.py` → exit 1", "data/orders.csv: read (×3)"]
        + [f"ORD-{i:05d}" for i in range(60)],
        "progress": [f"tool{i} ×2" for i in range(30)],
        "key_decisions": [f"I decided on option {i} because it is simpler." for i in range(10)],
    }
    count = get_counter(MODEL).text
    kept = bound(sections, 50, 300, count)
    assert kept["specifics"][:2] == sections["specifics"][:2]
    assert not kept["progress"] and count(render(kept, 50)) <= 300


def test_a_lookups_ids_reach_the_ledger_and_a_family_of_ids_does_not_flood_it():
    """The ids of a short lookup answer (a user's certificates) are in the ledger with the call
    that got them; fifty ids the same but for a number keep only a few of the family."""
    record = json.dumps(
        {"user_id": "mia_li_3668", "payment_methods": ["certificate_7504069", "credit_card_4421486"]}
    )
    listing = "\n".join(f"handler_{i}" for i in range(50))
    messages = [{"role": "user", "content": "Book the flight with my certificates."}]
    for i, (name, args, result) in enumerate(
        [
            ("get_user_details", {"user_id": "mia_li_3668"}, record),
            ("list_handlers", {}, listing),
        ]
    ):
        call = {"id": f"u{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"u{i}", "content": result},
        ]
    ledger = summarize_offline(messages)["specifics"]
    assert "`get_user_details(user_id=mia_li_3668)` → ok" in ledger
    assert "certificate_7504069" in ledger and "credit_card_4421486" in ledger
    assert sum(item.startswith("handler_") for item in ledger) == 3


def test_numbers_and_versions_are_no_family():
    """Numbers and versions of a short answer all reach the ledger: the family rule (ids the same
    but for a number) is for names with numbers, and every plain number has the same shape."""
    result = (
        "rows: 48213\nmean: 59120.5\nmax: 61007\nseed 20240611, pandas 2.2.1, numpy 1.26.4, scipy 1.13.0\n"
        "releases v2.2.1 v2.3.1 v2.4.0 v3.0.2"
    )
    call = {"id": "c", "type": "function", "function": {"name": "python", "arguments": '{"code": "stats()"}'}}
    messages = [
        {"role": "user", "content": "Describe the data set."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": result},
    ]
    ledger = summarize_offline(messages)["specifics"]
    for value in ("48213", "61007", "20240611", "2.2.1", "1.26.4", "1.13.0", "v2.3.1", "v3.0.2"):
        assert value in ledger


def test_a_hostile_output_gives_a_bounded_ledger_and_a_plain_outcome():
    """A megabyte of id-shaped words, paths and error words on one line gives at most the
    ledger's bound of items, a one-line outcome, and no failure without a failure's shape."""
    line = " ".join(f"ID-{i:06d} src/m{i}.py ERROR" for i in range(40_000))
    messages = _tool_run("read_log", lambda i: '{"path": "big.log"}', [line])
    sections = summarize_offline(messages)
    assert outcome(line) == "ok" and "failed" not in sections["progress"][0]
    assert len(sections["specifics"]) <= LEDGER_ITEMS
    assert sum(item.startswith("ID-") for item in sections["specifics"]) <= 3


def test_a_long_stretchs_newest_specifics_are_not_refused_for_its_oldest():
    """A stretch read oldest first (a first call on a long history) with more distinct
    specifics than the ledger holds while it reads: the newest calls' commands, paths and
    ids are in the summary, as they would be in a short stretch (the full ledger used to
    refuse every new one)."""
    n = 3000
    messages = _tool_run(
        "bash",
        lambda i: json.dumps({"cmd": f"python3 tools/step_{i}.py --run R-{i:05d}"}),
        [f"done: wrote out/part_{i}.csv" for i in range(n)],
    )
    items = "\n".join(summarize_offline(messages)["specifics"])
    for i in range(n - 10, n):
        assert f"python3 tools/step_{i}.py --run R-{i:05d}" in items
    assert "tools/step_0.py" not in items  # the oldest gave way, not the newest


_PIECES = st.sampled_from(
    [
        "#",
        "1",
        "22",
        "3\u20135",
        " (×2)",
        "\ue000",
        "ERROR",
        "error:",
        "KeyError: 'a'",
        "\n",
        " ",
        "src/a.py",
        "`x`",
        "FAILED",
        "exit code 1",
        "2024-01-01T10:00:00Z ",
        "[",
        "]",
        "#k=",
        "E  ",
    ]
)
_TEXT = st.lists(_PIECES, max_size=30).map("".join)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.lists(st.tuples(_TEXT, _TEXT, _TEXT), min_size=1, max_size=4))
@example([("error #1 at 3", "error #1 at 4\nerror #1 at 5\nerror #1 at 6", "x")])
def test_the_offline_summary_never_fails_on_any_content(turns):
    """The offline summary of any commands, file contents and results (and its merge) never fails."""
    msgs = [{"role": "user", "content": "go"}]
    for k, (command, content, result) in enumerate(turns):
        args = {"cmd": command} if k % 2 else {"path": "a.txt", "content": content}
        call = {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps(args)},
        }
        msgs += [
            {"role": "assistant", "content": command, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"{result}\n{content}"},
        ]
    sections = summarize_offline(msgs, None)
    assert summarize_offline(msgs, sections)


def test_a_call_that_went_well_and_shows_no_value_is_not_listed():
    """`tool()` or `update_plan(plan=…)` that went well holds no specific: the ledger leaves it
    out (its count is in the progress); the same call that failed, or one with a value, is listed."""
    plan = json.dumps({"plan": [{"step": "x" * 80, "status": "done"}]})
    msgs = [{"role": "user", "content": "go"}]
    for k, (name, args, result) in enumerate(
        [
            ("update_plan", plan, "Plan updated"),
            ("ping", "{}", "ok"),
            ("lookup", json.dumps({"order_id": "W123"}), "found"),
            ("deploy", "{}", "Error: permission denied"),
        ]
    ):
        call = {"id": f"c{k}", "type": "function", "function": {"name": name, "arguments": args}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": result},
        ]
    listed = "\n".join(summarize_offline(msgs, None).get("specifics", []))
    assert "update_plan(" not in listed and "ping()" not in listed
    assert "lookup(order_id=W123)" in listed and "deploy()" in listed


def test_ctxmgmts_own_tags_and_references_are_no_specifics():
    """Archive references and tags in what the agent read (a notice, a summary's guide) do not
    enter the summary's ledger as ids: the summary's guide lists the references itself."""
    ref, tag = "t-" + "5e" * 16, "#k=" + "a1" * 8
    run = _tool_run(
        "read_log",
        lambda i: json.dumps({"path": "/var/log/app.log"}),
        [f"[ctxmgmt: output archived as {ref} {tag}] order ORD-88213 failed"],
    )
    items = summarize_offline(run)["specifics"]
    assert "ORD-88213" in items
    assert not any(ref in i or tag in i or "5e5e5e" in i or "a1a1a1" in i for i in items), items


def test_the_sizes_and_offsets_in_ctxmgmts_notices_are_no_specifics():
    """A cut result's notice (its original size, the offsets and limit to read it back) says
    nothing the agent chose: none of its numbers enters the ledger; the result's own do."""
    from ctxmgmt.truncation import _marker

    notice = _marker("55,012 chars", "t-" + "5e" * 16, (1220, 54012))  # its tag a placeholder
    run = _tool_run(
        "build",
        lambda i: json.dumps({"service": i}),
        [f"build 7781 of service-{i} done{notice}tail of the log: took 6069 ms" for i in range(3)],
    )
    items = summarize_offline(run)["specifics"]
    assert "7781 (×3)" in items and "6069 (×3)" in items, items
    assert not any(n in i for i in items for n in ("1220", "20000", "55,012", "54012", "52792")), items


def test_a_deleted_path_says_so_whatever_else_was_done_to_it():
    """A path created, edited and then deleted says deleted, in a stretch and after a merge."""
    assert (
        merge_ledger(["tmp/x.py: created, edited"], ["tmp/x.py: deleted"])[0] == "tmp/x.py: created, deleted"
    )
    run = _tool_run(
        "bash",
        lambda i: json.dumps({"cmd": ["touch tmp/x.py", "sed -i s/a/b/ tmp/x.py", "rm tmp/x.py"][i]}),
        ["", "", ""],
    )
    assert any(i.startswith("tmp/x.py:") and "deleted" in i for i in summarize_offline(run)["specifics"])


def test_a_cleared_results_trace_keeps_its_specifics():
    """The trace in a cleared result's notice is what is left of it: its paths and ids still
    reach the ledger (only a cut result's sizes and offsets are ctxmgmt's own)."""
    notice = (
        "[cleared: original 9,000 chars; bash `make` → exit 2; src/app/main.py, build_7781 #k="
        + "a1" * 8
        + "]"
    )
    run = _tool_run("bash", lambda i: json.dumps({"cmd": "make"}), [notice])
    items = summarize_offline(run)["specifics"]
    assert any("src/app/main.py" in i for i in items) and "build_7781" in items, items


def test_paths_named_inside_a_written_files_content_enter_the_ledger():
    """The paths a written file's content names (``"main": "dist/index.js"`` in a package.json)
    are in the ledger: the agent builds, runs or opens them next."""
    deps = {f"package-{i}": f"^1.{i}.0" for i in range(20)}
    content = json.dumps({"name": "app", "main": "dist/index.js", "dependencies": deps}, indent=2)
    assert len(content) > 300  # a file's content, not a short argument
    run = _tool_run("write_file", lambda i: json.dumps({"path": "package.json", "content": content}), ["ok"])
    summary = summarize_offline(run)
    items = summary["specifics"]
    assert "package.json" in summary["files_changed"]  # listed there, so not twice
    assert any(i.split(":")[0] == "dist/index.js" or i == "dist/index.js" for i in items), items


def test_what_a_summary_keeps_does_not_depend_on_the_archive_references_drawn(monkeypatch):
    """The sections a fitted summary keeps do not depend on which archive reference or tag was drawn."""
    from ctxmgmt.archive import new_ref
    from ctxmgmt.marks import KEY_ENV
    from ctxmgmt.summaries import fitted

    counter = get_counter("gpt-4o")
    sections = {
        "goal": ["Fix the importer in src/io.py so that orders load."],
        "specifics": [f"`pytest -x tests/test_{i}.py` → exit 1" for i in range(30)],
    }
    guides = [[{"ref": "m-" + "0" * 32, "count": 12}], [{"ref": "m-" + "9" * 32, "count": 12}]]
    guides += [[{"ref": new_ref("messages"), "count": 12}] for _ in range(3)]
    for key in range(4):
        monkeypatch.setenv(KEY_ENV, f"a fixed test key number {key} " + "k" * 32)
        for room in range(150, 400, 3):
            kept = [fitted(sections, 40, guide, room, "user", counter)[1] for guide in guides]
            assert all(k == kept[0] for k in kept), (key, room)


@settings(max_examples=300, deadline=None)
@given(
    digits=st.text("0123456789", min_size=32, max_size=32),
    kind=st.sampled_from(["tool_result", "messages"]),
    model=st.sampled_from(["gpt-4o", "gpt-4"]),
)
def test_every_reference_takes_the_tokens_of_the_sizing_reference(digits, kind, model):
    """A drawn reference (32 decimal digits) takes as many tokens as archive.sizing_ref, whatever
    its digits, alone or in a notice, in o200k and cl100k: a text's size never depends on the
    reference drawn."""
    from ctxmgmt.archive import new_ref, sizing_ref

    counter = get_counter(model)
    drawn = f"{new_ref(kind)[0]}-{digits}"
    for shape in ("{0}", "stored as {0} #k=", '- {0}: 12 messages; context_read(ref="{0}") returns them'):
        assert counter.text(shape.format(drawn)) == counter.text(shape.format(sizing_ref(kind)))


@pytest.mark.parametrize("name", ["default", "cache-aware"])
def test_a_long_run_of_short_messages_is_summarised_rather_than_dropped(name):
    """Past 150 short messages in a large window, the definition summarises all but the newest 100:
    what the oldest said (a path, a ticket) is in the summary, not dropped by the last-resort
    window; and the summariser alone never keeps more than 100 of them."""
    msgs = [{"role": "user", "content": "Fix TICKET-4242 in the parser."}]
    for i in range(110):
        args = json.dumps({"path": f"src/step_{i}.py"})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": args}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}"},
        ]
    ctx = Context("You are a coding agent.", msgs, (), MODEL, 128_000)
    result = load_definition(name).apply("pre_llm", ctx)
    fired = [(e["type"], e["messages_after"]) for e in result.trace if e["activated"]]
    assert [t for t, _ in fired] == ["SummarizationManager"], result.trace
    out = context_text(result.context)
    assert "src/step_0.py" in out and "TICKET-4242" in out
    assert len(result.context.messages) <= 100 + 2  # the task and the summary besides


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    '[truncated: original 55,012 chars; call context_read(ref="t-',
                    "0123456789abcdef0123456789abcdef",
                    '") #k=0a1b2c3d4e5f6a7b]',
                    "#k=",
                    "0a1b2c3d4e5f6a7b",
                    "t-",
                    "m-",
                    "]",
                    "\ud800",
                    " ",
                ]
            ),
            st.text(max_size=8),
        ),
        max_size=16,
    )
)
@example(["t-", "0123456789abcdef0123456789abcdef"])
@example(["\ud800", "#k=", "0a1b2c3d4e5f6a7b"])
def test_a_text_the_own_marks_prefilter_passes_over_holds_none_of_them(parts):
    """Whatever ctxmgmt's own-marks pattern finds in a text, the RE2 prefilter finds something
    too, so that a text it passes over is left as it was."""
    from ctxmgmt.digest import _OWN, _OWN_SUPERSET, _may_hold, _may_own

    text = "".join(parts)
    assert _may_hold(_OWN_SUPERSET, text) or _OWN.search(text) is None
    assert _may_own(text) or _OWN.search(text) is None


def test_a_result_with_a_lone_surrogate_is_summarised_with_its_failure_and_paths():
    """A tool result holding a lone surrogate (which the token counter only samples in a text
    over 200,000 characters, and RE2's UTF-8 cannot hold) is read by the exact patterns: its
    failure line and its paths are in the summary, and nothing raises."""
    bad = "ValueError: bad \ud800 value in /srv/app/config.py\n"
    result = "ok line\n" * 300 + bad + "ok line\n" * 30_000
    assert error_lines(bad) == [bad.strip()]
    sections = summarize_offline(_tool_run("read_log", lambda i: '{"path": "svc.log"}', [result]))
    assert bad.strip() in sections["errors"]
    assert any("/srv/app/config.py" in item for item in sections["specifics"])


def test_a_path_seen_in_two_outputs_ranks_above_one_seen_once_and_keeps_its_count():
    """A path that comes up in two tool outputs is listed with its count, above the paths seen
    in one output however recent, and a merge with a later ledger keeps it above them."""
    results = [
        f"src/central.py\nsrc/once_{i}.py\n" if i in (0, 1) else f"src/once_{i}.py\n" for i in range(6)
    ]
    sections = summarize_offline(_tool_run("list_files", lambda i: f'{{"dir": "d{i}"}}', results))
    paths = [item for item in sections["specifics"] if item.startswith("src/")]
    assert paths[0] == "src/central.py: seen (×2)", paths
    assert "src/once_5.py: seen" in paths
    merged = merge_ledger(sections["specifics"], [f"src/later_{i}.py: seen" for i in range(5)])
    later = [item for item in merged if item.startswith("src/")]
    assert later[0] == "src/central.py: seen (×2)", later


def test_a_path_the_agent_named_is_read_back_as_named_and_ranks_above_one_seen_once():
    """A path the agent wrote in a message is listed as named, and after a merge it still ranks
    with what the agent typed, above a path an output held once."""
    messages = [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": "The bug is probably in /testbed/src/core/engine; I will look."},
        *_tool_run("list_files", lambda i: '{"dir": "."}', ["src/once.py\n" + "x" * 2100])[1:],
    ]
    specifics = summarize_offline(messages)["specifics"]
    assert "/testbed/src/core/engine: named" in specifics
    merged = [i for i in merge_ledger(specifics, []) if i.startswith(("/testbed", "src/"))]
    assert merged == ["/testbed/src/core/engine: named", "src/once.py: seen"]


def test_a_merge_ranks_a_path_seen_in_both_stretches_by_its_counts_together():
    """A path seen once before and once since is seen twice: the merge lists it with its count
    and ranks it first at once, and merging the result again changes nothing."""
    merged = merge_ledger(
        ["/a/x: seen", "/p/x: seen"], ["/r/x: seen", "/s/x: seen", "/t/x: seen", "/p/x: seen"]
    )
    assert merged[0] == "/p/x: seen (×2)", merged
    assert merge_ledger(merged, []) == merged


def test_a_path_a_user_named_past_the_start_of_a_long_message_is_in_the_ledger():
    """A path in a later user message, past the part its ask keeps, is listed as named; one the
    ask holds is not listed twice."""
    messages = [
        {"role": "user", "content": "Fix the failing test in src/app/main.py."},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": "Some background. " * 30 + "The config is in /srv/app/config/settings.py.",
        },
    ]
    sections = summarize_offline(messages)
    assert "/srv/app/config/settings.py: named" in sections["specifics"]
    assert not any(item.startswith("src/app/main.py") for item in sections["specifics"])


def test_a_long_stretch_is_read_in_full_from_its_newest_message_and_skimmed_before(monkeypatch):
    """Past its reading budget (a first call on a long history), a digest reads the oldest
    messages for what counts most: the user's asks, each call with its outcome, the paths it
    acted on, the files it changed and the error lines of its result; the paths and ids a
    result shows only in the newest part, which it reads in full."""
    import ctxmgmt.digest as digest_module

    def stretch(tag: str, error: str) -> list[dict]:
        run = _tool_run(
            "bash",
            lambda i: json.dumps({"cmd": f"pytest tests/test_{tag}.py"}),
            [f"FAILED tests/test_{tag}.py::test_a - {error}\nsee docs/{tag}_notes.md\n" + "log line\n" * 300],
        )
        run[0]["content"] = f"Fix the {tag} module."
        run[1]["tool_calls"][0]["id"] = run[2]["tool_call_id"] = f"t-{tag}"
        write = {"id": f"w-{tag}", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
        write["function"]["arguments"] = json.dumps({"path": f"src/{tag}.py", "content": "x = 1"})
        return [
            *run,
            {"role": "assistant", "content": None, "tool_calls": [write]},
            {"role": "tool", "tool_call_id": f"w-{tag}", "content": "ok"},
        ]

    messages = stretch("old", "KeyError: 'old_key'") + stretch("new", "KeyError: 'new_key'")
    whole = digest(messages)
    monkeypatch.setattr(digest_module, "_READ_CHARS", 4000)  # the newest stretch only
    skimmed = digest(messages)
    assert {"docs/old_notes.md: seen", "docs/new_notes.md: seen"} <= set(whole["specifics"])
    assert "docs/old_notes.md: seen" not in skimmed["specifics"], skimmed["specifics"]
    assert "docs/new_notes.md: seen" in skimmed["specifics"]
    assert any("old_key" in e for e in skimmed["errors"]) and any("new_key" in e for e in skimmed["errors"])
    assert "Fix the old module." in skimmed["goal"]
    assert "`pytest tests/test_old.py` → failed" in skimmed["specifics"]
    assert "tests/test_old.py: ran" in skimmed["specifics"]
    assert {"src/old.py", "src/new.py"} <= set(skimmed["files_changed"])
    # A newest result over the budget alone: the last call is still read in full.
    monkeypatch.setattr(digest_module, "_READ_CHARS", 100)
    assert "docs/old_notes.md: seen" in digest(messages[:3])["specifics"]


def test_folding_with_the_sized_draft_writes_what_folding_alone_writes():
    """fold given the draft folded_size drew for the same messages writes the very summary
    and state that fold draws for itself (the window reuses the draft)."""
    from ctxmgmt.manager import Runtime
    from ctxmgmt.summaries import fold, folded_size
    from ctxmgmt.types import Hook

    messages, _ = agent_run(30, seed=3)
    context = Context(messages=messages)
    removed = list(range(1, 25))
    runtime = Runtime(Hook.PRE_LLM, get_counter(None), "test")
    sized = folded_size(context, removed, 800, runtime)
    assert sized is not None
    mine, _ = fold(context, removed, 25, 600, runtime, seen=False, strict=True, keep=800, draft=sized[1])
    own, _ = fold(context, removed, 25, 600, runtime, seen=False, strict=True, keep=800)
    assert mine is not None and own is not None
    assert list(mine.messages) == list(own.messages) and mine.state == own.state


def test_the_goal_is_what_the_user_said_not_the_context_its_client_wrapped_around_it():
    """Agents wrap what they add in tagged blocks on lines of their own at either end of a user
    message (Claude Code's <system-reminder>, Cline's <environment_details>): the goal is what
    the user said. Inline markup stays, and a message of blocks only stays whole (its block
    may be the ask: Cline's <task>)."""
    reminder = (
        "<system-reminder>\nAs you answer, use the CLAUDE.md context: tabs, not spaces.\n</system-reminder>"
    )
    details = "<environment_details>\n# VSCode Visible Files\nsrc/app.py\n</environment_details>"
    cases = [
        (f"{reminder}\nFix the failing login test in tests/test_auth.py", "Fix the failing login test"),
        (f"Rename <b>parse</b> to read_config\n\n{details}", "Rename <b>parse</b> to read_config"),
        (f"<task>\nMigrate the schema to v3\n</task>\n\n{details}", "<task>\nMigrate the schema to v3"),
    ]
    for said, expected in cases:
        goal = digest([{"role": "user", "content": said}, {"role": "assistant", "content": "on it"}])["goal"]
        assert " ".join(goal[0].split()).startswith(" ".join(expected.split())), (said, goal)
        assert "system-reminder" not in goal[0] or "<task>" in expected
    cut = digest([{"role": "user", "content": f"{reminder}\nFix it"}])["goal"][0]
    assert cut == "Fix it"
    nested = digest([{"role": "user", "content": "do X\n<a>\n<ab>y</ab></a>"}])["goal"][0]
    assert "<ab>y</ab>" in nested  # a tag is only closed by its own name


def test_a_message_of_data_about_where_the_client_runs_is_no_goal():
    """A user message that is only elements holding elements (Codex's <environment_context>
    with its <cwd> and <shell>) is data, not an ask: the goal starts with the user's first
    request, and the data's paths are still read. A block with text of its own is an ask."""
    environment = (
        "<environment_context>\n  <cwd>/home/dev/shop</cwd>\n  <approval_policy>on-request</approval_policy>"
        '\n  <network access="restricted"></network>\n  <shell>zsh</shell>\n</environment_context>'
    )
    messages = [
        {"role": "user", "content": environment},
        {"role": "user", "content": "Make checkout retry a declined card once"},
        {"role": "assistant", "content": "on it"},
    ]
    summary = digest(messages)
    assert summary["goal"][0] == "Make checkout retry a declined card once"
    assert not any("environment_context" in line for line in summary["goal"])
    assert any("/home/dev/shop" in item for section in summary.values() for item in section)
    for ask in ("<task>\nFix the cart\n</task>", "<task><title>Fix the cart</title>\nthen ship it</task>"):
        assert digest([{"role": "user", "content": ask}, *messages[1:]])["goal"][0].startswith("<task>")
    # A user whose only ask is written as elements (an issue's fields): it is the goal still.
    issue = "<issue><title>Checkout fails on retry</title><body>card declined</body></issue>"
    assert digest([{"role": "user", "content": issue}, messages[2]])["goal"] == [issue]


def test_a_messages_key_leaves_out_its_prompt_cache_breakpoints_and_nothing_else():
    """A summary's ``upto`` key of a message is the same whether a client put its breakpoint
    on it or moved it away (Claude Code moves it every request), and differs when the text,
    a part or a tool result's call differs."""
    from ctxmgmt.summaries import message_key

    result = {"type": "tool_result", "tool_use_id": "t1", "content": "pytest: 3 failed"}
    m = {"role": "user", "content": [result, {"type": "text", "text": "go on"}]}
    marked = {
        "role": "user",
        "content": [{**result, "cache_control": {"type": "ephemeral"}}, m["content"][1]],
    }
    last = {
        "role": "user",
        "content": [result, {**m["content"][1], "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    }
    assert message_key(m) == message_key(marked) == message_key(last)
    other_call = {"role": "user", "content": [{**result, "tool_use_id": "t2"}, m["content"][1]]}
    other_text = {"role": "user", "content": [result, {"type": "text", "text": "stop"}]}
    assert len({message_key(m), message_key(other_call), message_key(other_text)}) == 3
    assert "cache_control" in marked["content"][0]  # the message handed in is left as it was


def test_an_anthropic_tool_result_marked_is_error_is_a_failed_call():
    """A tool_result with ``is_error: true`` (how Claude Code marks a failed tool, its text
    ``<tool_use_error>…``) is a failed call in the offline summary, not ``ok``."""
    from ctxmgmt.formats import internal

    messages = [{"role": "user", "content": "TASK: run the jobs"}]
    for k in range(3):
        use = {"type": "tool_use", "id": f"t{k}", "name": "Bash", "input": {"command": f"make job{k}"}}
        result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"job {k} done"}
        if k == 1:
            result |= {"content": "<tool_use_error>File does not exist.</tool_use_error>", "is_error": True}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    way = internal(Context(messages=messages, format="anthropic"))
    assert way is not None
    sections = digest(list(way.context.messages))
    assert "`make job1`" in "\n".join(sections["errors"])
    assert any("make job1" in item and "failed" in item for item in sections["specifics"])
    assert not any("make job0" in item and "failed" in item for item in sections["specifics"])


def test_a_summary_item_is_one_line_in_the_state_whatever_its_shape():
    """A summariser's items are one line where the state keeps them, a string, a list or an
    object of a custom field alike (json.dumps leaves U+2028, U+2029 and NEL as they are):
    what the state holds is what the message shows and reads back."""
    from ctxmgmt.summaries import merge, parse_rendered, render

    answer = {"goal": "fix\nit", "key_decisions": ["a\u2028b"], "layout": {"note": "x\u2029y\x85z"}}
    merged = merge(None, answer)
    items = [item for section in merged.values() for item in section]
    assert items and not any(len(item.splitlines()) > 1 for item in items), items
    back, _, _ = parse_rendered(render(merged, 3))
    assert back["goal"] == merged["goal"] and back["key_decisions"] == merged["key_decisions"]
