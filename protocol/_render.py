"""Recall rendering, injection and the request digest (design §5). Pure functions.

Two renderers:

- ``"plain"``: a marker line, ``Recalled memory: N item(s), best first``, then one
  ``N. [0.1234] projection`` line per hit. Whitespace runs in a projection (newlines
  included) collapse to one space, so every hit is exactly one line and a recalled turn
  cannot forge extra items or a second marker line.
- ``"xml"``: the ``<recalled_memory>`` block of the Nexus recall layer, byte for byte:
  the marker line, two intro lines, a blank line, then per hit an ``<item rank=".."
  similarity="0.842" source="..">`` line indented by two spaces, the hit's text on its
  own lines indented by four (every line of a multi-line text; CR and CRLF line breaks
  become LF), and ``</item>`` indented by two; the closing ``</recalled_memory>`` on its
  own line. Similarity has 3 decimals. Content and attributes are XML-escaped, so a
  recalled turn cannot close the block or inject tags. The block is always well-formed
  XML 1.0: each character XML 1.0 cannot hold, even as a character reference (the C0
  controls other than tab, newline and carriage return, a lone surrogate, U+FFFE and
  U+FFFF), is replaced by U+FFFD, the replacement character, so the model still sees
  that something stood there. Everything else is kept as it is.
"""

from __future__ import annotations

import enum
import hashlib
import re
from xml.sax.saxutils import escape, quoteattr

import msgspec

from ._chat import Text, UnifiedMessage, UnifiedRequest, projection
from ._checks import check_int
from ._errors import ConfigError
from ._json import canonical_json
from ._store import RetrievalReport

__all__ = [
    "RECALL_MARKER",
    "PLACEMENTS",
    "RENDERERS",
    "XML_RECALL_MARKER",
    "Injected",
    "RecallInjection",
    "digest_request",
    "inject",
    "is_recall_block",
    "render",
]

RECALL_MARKER = "Recalled memory:"
XML_RECALL_MARKER = "<recalled_memory>"
RENDERERS: dict[str, str] = {"plain": RECALL_MARKER, "xml": XML_RECALL_MARKER}
PLACEMENTS = ("before_user", "system_section")

XML_INTRO = (
    "These items were recalled from your vector memory based on the current user message.\n"
    "Use them if relevant; ignore them if not."
)

