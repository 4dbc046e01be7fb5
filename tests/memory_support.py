"""The conversation the memory tests turn over: a system prompt, two facts said and
acknowledged, and a question (the design's worked example, docs/pages/tutorials/trio-agent.md)."""

from __future__ import annotations

from protocol import UnifiedMessage, UnifiedRequest


def conversation(question: str) -> UnifiedRequest:
    return UnifiedRequest(
        model="m",
        messages=[
            UnifiedMessage.system("be brief"),
            UnifiedMessage.user("my cat is called Miso"),
            UnifiedMessage.assistant("noted, Miso"),
            UnifiedMessage.user("the key is under the blue pot"),
            UnifiedMessage.assistant("noted, the blue pot"),
            UnifiedMessage.user(question),
        ],
    )
