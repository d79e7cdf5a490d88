"""A JSON Lines file decoded a block at a time, as the file source reads it.

A block of whole lines is read by pyarrow's JSON reader (:mod:`connectors.json_arrow`) when
every line in it is an empty line or a valid record; otherwise its records (the lines that are
not blank or comments) go through the batch decoder (:mod:`connectors.json_batch`), which
writes a dead letter for each bad one. Either way the block gives what the per-line decoder
(:meth:`connectors.files.EdgeFileSource` with ``fast_path=False``) gives: the same updates and
events, numbered in line order, the same dead letters at ``path:line`` with the same reasons,
the same field kinds and arities learned, and in strict mode the same stop at the first bad
line, with everything before it decoded and nothing after it learned.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from connectors import json_scan
from connectors.arrow_records import DecodedRecords
from connectors.events import FieldTypes
from connectors.formats import is_comment
from connectors.json_arrow import decode_lines
from connectors.json_batch import decode_records
from connectors.streams import split_lines
from core.errors import InputError
from core.records import DeadLetter, UpdateBatch


@dataclass
class JsonBlock:
    """What one block decoded to: its updates (numbered from the caller's ``first_seq``), the
    lines it consumed (all of them, or up to and including a strict-mode failure), its dead
    letters in line order, and the strict-mode failure."""

    batch: UpdateBatch
    lines: int
    dead_letters: list[DeadLetter] = field(default_factory=list)
    failure: InputError | None = None


@dataclass
class JsonLines:
    """The file source's state for JSON Lines: where the input is, how records are read.

    ``arities`` maps each relation to its arity and where the input fixed it (``""``: known
    before reading); blocks update it, as they update ``events``' field kinds.
    """

    name: str
    default_relation: str
    events: FieldTypes | None
    strict: bool
    arities: dict[str, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        json_scan.warm()  # (the first block's decoding compiles or loads nothing)

    def decode(self, block: bytes, base_line: int, first_seq: int) -> JsonBlock:
        """The records of ``block`` (whole lines, ending with a line break), whose first line
        is line ``base_line + 1`` of the input and whose first update is ``first_seq``."""

        def positions(lines: Sequence[int]) -> list[str]:
            return [f"{self.name}:{base_line + line + 1}" for line in lines]

        known = {name: arity for name, (arity, _) in self.arities.items()}
        fast = decode_lines(block, self.default_relation, positions, self.events, known)
        if fast is not None:
            decoded, lines, count = fast
            for name, part in decoded.parts.items():
                if name not in self.arities:
                    self.arities[name] = (2, positions([int(lines[part.seq[0]])])[0])
            return JsonBlock(decoded.batch(first_seq), count)
        return self._slowly(split_lines(block), base_line, first_seq)

    def _slowly(self, lines: list[bytes], base_line: int, first_seq: int) -> JsonBlock:
        """The block's records through the batch decoder, with a dead letter per bad one."""
        at = [i for i, line in enumerate(lines) if not is_comment(line)]
        kinds = None if self.events is None else copy.deepcopy(self.events.types)
        arities = dict(self.arities)
        decoded = self._records(lines, at, base_line)
        if decoded.errors and self.strict:
            # Decode again up to the failure, from the state before the block: nothing after
            # the bad line may teach a kind or an arity (the bad line itself may, as a record
            # line by line does with the fields it has before the one that fails).
            row, message = decoded.errors[0]
            if self.events is not None and kinds is not None:
                _restore(self.events, kinds)
            self.arities.clear()
            self.arities.update(arities)
            decoded = self._records(lines, at[: row + 1], base_line)
            failure = InputError(message, position=f"{self.name}:{base_line + at[row] + 1}")
            return JsonBlock(decoded.batch(first_seq), at[row] + 1, [], failure)
        dead = [
            DeadLetter(f"{self.name}:{base_line + at[row] + 1}", message, lines[at[row]])
            for row, message in decoded.errors
        ]
        return JsonBlock(decoded.batch(first_seq), len(lines), dead)

    def _records(self, lines: list[bytes], at: list[int], base_line: int) -> DecodedRecords:
        """The records at lines ``at`` of the block, decoded as one batch."""
        origins = {name: where for name, (_, where) in self.arities.items()}
        known = {name: arity for name, (arity, _) in self.arities.items()}

        def positions(rows: Sequence[int]) -> list[str]:
            return [f"{self.name}:{base_line + at[row] + 1}" for row in rows]

        decoded = decode_records(
            [lines[i] for i in at],
            self.default_relation,
            positions,
            self.events,
            known,
            sys.maxsize,
            fast_path=False,
            origins=origins,
        )
        for name, arity in known.items():
            if name not in self.arities:
                self.arities[name] = (arity, origins.get(name, ""))
        return decoded


def _restore(events: FieldTypes, kinds: dict[str, dict[str, str]]) -> None:
    """Put ``events``' field kinds back to ``kinds``, in place (others hold the same dicts)."""
    for relation in list(events.types):
        if relation not in kinds:
            del events.types[relation]
    for relation, fields in kinds.items():
        mine = events.types.setdefault(relation, {})
        mine.clear()
        mine.update(fields)
