from pathlib import Path

import pytest

import ctxmgmt
from ctxmgmt import DefinitionError, check_definition, load_definition

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "definitions").glob("*.yaml"))


def minimal(**changes):
    doc = {"name": "ok", "hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}
    doc.update(changes)
    return doc


def problems(doc):
    return {(p.pointer, p.message) for p in check_definition(doc)}


def pointers(doc):
    return {p.pointer for p in check_definition(doc) if p.severity == "error"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_definitions_are_valid(path):
    """Every file in definitions/ validates and loads, and its name matches the file."""
    assert check_definition(path) == []
    assert load_definition(path).name == path.stem


def test_the_four_opensearch_examples_are_shipped():
    """The OpenSearch documentation's four examples and a default are in definitions/."""
    names = {p.stem for p in SHIPPED}
    assert {
        "token-aware-truncation",
        "long-conversation",
        "tool-heavy",
        "multi-tool-summarization",
        "default",
    } <= names


def test_hook_names_are_case_insensitive_and_normalised():
    """PRE_LLM is pre_llm."""
    d = load_definition(minimal(hooks={"PRE_LLM": [{"type": "SlidingWindowManager"}]}))
    assert [h.value for h in d.hooks] == ["pre_llm"]
    assert d.to_dict()["hooks"].keys() == {"pre_llm"}


def test_same_hook_in_two_cases_is_an_error():
    """pre_llm and PRE_LLM in one definition is an error that says to merge them."""
    doc = minimal(
        hooks={"pre_llm": [{"type": "SlidingWindowManager"}], "PRE_LLM": [{"type": "SlidingWindowManager"}]}
    )
    [(pointer, message)] = problems(doc)
    assert pointer == "/hooks/PRE_LLM" and "merge" in message


@pytest.mark.parametrize("name", ["Upper", "a b", "x" * 50, "", "ok\n", "ünï"])
def test_bad_names_are_rejected(name):
    """Names must match ^[a-z0-9_-]{1,49}$ in full; a trailing newline fails."""
    assert "/name" in pointers(minimal(name=name))


def test_reserved_names_are_rejected():
    """Names starting with _ are reserved for API verbs."""
    [(pointer, message)] = problems(minimal(name="_simulate"))
    assert pointer == "/name" and "reserved" in message


@pytest.mark.parametrize(
    ("doc", "pointer"),
    [
        (minimal(hooks={}), "/hooks"),
        ({"name": "x"}, "/hooks"),
        (minimal(hooks={"pre_llm": []}), "/hooks/pre_llm"),
        (minimal(hooks={"pre_lm": [{"type": "SlidingWindowManager"}]}), "/hooks/pre_lm"),
        (minimal(hooks={"pre_llm": [{"type": "Nope"}]}), "/hooks/pre_llm/0/type"),
        (
            minimal(hooks={"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_message": 3}}]}),
            "/hooks/pre_llm/0/config/max_message",
        ),
        (
            minimal(hooks={"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 0}}]}),
            "/hooks/pre_llm/0/config/max_messages",
        ),
        (
            minimal(hooks={"pre_llm": [{"type": "SummarizationManager", "config": {"summary_ratio": 0.9}}]}),
            "/hooks/pre_llm/0/config/summary_ratio",
        ),
        (
            minimal(
                hooks={
                    "pre_llm": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 10}}]
                }
            ),
            "/hooks/pre_llm/0/config/max_output_length",
        ),
        (
            minimal(hooks={"pre_llm": [{"type": "SlidingWindowManager", "activation": {"tokens_exced": 5}}]}),
            "/hooks/pre_llm/0/activation/tokens_exced",
        ),
        (
            minimal(
                hooks={"pre_llm": [{"type": "SlidingWindowManager", "activation": {"tokens_exceed": -1}}]}
            ),
            "/hooks/pre_llm/0/activation/tokens_exceed",
        ),
        (
            minimal(
                hooks={
                    "pre_llm": [{"type": "SlidingWindowManager", "activation": {"tokens_ratio_exceed": 1.5}}]
                }
            ),
            "/hooks/pre_llm/0/activation/tokens_ratio_exceed",
        ),
        (
            minimal(
                hooks={"pre_llm": [{"type": "SlidingWindowManager", "activation": {"any_of": [{"x": 1}]}}]}
            ),
            "/hooks/pre_llm/0/activation/any_of/0/x",
        ),
        (
            minimal(hooks={"pre_llm": [{"type": "SlidingWindowManager", "on_error": "ignore"}]}),
            "/hooks/pre_llm/0/on_error",
        ),
        (minimal(settings={"tokenizer": "Bad Name"}), "/settings/tokenizer"),
        (minimal(extra=1), "/extra"),
        (
            minimal(
                hooks={
                    "PRE_LLM": [
                        {
                            "type": "ToolsOutputTruncateManager",
                            "config": {"offload": True, "max_output_length": 255},
                        }
                    ]
                }
            ),
            "/hooks/PRE_LLM/0/config/max_output_length",  # a rule of the manager's own schema (if/then)
        ),
    ],
)
def test_mistakes_are_errors_at_their_pointer(doc, pointer):
    """Each kind of mistake OpenSearch ignores is an error located by its JSON pointer."""
    assert pointer in pointers(doc)


