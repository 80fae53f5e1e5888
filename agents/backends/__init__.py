"""Model backends behind one interface, ``ChatModel``: litellm (hosted and OpenAI-compatible
endpoints) and transformers (local checkpoints). Heavy dependencies load lazily."""

from countgym.agents.backends.base import (
    BaseChatModel,
    ChatModel,
    Message,
    image_part,
    message,
    text_part,
)
from countgym.agents.backends.factory import make_backend

__all__ = [
    "BaseChatModel",
    "ChatModel",
    "Message",
    "image_part",
    "make_backend",
    "message",
    "text_part",
]
