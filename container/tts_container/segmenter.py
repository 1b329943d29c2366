"""Split text (or a phoneme string) into the segments synthesized one after another.

The first segment is short: up to the first clause punctuation, at most ``first_words`` words, so
the first audio comes early; a text no longer than that is one segment (split, its parts would
each be spoken as an utterance of their own, longer than the text in one forward). Later
segments are sentences; a sentence longer than ``max_chars`` is cut at clause punctuation, else
between words. The same rules work on phoneme strings, which keep
spaces between words and the punctuation of the text.
"""

from __future__ import annotations

SENTENCE_END = ".!?…"
CLAUSE_END = ",;:—" + SENTENCE_END
CLOSERS = "\"')]}”’»"


def _ends_with(word: str, marks: str) -> bool:
    return word.rstrip(CLOSERS)[-1:] in tuple(marks)


def split_first(words: list[str], first_words: int) -> int:
    """How many of ``words`` the first segment takes."""
    limit = min(first_words, len(words))
    for index in range(limit):
        if _ends_with(words[index], CLAUSE_END):
            return index + 1
    return limit


def _sentences(text: str) -> list[str]:
    parts: list[str] = []
    for line in text.split("\n"):
        words = line.split()
        current: list[str] = []
        for word in words:
            current.append(word)
            if _ends_with(word, SENTENCE_END):
                parts.append(" ".join(current))
                current = []
        if current:
            parts.append(" ".join(current))
    return parts


def cut_long(sentence: str, max_chars: int) -> list[str]:
    """Pieces of ``sentence`` of at most ``max_chars`` characters, cut at clause marks if any."""
    pieces: list[str] = []
    words = sentence.split()
    current: list[str] = []
    length = 0
    last_clause_end = 0  # number of words in ``current`` up to the last clause mark
    for word in words:
        added = len(word) + (1 if current else 0)
        if current and length + added > max_chars:
            cut = last_clause_end or len(current)
            pieces.append(" ".join(current[:cut]))
            current = current[cut:]
            length = len(" ".join(current))
            last_clause_end = 0
            added = len(word) + (1 if current else 0)
        if len(word) > max_chars:  # one word longer than the limit: hard cut
            if current:
                pieces.append(" ".join(current))
                current, length = [], 0
            pieces.extend(word[i : i + max_chars] for i in range(0, len(word), max_chars))
            last_clause_end = 0
            continue
        current.append(word)
        length += added
        if _ends_with(word, CLAUSE_END):
            last_clause_end = len(current)
    if current:
        pieces.append(" ".join(current))
    return pieces


def split_segments(text: str, first_words: int = 6, max_chars: int = 400) -> list[str]:
    """The segments of ``text``: a short first one, then sentence-sized ones (none empty)."""
    if first_words < 1 or max_chars < 1:
        raise ValueError("first_words and max_chars must be >= 1")
    first_line, _, rest_lines = text.strip().partition("\n")
    words = first_line.split()
    if not words:
        return split_segments(rest_lines, first_words, max_chars) if rest_lines.strip() else []
    taken = len(words) if len(words) <= first_words else split_first(words, first_words)
    segments = cut_long(" ".join(words[:taken]), max_chars)
    remainder = " ".join(words[taken:]) + ("\n" + rest_lines if rest_lines else "")
    for sentence in _sentences(remainder):
        segments.extend(cut_long(sentence, max_chars))
    return [segment for segment in segments if segment.strip()]