def test_every_error_is_reported_at_once():
    """Several mistakes give several errors, not just the first."""
    doc = {
        "name": "Bad",
        "hooks": {
            "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 0, "pin": "all"}}],
            "post_tool": [{"type": "Unknown"}],
        },
    }
    assert pointers(doc) == {
        "/name",
        "/hooks/pre_llm/0/config/max_messages",
        "/hooks/pre_llm/0/config/pin",
        "/hooks/post_tool/0/type",
    }


def test_errors_give_hints():
    """Typos get a did-you-mean; ranges say the bound."""
    found = problems(
        minimal(hooks={"pre_llm": [{"type": "SlidingWindowManagr", "config": {"max_messages": 0}}]})
    )
    messages = " | ".join(m for _, m in found)
    assert "did you mean 'SlidingWindowManager'" in messages
    found = problems(
        minimal(hooks={"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 0}}]})
    )
    assert ("/hooks/pre_llm/0/config/max_messages", "must be >= 1 (got 0)") in found


def test_activation_may_sit_in_config_and_top_level_wins():
    """OpenSearch's config.activation works; a top-level activation takes precedence."""
    d = load_definition(
        minimal(
            hooks={
                "pre_llm": [
                    {
                        "type": "SlidingWindowManager",
                        "config": {"activation": {"tokens_exceed": 5}},
                        "activation": {"message_count_exceed": 7},
                    }
                ]
            }
        )
    )
    spec = d.hooks[ctxmgmt.Hook.PRE_LLM][0]
    assert spec.activation.rules == (("message_count_exceed", 7),)
    assert "activation" not in spec.config


def test_invalid_activation_in_config_is_an_error_even_when_overridden():
    """A bad config.activation is an error although a top-level one would win."""
    doc = minimal(
        hooks={
            "pre_llm": [
                {
                    "type": "SlidingWindowManager",
                    "config": {"activation": {"tokens_exceed": "many"}},
                    "activation": {"always": True},
                }
            ]
        }
    )
    assert pointers(doc) == {"/hooks/pre_llm/0/config/activation/tokens_exceed"}


def test_yaml_errors_have_line_numbers(tmp_path):
    """Problems in a YAML file carry the line of the offending key."""
    path = tmp_path / "d.yaml"
    path.write_text(
        "name: ok\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n"
        "      config:\n        max_messages: -3\n"
    )
    [problem] = check_definition(path)
    assert (problem.line, problem.pointer, problem.source) == (
        6,
        "/hooks/pre_llm/0/config/max_messages",
        str(path),
    )
    assert str(problem).startswith(f"{path}:6: /hooks/pre_llm/0/config/max_messages: must be >= 1")


def test_missing_key_points_at_its_parent_line(tmp_path):
    """A missing required key is located at the line of its parent."""
    path = tmp_path / "d.yaml"
    path.write_text("name: ok\nhooks:\n  pre_llm:\n    - config: {}\n")
    [problem] = check_definition(path)
    assert problem.pointer == "/hooks/pre_llm/0/type" and problem.line == 4


def test_yaml_syntax_errors_and_duplicate_keys(tmp_path):
    """Broken YAML is one problem with its line; duplicate keys are errors too."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: ok\nhooks: [\n")
    [problem] = check_definition(bad)
    assert "YAML syntax error" in problem.message and problem.line is not None
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: ok\nname: again\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n")
    [problem] = check_definition(dup)
    assert problem.line == 2 and "duplicate key" in problem.message


def test_load_definition_raises_with_every_problem():
    """load_definition raises DefinitionError listing all problems."""
    with pytest.raises(DefinitionError) as info:
        load_definition({"name": "X", "hooks": {}})
    assert {p.pointer for p in info.value.problems} == {"/name", "/hooks"}
    assert "invalid definition: 2 problems" in str(info.value)


def test_unknown_model_id_is_a_warning():
    """A summarization_model_id missing from the models configuration is a warning."""
    doc = minimal(
        hooks={"pre_llm": [{"type": "SummarizationManager", "config": {"summarization_model_id": "big"}}]}
    )
    [warning] = check_definition(doc, model_ids=["small"])
    assert warning.severity == "warning" and "big" in warning.message


def test_schemas_are_valid_draft_2020_12():
    """Every file in schemas/ is a valid Draft 2020-12 schema."""
    import json

    from jsonschema import Draft202012Validator

    for path in (ROOT / "schemas").rglob("*.json"):
        Draft202012Validator.check_schema(json.loads(path.read_text()))
