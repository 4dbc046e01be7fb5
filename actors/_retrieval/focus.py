"""What a recall query says about who and when: speaker focus and the time channel.

Pure functions over texts, used by the recall actor (``RecallSettings.speaker_weight``
and ``date_weight``). A conversation's turns are stored as ``"Name: text"`` (the form
:func:`protocol.compaction.contextual_entry` asks for) and ``Offload`` adds a
``"Date: ..."`` line to each; a question about a person is mostly answered by that
person's own turns, and a question that names a date by the turns said near it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable

import attrs

__all__ = [
    "DateMention",
    "entry_date",
    "named_speakers",
    "near",
    "query_dates",
    "speaker_of",
    "without_names",
]

# A speaker's name: one to three words, each starting with a capital, then ": ".
_NAME_WORD = r"[^\W\d_][\w'.-]*"
_SPEAKER = re.compile(rf"({_NAME_WORD}(?: {_NAME_WORD}){{0,2}}): ")
_MAX_NAME = 40
_WORD = re.compile(r"[^\W_]+")

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH = {name: number for number, name in enumerate(_MONTHS, start=1)}
_ORDINAL = r"(?:st|nd|rd|th)?"
_MONTH_DATE = re.compile(
    rf"\b(?:(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?)?({'|'.join(_MONTHS)})\b"
    rf"(?:\s+(\d{{1,2}}){_ORDINAL}\b)?,?(?:\s+(\d{{4}})\b)?",
    re.IGNORECASE,
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?!\d)")
_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
_DATE_LINE = re.compile(r"^Date: (.*)$", re.MULTILINE)


def speaker_of(text: str) -> str | None:
    """The ``"Name"`` of a text that starts ``"Name: "`` (each word capitalized, at
    most three words and 40 characters), else None."""
    # A name holds no colon, so it ends at the text's first one, within the first 41
    # characters: the answer depends on that head alone, and recall asks it of a few
    # hundred texts per query that share a few speakers.
    colon = text.find(":", 0, _MAX_NAME + 1)
    if colon < 0 or not text.startswith(" ", colon + 1):
        return None
    return _speaker_of_head(text[:colon])


@functools.lru_cache(maxsize=1024)
def _speaker_of_head(head: str) -> str | None:
    match = _SPEAKER.fullmatch(head + ": ")
    if match is None or len(match.group(1)) > _MAX_NAME:
        return None
    name = match.group(1)
    return name if all(word[0].isupper() for word in name.split(" ")) else None


def _name_words(name: str) -> list[str]:
    return [w for w in _WORD.findall(name) if len(w) > 1]


def named_speakers(query: str, speakers: Iterable[str | None]) -> frozenset[str]:
    """The speakers among ``speakers`` that ``query`` names (a word of the name, as
    written), when at least one speaker among them is not named; else none."""
    known = {s for s in speakers if s is not None}
    words = set(_WORD.findall(query))
    named = frozenset(s for s in known if any(w in words for w in _name_words(s)))
    return named if named and known - named else frozenset()


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` without the words of ``names`` (and their ``'s``); the query itself
    when nothing else would be left."""
    words = sorted({w for n in names for w in _name_words(n)}, key=len, reverse=True)
    if not words:
        return query
    pattern = r"\b(?:" + "|".join(re.escape(w) for w in words) + r")(?:['’]s)?\b"
    left = " ".join(re.sub(pattern, " ", query).split())
    return left if _WORD.search(left) else query


@attrs.frozen
class DateMention:
    """A date a query names: a year, a month, a day, or a combination."""

    year: int | None
    month: int | None
    day: int | None


def _mentions(text: str) -> list[DateMention]:
    found = []
    for match in _ISO_DATE.finditer(text):
        year, month, day = (int(g) for g in match.groups())
        found.append(DateMention(year, month, day))
    for match in _MONTH_DATE.finditer(text):
        day_text = match.group(1) or match.group(3)
        word, year_text = match.group(2), match.group(4)
        # "may" is a verb, and "May" at a sentence's start may be one too: May counts
        # only with a day or a year.
        if word.lower() == "may" and (word != "May" or not (day_text or year_text)):
            continue
        found.append(
            DateMention(
                int(year_text) if year_text else None,
                _MONTH[word.lower()],
                int(day_text) if day_text else None,
            )
        )
    for match in _YEAR.finditer(text):
        if all(m.year != int(match.group(1)) for m in found):
            found.append(DateMention(int(match.group(1)), None, None))
    return found


def query_dates(query: str) -> list[DateMention]:
    """The dates ``query`` names (see ``RecallSettings.date_weight``), in no promised
    order; a day that is no calendar date is left out."""
    return [m for m in _mentions(query) if _valid(m)]


def _valid(m: DateMention) -> bool:
    if m.year is not None and not dt.MINYEAR < m.year < dt.MAXYEAR:
        return False
    if m.month is not None and m.day is not None:
        try:
            dt.date(m.year or 2000, m.month, m.day)  # 2000: a leap year, 29 Feb exists
        except ValueError:
            return False
    return m.month is not None or m.year is not None


def entry_date(text: str) -> dt.date | None:
    """The day of an entry's first ``"Date: "`` line (as
    :func:`protocol.compaction.contextual_entry` writes it) that names a full date, else
    None."""
    line = _DATE_LINE.search(text)
    if line is None:
        return None
    found = line.group(1)
    # The lines Offload and the doors write are short; a long one (a user's own
    # "Date: " line) is parsed each time, so the cache never holds much text.
    return _cached_line_date(found) if len(found) <= 64 else _line_date(found)


def _line_date(line: str) -> dt.date | None:
    """The full date a ``"Date: "`` line names, else None."""
    for m in _mentions(line):
        if m.year is not None and m.month is not None and m.day is not None and _valid(m):
            return dt.date(m.year, m.month, m.day)
    return None


#: :func:`_line_date`, cached: a recall reads the lines of a few dozen entries, and one
#: session's entries share theirs.
_cached_line_date = functools.lru_cache(maxsize=4096)(_line_date)


def near(mention: DateMention, day: dt.date) -> bool:
    """Whether an entry said on ``day`` is near what ``mention`` names."""
    year, month = mention.year, mention.month
    if month is None:
        return day.year == year
    if year is None:
        # A month of any year, or the month after (what is said "last month").
        return (day.month - month) % 12 in (0, 1)
    start = dt.date(year, month, 1)
    if mention.day is not None:
        return abs((day - start.replace(day=mention.day)).days) <= 7
    after = dt.date(year + (month + 1) // 13, month % 12 + 1, 1)
    end = dt.date(after.year + (after.month + 1) // 13, after.month % 12 + 1, 1)
    return start - dt.timedelta(days=7) <= day < end
