"""A LangChain v1 agent whose context ctxmgmt manages (pip install 'ctxmgmt[langchain]').

Runs offline with LangChain's own fake chat model, which calls a log-reading tool three
times and answers. For a real model, replace ``model`` with, say,
``init_chat_model("openai:gpt-4.1")`` and drop ``FakeModel``.
"""

import logging

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxmgmt.adapters.langchain import ContextManagementMiddleware


class FakeModel(GenericFakeChatModel):
    """LangChain's fake model, with tools bound (it ignores them) and what it saw printed."""

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        sizes = [f"{m.type}:{len(str(m.content))}" for m in messages]
        print(f"model call sees {len(messages)} messages: {', '.join(sizes)}")
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@tool
def read_log(name: str) -> str:
    """Read a log file."""
    return f"== {name} ==\n" + "2026-11-24 ERROR connection refused (db:5432)\n" * 2000


calls = [
    AIMessage(
        content="", tool_calls=[{"name": "read_log", "args": {"name": f"app-{k}.log"}, "id": f"call_{k}"}]
    )
    for k in range(3)
]
model = FakeModel(messages=iter([*calls, AIMessage(content="The database refuses connections.")]))

# Cut tool outputs to 2,000 characters as they arrive; summarise all but the newest past 5 messages.
definition = {
    "name": "langchain-demo",
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 2000}}],
        "pre_llm": [
            {
                "type": "SummarizationManager",
                "config": {"preserve_recent_messages": 2},
                "activation": {"message_count_exceed": 5},
            }
        ],
    },
}
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
agent = create_agent(
    model,
    [read_log],
    system_prompt="You find why services fail.",
    middleware=[ContextManagementMiddleware(definition, context_window=128_000)],
    checkpointer=InMemorySaver(),
)
config = {"configurable": {"thread_id": "demo"}}
result = agent.invoke({"messages": [{"role": "user", "content": "Why does checkout fail?"}]}, config)
print("answer:", result["messages"][-1].content)
state = agent.get_state(config).values
view = state["ctxmgmt"]["view"]
print(f"record: {len(state['messages'])} messages, view kept in state['ctxmgmt']: {len(view)}")
