"""The conversation and the questions of the door check (``tests/test_doors.py`` for the
MCP server and the command line, ``tests/integrations/test_doors_adapters.py`` for
LangChain and LangGraph).

Caroline and Melanie talk over five sessions, each a conversation of its own and each
turn dated. Each question's evidence is a turn that recall finds only through one of
its channels, so a door that did not reach the tuned recall, or dropped the time or the
conversation on the way, fails the case:

- the speaker focus: "What does Melanie paint?" is answered by Melanie's one turn about
  her art, which does not say "paint", while Caroline says "paint" to Melanie twice and
  talks of her own painting three more times;
- the time channel: four of Caroline's turns are about concerts; only the date tells
  which one was in July 2023;
- a neighbour: the guinea pig's name is in the turn before the one that says "guinea
  pig", while other turns name other pets.

:func:`control` names the settings that turn the case's channel off: with them, the
library's recall must not find the evidence in the top :data:`TOP` (so the case depends
on its channel), and with the defaults it must.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import attrs

from protocol import RecallSettings

__all__ = ["CASES", "TOP", "TURNS", "Case", "Turn", "at", "place"]

#: Each door must return the evidence among its first TOP hits.
TOP = 3


@attrs.frozen
class Turn:
    conversation: str
    occurred_at: str  # ISO 8601, as the doors take it
    text: str


@attrs.frozen
class Case:
    """A question, a phrase of its evidence, and the channel that finds it (as
    ``ScoredDocument.channels`` names it, and the ``RecallSettings`` weight that
    turns it off)."""

    question: str
    evidence: str
    channel: str
    weight: str

    def control(self) -> RecallSettings:
        """Recall with this case's channel turned off."""
        return RecallSettings(**{self.weight: 0.0})


def _session(name: str, day: str, *texts: str) -> list[Turn]:
    return [Turn(name, f"{day}T{10 + i:02d}:00:00+00:00", text) for i, text in enumerate(texts)]


TURNS: list[Turn] = [
    *_session(
        "session-1",
        "2023-03-14",
        "Caroline: I went to a jazz concert downtown last night, the saxophonist was incredible.",
        "Melanie: Nice! Work has been busy, I barely have time for anything.",
        "Caroline: Painting landscapes is my favourite hobby, I did a watercolor of the hills.",
        "Caroline: Melanie, I painted a card for your birthday.",
        "Caroline: My rabbit is called Snowball, the name suits her.",
    ),
    *_session(
        "session-2",
        "2023-05-08",
        "Caroline: I painted a mural of sunflowers for the youth center.",
        "Caroline: Guess what, we finally adopted him last weekend, his name is Oscar.",
        "Melanie: That's wonderful, I hope the new guinea pig settles in well with your cats.",
    ),
    *_session(
        "session-3",
        "2023-07-20",
        "Caroline: Yesterday I heard a band play at the park, a really lovely evening.",
        "Caroline: Do you still make art?",
        "Melanie: Mostly portraits of my kids these days, it calms me down.",
        "Caroline: I love painting with acrylics on weekends.",
        "Caroline: My neighbour's hamster is called Peanut, what a name.",
        "Melanie: Ha, the kids want to name our next pet Pickles.",
    ),
    *_session(
        "session-4",
        "2023-09-02",
        "Caroline: The rock concert at the stadium was so loud, I lost my voice singing.",
        "Melanie: We took the kids camping in the mountains.",
        "Caroline: The new café downtown has such a funny name.",
        "Melanie: We named our goldfish Bubbles, the kids chose it.",
        "Caroline: Painting abstract pieces is how I relax after work.",
        "Caroline: I paint every morning before work, mostly flowers.",
    ),
    *_session(
        "session-5",
        "2023-12-10",
        "Caroline: I went to a classical concert at the opera house with my mom.",
        "Melanie: The kids loved the snow this week.",
        "Melanie: Our new kitten's name is Pepper.",
        "Caroline: Melanie, you should come paint with me at the studio sometime.",
    ),
]

CASES: list[Case] = [
    Case("What does Melanie paint?", "portraits of my kids", "speaker", "speaker_weight"),
    Case(
        "Which concert did Caroline go to in July 2023?",
        "band play at the park",
        "date",
        "date_weight",
    ),
    Case(
        "What is the name of the new guinea pig?",
        "his name is Oscar",
        "neighbor",
        "neighbor_weight",
    ),
]


def at(turn: Turn) -> dt.datetime:
    """A turn's time as the aware datetime the library takes."""
    return dt.datetime.fromisoformat(turn.occurred_at)


def place(texts: Iterable[str], evidence: str) -> int | None:
    """The 1-based place of the first text holding ``evidence``, or None."""
    return next((i for i, text in enumerate(texts, start=1) if evidence in text), None)
