"""The last \\boxed{...} of a completion: MATH's answer, and GSM8K's where a model boxes its answer
instead of writing "####" (randopt/data/gsm8k.py)."""
from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced; None when there
    is none, its brace does not follow it (whitespace apart), or it is not closed."""
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = start + len("\\boxed" if text.startswith("\\boxed", start) else "\\fbox")
    while brace < len(text) and text[brace].isspace():
        brace += 1
    if brace >= len(text) or text[brace] != "{":
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1:i].strip() or None
    return None
