"""Provider-compatible endpoints: any agent, unchanged, gets its context managed.

``ctxmgmt serve`` answers as the providers do under ``/proxy/{definition}/``: OpenAI Chat
Completions (``/v1/chat/completions``), OpenAI Responses (``/v1/responses``) and Anthropic
Messages (``/v1/messages``), streamed or not. A client points its base URL at
``http://HOST:8000/proxy/default/v1`` (OpenAI SDK) or ``http://HOST:8000/proxy/default``
(Anthropic SDK) and changes nothing else. Each request's conversation goes through the
definition's hooks (``post_tool`` for the tool results new since the conversation's last
request, then ``pre_llm``) at the model's window, with the conversation's managed state kept
in the store between requests; the managed request goes to the model's upstream and its
answer comes back as it came (a success that is no JSON object is a 502). ``GET
.../v1/models`` lists the configured models in the client's provider's shape (see
:mod:`ctxmgmt.api.proxy.models`); ``POST .../v1/messages/count_tokens``, ``.../v1/responses/input_tokens``
and ``.../v1/responses/compact`` go to the upstream as they are, and so does what OpenAI keeps by
id (a stored response, a conversation, a stored chat completion: :mod:`ctxmgmt.api.proxy.forward`).
"""

from __future__ import annotations

from .apis import APIS, Api
from .forward import MODEL_HEADER, compact, count_tokens, input_tokens, kept
from .handler import DEFINITION_HEADER, SESSION_HEADER, proxy_request
from .models import base, model, models
from .routes import chat, messages, responses

__all__ = [
    "APIS",
    "DEFINITION_HEADER",
    "MODEL_HEADER",
    "SESSION_HEADER",
    "Api",
    "base",
    "chat",
    "compact",
    "count_tokens",
    "input_tokens",
    "kept",
    "messages",
    "model",
    "models",
    "proxy_request",
    "responses",
]
