"""The scripted user model (tau-style): holds the folio, reveals it only when asked, never invents.

Rules, after tau-bench's user simulator: answer only what the agent asks about; reveal one topic at a time;
never state a charge that is not on the folio; output `###STOP###` alone once the agent reports that the
itemization is complete. The LLM user model (same rules, as a prompt) comes with the real backends.
"""

from __future__ import annotations

import re
from typing import Any

from harness.backends.base import EmptyReply, aux_reply
from harness.envs.base import STOP
from harness.envs.expense.tasks import folio_of
from harness.types import Completion, FolioLine, Message, Task, Usage

LODGING = ("Room rate", "Room tax")
COMPLETION = re.compile(r"itemi[sz]ation (is |has been )?(now )?(complete|done|finished)|(?<!not )fully itemi[sz]ed|"
                        r"remaining\W*((balance|amount)\W*)?(is |of |now |at )*\$?0(\.00)?(?!\.?\d)", re.I)
# what takes a completion back in its sentence ("... is 0.00, but I still need the parking charges"); a polite "but
# let me know if you need anything else" does not
NOT_DONE = re.compile(r"\bstill (need|have|to|missing)\b|\bnot yet\b|\byet to\b|\bexcept\b|n't fully\b|\bnot fully\b|"
                      r"\bnot (yet )?(complete|done|finished)\b", re.I)
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")
# a yes/no question about completion asks the user ("Can you confirm the itemization is complete?"); a stated one
# with a question after it does not ("Itemization complete - anything else?")
ASKS = re.compile(r"\s*(is|are|was|can|could|would|will|shall|should|do|does|did|has|have|may|might)\b", re.I)
REQUEST = re.compile(r"\s*(please|could you|can you|would you|list|share|tell|give|send|provide|show|what|which)\b",
                     re.I)
ASKS_LODGING = re.compile(r"\b(room|lodging|nightly|night|tax(es)?)\b", re.I)
ASKS_OTHER = re.compile(r"\b(other|additional|extra|meals?|restaurant|parking|laundry|incidentals?)\b", re.I)
ASKS_FOLIO = re.compile(r"\b(folio|charges?|bill|receipt|invoice|statement)\b", re.I)  # the whole folio


def describe(line: FolioLine) -> str:
    """The one wording of a folio charge the user model uses."""
    return f"- {line.subcategory}, starting {line.date}: {line.quantity} x {line.daily_rate} = {line.amount}"


def reports_completion(agent_text: str) -> bool:
    """The agent states that the itemization is complete: in a sentence that is no yes/no question ("can you confirm
    the itemization is complete?" asks the user) and takes nothing back ("but I still need the parking charges")."""
    return any(COMPLETION.search(s) and not (s.rstrip().endswith("?") and ASKS.match(s)) and not NOT_DONE.search(s)
               for s in SENTENCE.split(agent_text))


def _asked(sentence: str) -> bool:
    """A question or a request ("Please list ...", "Share ..."), not a statement ("I have entered all the charges
    from your folio")."""
    return sentence.rstrip().endswith("?") or REQUEST.match(sentence) is not None


class ScriptedUser:
    def __init__(self, task: Task) -> None:
        self.folio: list[FolioLine] = folio_of(task)

    def respond(self, agent_text: str) -> str:
        if reports_completion(agent_text):
            return STOP
        parts = []
        lodging, other = ASKS_LODGING.search(agent_text), ASKS_OTHER.search(agent_text)
        if not (lodging or other) and any(ASKS_FOLIO.search(s) and _asked(s) for s in SENTENCE.split(agent_text)):
            lodging = other = True  # type: ignore[assignment]  # "please list the charges on your folio"
        if lodging:
            parts.append(self._reveal([f for f in self.folio if f.subcategory in LODGING], "lodging"))
        if other:
            parts.append(self._reveal([f for f in self.folio if f.subcategory not in LODGING], "other"))
        if not parts:
            return "I'm not sure what you need from me. I have the hotel folio if you need any of its charges."
        return "\n".join(parts)

    @staticmethod
    def _reveal(lines: list[FolioLine], topic: str) -> str:
        if not lines:
            return ("There were no other charges on the folio." if topic == "other"
                    else "The folio shows no separate room charges.")
        head = "Room charges on the folio:" if topic == "lodging" else "Other charges on the folio:"
        return "\n".join([head, *map(describe, lines)])


LLM_USER_PROMPT = """You are a user interacting with an agent that is itemizing a hotel expense for you in \
Microsoft Dynamics 365.

Instruction: {instruction}

Rules:
- Just generate one line at a time to simulate the user's message.
- Reveal the folio details gradually and only when the agent asks for them: give only the charges asked about.
- Never invent information that is not on the folio below. If asked for something not on it, say you don't have it.
- Do not repeat the instruction verbatim; use your own words.
- When the agent reports that the itemization is complete, output only ###STOP### and nothing else.

Your hotel folio (every charge, exact amounts):
{folio}"""


class LLMUser:
    """The tau-style user model played by a language model (the paper: GPT-4.1), through any backend.

    It keeps its own side of the conversation (its replies as assistant turns, the agent's as user turns);
    its token usage is accumulated in `usage` and reported apart from the agent's."""

    def __init__(self, task: Task, backend: Any) -> None:
        self.backend = backend
        folio = "\n".join(describe(f) for f in folio_of(task))
        system = LLM_USER_PROMPT.format(instruction=task.instruction, folio=folio)
        self.messages = [Message("system", system), Message("assistant", task.instruction)]
        self.usage = Usage()
        self.cost_usd = 0.0
        self.modeled_time_s = 0.0  # its calls' time: part of the episode's (the paper's hours include the user's)

    def respond(self, agent_text: str) -> str:
        self.messages.append(Message("user", agent_text))
        try:
            completion = aux_reply(self.backend, self.messages, "the user model")
        except EmptyReply as exc:  # its paid attempts stay in the episode's user columns
            self._spent(exc.completion)
            raise
        self._spent(completion)
        reply = completion.message.content.strip()
        self.messages.append(Message("assistant", reply))
        return STOP if STOP in reply else reply

    def _spent(self, completion: Completion) -> None:
        self.usage = self.usage + completion.usage
        self.cost_usd += completion.cost_usd
        self.modeled_time_s += completion.modeled_time_s
