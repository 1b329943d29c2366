"""What an answer's audio says, judged against the endpoint's own answers: pure, no I/O.

Word error rate compares a transcript with the text that was asked for, after both are reduced to
lower-case words (punctuation is how a text is written, not what it says).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def words(text: str) -> list[str]:
    """The words of a text: lower case, punctuation dropped, inner apostrophes kept (don't)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def word_edits(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference words): Levenshtein over words."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, start=1):
        current = [i]
        for j, hyp_word in enumerate(hyp, start=1):
            current.append(
                min(
                    previous[j] + 1,
                    current[j - 1] + 1,
                    previous[j - 1] + (ref_word != hyp_word),
                )
            )
        previous = current
    return previous[-1], len(ref)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Edits over the reference's words; a reference without words has 0 only for no words."""
    edits, count = word_edits(reference, hypothesis)
    if count == 0:
        return 0.0 if edits == 0 else float(edits)
    return edits / count


def corpus_word_error_rate(pairs: Iterable[tuple[str, str]]) -> float | None:
    """WER over many (reference, hypothesis) pairs: all edits over all reference words, so a long
    text weighs by its words, not as one answer; None when the references hold no words."""
    edits = count = 0
    for reference, hypothesis in pairs:
        e, n = word_edits(reference, hypothesis)
        edits += e
        count += n
    return edits / count if count else None
