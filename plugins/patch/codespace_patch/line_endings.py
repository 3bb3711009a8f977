"""A file as lines that each remember their terminator.

Codex 0.171.0 splits at ``\\r\\n``, a lone ``\\r`` and ``\\n`` (not at the other
characters Python's ``splitlines`` knows), keeps every untouched line's
terminator, and gives new lines the *preferred* ending: the first terminator in
the file, LF when there is none. After an update every line is terminated.
"""

from __future__ import annotations

from codespace.contract.records import Record


def _split_terminated(text: str) -> list[str]:
    """``re.split(r"(\r\n|\r|\n)", text)``: texts and terminators alternating. ``re`` loads
    here, for a file with CR endings: the helper seldom meets one, and ``re`` (with the
    ``enum`` it loads) cost it a tenth of the released binary's whole run."""
    import re

    return re.split(r"(\r\n|\r|\n)", text)


class Lines(Record):
    __slots__ = ("texts", "terms", "preferred", "terminated")
    texts: list[str]
    terms: list[str]  # "\n", "\r\n", "\r", or "" for an unterminated last line
    preferred: str
    terminated: bool  # known to hold no "" term (saves a scan of 20,000 strings)

    def __init__(self, texts: list[str], terms: list[str], preferred: str, terminated: bool = False) -> None:
        self.texts = texts
        self.terms = terms
        self.preferred = preferred
        self.terminated = terminated

    @classmethod
    def parse(cls, text: str) -> Lines:
        if "\r" not in text:
            # The common case, at C speed: LF only.
            texts = text.split("\n")
            last = texts.pop()
            terms = ["\n"] * len(texts)
            if last:
                texts.append(last)
                terms.append("")
            return cls(texts, terms, "\n", not last)
        parts = _split_terminated(text)
        texts = parts[0::2]
        terms = parts[1::2]
        terminated = not texts[-1]
        if terminated:
            texts.pop()
        else:
            terms.append("")
        return cls(texts, terms, terms[0] if terms and terms[0] else "\n", terminated)

    def __len__(self) -> int:
        return len(self.texts)

    def span(self, start: int, stop: int) -> str:
        """Lines ``start`` to ``stop``, each followed by LF (for a diff)."""
        return "\n".join(self.texts[start:stop]) + "\n" if start < stop else ""

    @property
    def ends_unterminated(self) -> bool:
        return bool(self.terms) and self.terms[-1] == ""

    def render(self) -> str:
        """The content, with every line terminated (unterminated ones take the preferred ending)."""
        texts, terms = self.texts, self.terms
        if not texts:
            return ""
        if not self.terminated and "" in terms:
            preferred = self.preferred
            terms = [e or preferred for e in terms]
        end = terms[0]
        if terms.count(end) == len(terms):
            return end.join(texts) + end
        return "".join([t + e for t, e in zip(texts, terms)])