_WHITESPACE = re.compile(r"\s+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# The complement of XML 1.0's Char production (§2.2): #x9 | #xA | #xD | [#x20-#xD7FF] |
# [#xE000-#xFFFD] | [#x10000-#x10FFFF]. Lone surrogates fall outside it.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class RecallInjection(enum.Enum):
    """What :func:`inject` did to the request."""

    INSERTED = "inserted"
    """There was no recall block; one was added."""
    REPLACED = "replaced"
    """An old recall block was removed and the new one added."""
    REMOVED = "removed"
    """The report was empty and an old recall block was removed."""
    ABSENT = "absent"
    """The report was empty and there was no recall block."""


class Injected(msgspec.Struct, frozen=True, kw_only=True):
    """The new request and what :func:`inject` did."""

    request: UnifiedRequest
    outcome: RecallInjection


def _check_renderer(renderer: object) -> str:
    if not isinstance(renderer, str) or renderer not in RENDERERS:
        raise ConfigError(f"renderer is {renderer!r}; expected one of {list(RENDERERS)}")
    return renderer


def _check_report(report: object) -> RetrievalReport:
    if not isinstance(report, RetrievalReport):
        raise ConfigError(f"report is a {type(report).__name__}; expected RetrievalReport")
    return report


def _check_placement(placement: object) -> str:
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ConfigError(f"placement is {placement!r}; expected one of {list(PLACEMENTS)}")
    return placement


def _xml_chars(text: str) -> str:
    """``text`` with each character XML 1.0 forbids replaced by U+FFFD (module docstring)."""
    return _NOT_XML_CHAR.sub("\ufffd", text)


def _one_line(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def render(report: RetrievalReport, renderer: str = "plain") -> str | None:
    """Render a retrieval report as the text the model reads; None for an empty report.

    Raises:
        ConfigError: ``renderer`` is not ``"plain"`` or ``"xml"``, or ``report`` is not a
            ``RetrievalReport``.
    """
    renderer = _check_renderer(renderer)
    report = _check_report(report)
    if not report.turns:
        return None
    if renderer == "plain":
        lines = [f"{RECALL_MARKER} {len(report.turns)} item(s), best first"]
        for rank, hit in enumerate(report.turns, 1):
            lines.append(f"{rank}. [{hit.score:.4f}] {_one_line(projection(hit.message))}")
        return "\n".join(lines)
    lines = [XML_RECALL_MARKER, XML_INTRO, ""]
    for rank, hit in enumerate(report.turns, 1):
        lines.append(
            f'  <item rank="{rank}" similarity="{hit.score:.3f}" '
            f"source={quoteattr(_xml_chars(hit.source))}>"
        )
        text = escape(_xml_chars(projection(hit.message)))
        lines.extend(f"    {line}" for line in _LINE_BREAK.split(text))
        lines.append("  </item>")
    lines.append("</recalled_memory>")
    return "\n".join(lines)


def is_recall_block(message: UnifiedMessage, renderer: str = "plain") -> bool:
    """Whether ``message`` is a system message whose first text block starts with the
    renderer's marker."""
    if message.role != "system":
        return False
    marker = RENDERERS[_check_renderer(renderer)]
    first = next((b for b in message.content if isinstance(b, Text)), None)
    return first is not None and first.text.startswith(marker)


def inject(
    report: RetrievalReport,
    request: UnifiedRequest,
    renderer: str = "plain",
    placement: str = "before_user",
    section_priority: int | None = None,
) -> Injected:
    """Put the rendered recall into ``request``.

    Two placements:

    - ``"before_user"`` (the default): the block is a system message of its own, just
      before the most recent user message (appended when there is none). Everything
      before it is unchanged, so a server's cached prompt prefix stays valid.
    - ``"system_section"``: the block is a section of the first system message, as the
      Nexus recall layer places it. A *section* is one content block of that message
      (a ``Text`` block, in practice; the block is one ``Text`` of its own). The block
      goes at index ``section_priority`` among the sections once any old block is
      removed: 0 before every section, N after the first N, last when N is at least
      their number, and last when ``section_priority`` is None (the default). With no
      system message, one holding only the block is created at index 0.

    Any old recall block of that placement (a system message, or a text block of the
    first system message, whose text starts with the renderer's marker) is removed
    first, which makes ``inject`` idempotent; a system message left empty by that
    removal (one ``inject`` created) goes too. The caller's request and its message
    list are never changed: a new request is returned.

    Because the old block is removed before the new one is placed, re-injecting keeps
    the block at the same position (``REPLACED``).

    Raises:
        ConfigError: a bad ``renderer``, ``placement``, ``report`` or ``request``, or a
            ``section_priority`` that is not None or an int >= 0, or is given with
            ``placement="before_user"``.
    """
    renderer = _check_renderer(renderer)
    placement = _check_placement(placement)
    if section_priority is not None:
        section_priority = check_int("section_priority", section_priority, minimum=0)
        if placement != "system_section":
            raise ConfigError(
                f"section_priority is {section_priority} with placement={placement!r}; a "
                "section position needs placement='system_section'"
            )
    report = _check_report(report)
    if not isinstance(request, UnifiedRequest):
        raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
    text = render(report, renderer)
    if placement == "before_user":
        kept, had_old = _without_blocks(request.messages, renderer)
        if text is not None:
            last_user = next(
                (i for i in range(len(kept) - 1, -1, -1) if kept[i].role == "user"), None
            )
            block = UnifiedMessage.system(text)
            if last_user is None:
                kept.append(block)
            else:
                kept.insert(last_user, block)
    else:
        kept, had_old = _without_section(request.messages, renderer)
        if text is not None:
            first = next((i for i, m in enumerate(kept) if m.role == "system"), None)
            if first is None:
                kept.insert(0, UnifiedMessage.system(text))
            else:
                system = kept[first]
                content = list(system.content)
                at = len(content) if section_priority is None else section_priority
                content.insert(min(at, len(content)), Text(text=text))
                kept[first] = msgspec.structs.replace(system, content=content)
    if text is None:
        outcome = RecallInjection.REMOVED if had_old else RecallInjection.ABSENT
    else:
        outcome = RecallInjection.REPLACED if had_old else RecallInjection.INSERTED
    return Injected(request=msgspec.structs.replace(request, messages=kept), outcome=outcome)


def _without_blocks(
    messages: list[UnifiedMessage], renderer: str
) -> tuple[list[UnifiedMessage], bool]:
    """``messages`` without their recall-block system messages, and whether any went."""
    kept = [m for m in messages if not is_recall_block(m, renderer)]
    return kept, len(kept) != len(messages)


def _without_section(
    messages: list[UnifiedMessage], renderer: str
) -> tuple[list[UnifiedMessage], bool]:
    """``messages`` with the recall section taken out of the first system message (and
    that message dropped if nothing else is left in it), and whether one was there."""
    kept = list(messages)
    first = next((i for i, m in enumerate(kept) if m.role == "system"), None)
    if first is None:
        return kept, False
    marker = RENDERERS[renderer]
    system = kept[first]
    content = [
        b for b in system.content if not (isinstance(b, Text) and b.text.startswith(marker))
    ]
    if len(content) == len(system.content):
        return kept, False
    if content:
        kept[first] = msgspec.structs.replace(system, content=content)
    else:
        del kept[first]
    return kept, True


def digest_request(request: UnifiedRequest) -> str:
    """The sha256 hex digest of the canonical encoding of the request's message list.

    Canonical means msgspec JSON with sorted object keys, so two equal requests built in
    different orders (tool arguments, ``extra``) give one digest; a message list holding
    a lone surrogate is hashed as escaped ASCII JSON (see
    :func:`protocol._json.canonical_json`). Only the messages count (not
    the model or the generation settings), because the digest stands for the prompt
    prefix a server can cache: an injected recall changes it, the temperature does not.

    Raises:
        ConfigError: ``request`` is not a ``UnifiedRequest``.
    """
    if not isinstance(request, UnifiedRequest):
        raise ConfigError(f"request is a {type(request).__name__}; expected UnifiedRequest")
    return hashlib.sha256(canonical_json(request.messages)).hexdigest()
