"""Drafts from the population's own answers (engine.speculation: population; docs/gpu.md).

Every member of a population is the same model moved by sigma*R, and every member answers the same
prompts, so the answers that earlier members gave to a prompt are good guesses of what the next
member will write. This module is the guessing, with no engine in it: the vLLM proposer
(randopt/engines/vllm_population_proposer.py) feeds it each request's tokens and asks for drafts.
Verification is the engine's: a draft token is kept only where it equals the member's own argmax,
so drafts change how fast an answer comes, never which answer (up to the kernels' near-ties).

Per prompt (its token ids), the store keeps the distinct earlier answers with how many members gave
each, up to max_answers of them (the most given win). A request in flight follows *cursors*:
positions in earlier answers that agree with what it has written so far. A new request starts with a
cursor at the beginning of every stored answer. Each step, the tokens the engine accepted advance the
cursors that agree and drop the others; when none is left, the last `anchor` tokens written are looked
up in the prompt's n-gram index, so that an answer which diverged and came back (a rephrased clause,
then the same arithmetic) is followed again. The draft walks the cursors' answers token by token,
taking at each position the token the most members wrote next (ties: the earlier-stored answer), and
keeps only the cursors that agree, until `k` tokens or no cursor has a next token.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class _Prompt:
    answers: list[tuple[int, ...]] = field(default_factory=list)   # distinct answers, in store order
    counts: Counter = field(default_factory=Counter)               # answer -> members that gave it
    index: dict = field(default_factory=dict)                      # n-gram -> [(answer no., position after it)]


@dataclass
class _Request:
    prompt_ids: tuple[int, ...]
    prompt: _Prompt | None                                         # None: no member answered it yet
    written: list[int] = field(default_factory=list)
    cursors: list[tuple[int, int]] = field(default_factory=list)   # (answer no., next position)
    drafted: int = 0                                               # draft tokens proposed at the last step


class PopulationDrafts:
    """Earlier answers per prompt, and the drafts they give a request in flight."""

    def __init__(self, k: int, *, anchor: int = 4, max_answers: int = 16):
        if k < 1:
            raise ValueError(f"draft tokens must be >= 1, got {k}")
        self.k, self.anchor, self.max_answers = int(k), int(anchor), int(max_answers)
        self._prompts: dict[tuple[int, ...], _Prompt] = {}
        self._requests: dict[str, _Request] = {}
        # what the drafts did, for the benchmark: proposed and accepted tokens, and steps drafted
        self.stats = Counter()

    # -- the store ---------------------------------------------------------------------------------
    def add_answer(self, prompt: tuple[int, ...], answer: tuple[int, ...]) -> None:
        """One member's answer (its generated token ids) to a prompt (its token ids)."""
        entry = self._prompts.setdefault(tuple(prompt), _Prompt())
        answer = tuple(answer)
        if not answer:
            return
        if answer not in entry.counts and len(entry.answers) >= self.max_answers:
            # full: a new answer replaces the least given one, unless that was given more than once
            weakest = min(entry.answers, key=lambda a: entry.counts[a])
            if entry.counts[weakest] > 1:
                return
            self._forget(entry, weakest)
        if answer not in entry.counts:
            entry.answers.append(answer)
            self._index(entry, len(entry.answers) - 1)
        entry.counts[answer] += 1

    def _index(self, entry: _Prompt, number: int) -> None:
        answer, n = entry.answers[number], self.anchor
        for end in range(n, len(answer) + 1):
            entry.index.setdefault(answer[end - n:end], []).append((number, end))

    def _forget(self, entry: _Prompt, answer: tuple[int, ...]) -> None:
        del entry.counts[answer]
        entry.answers.remove(answer)
        entry.index = {}
        for number in range(len(entry.answers)):
            self._index(entry, number)

    # -- requests in flight ------------------------------------------------------------------------
    def start(self, request_id: str, prompt: tuple[int, ...]) -> None:
        prompt = tuple(prompt)
        entry = self._prompts.get(prompt)
        self._requests[request_id] = _Request(prompt, entry,
                                              cursors=[(a, 0) for a in range(len(entry.answers))] if entry else [])

    def active(self) -> set[str]:
        return set(self._requests)

    def is_active(self, request_id: str) -> bool:
        return request_id in self._requests

    def finish(self, request_id: str) -> None:
        """The request is done: its answer joins the store for the members after it."""
        request = self._requests.pop(request_id)
        self.add_answer(request.prompt_ids, tuple(request.written))

    def advance(self, request_id: str, accepted: list[int]) -> None:
        """The tokens the engine accepted this step (the verified drafts and the one it sampled)."""
        request = self._requests[request_id]
        if request.drafted:
            self.stats["drafted_steps"] += 1
            self.stats["draft_tokens"] += request.drafted
            self.stats["accepted_tokens"] += min(len(accepted) - 1, request.drafted)
        request.drafted = 0
        request.written += accepted
        entry = request.prompt
        if entry is None:
            return
        kept = []
        for number, position in request.cursors:
            answer = entry.answers[number] if number < len(entry.answers) else ()
            end = position + len(accepted)
            if tuple(answer[position:end]) == tuple(accepted):
                kept.append((number, end))
        if not kept and len(request.written) >= self.anchor:
            kept = list(entry.index.get(tuple(request.written[-self.anchor:]), ()))
        request.cursors = kept

    def propose(self, request_id: str) -> list[int]:
        """Up to k draft tokens for the request's next positions ([] when no earlier answer agrees)."""
        request = self._requests[request_id]
        entry = request.prompt
        if entry is None or not request.cursors:
            return []
        cursors, draft = request.cursors, []
        while len(draft) < self.k:
            votes: Counter = Counter()
            first_seen: dict[int, int] = {}
            for number, position in cursors:
                # a cursor may name an answer the store has since dropped (full store): skip it
                answer = entry.answers[number] if number < len(entry.answers) else ()
                if position < len(answer):
                    token = answer[position]
                    votes[token] += entry.counts[answer]
                    first_seen.setdefault(token, number)
            if not votes:
                break
            token = max(votes, key=lambda t: (votes[t], -first_seen[t]))
            draft.append(token)
            cursors = [(n, p + 1) for n, p in cursors
                       if n < len(entry.answers) and p < len(entry.answers[n]) and entry.answers[n][p] == token]
        request.drafted = len(draft)
        return draft
