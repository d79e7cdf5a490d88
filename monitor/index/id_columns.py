"""Event ids as output: an id map's slots as a column without a Python object per id, and the
ids' stable hashes (what ``match_id`` hashes), from the stored values and bytes.

A column is ``int64`` when every id is an integer, fixed-width ASCII bytes when every id is a
string JSON writes as it is (the common ``tx-91``), else :meth:`IdMap.decode`'s ``object``
array. A hash is an integer's ``mix(value ^ INT_ID_TAG)`` or a string's
:func:`~monitor.index.texts.hash_rows` of its UTF-8 bytes ``^ STR_ID_TAG``, the same as
``match_id`` computes for the decoded id. An epoch's matched events need both:
:func:`column_and_hashes` formats numbered string ids into rows once for the two.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.index.hashtable import U64, mix
from monitor.index.idmap import INT_ID_TAG, STR_ID_TAG, IdMap
from monitor.index.levels import I64
from monitor.index.texts import U8, hash_rows, plain_ascii


def column(ids: IdMap, slots: npt.NDArray[np.integer]) -> npt.NDArray[np.generic]:
    """The external ids of ``slots`` as an output column (:mod:`core.columns`)."""
    strings = ids.strings_at(slots)
    if not strings.any() or not strings.all():
        return ids.decode(slots)
    return _text_column(ids, slots, *ids.string_rows(slots))


def id_hashes(ids: IdMap, slots: npt.NDArray[np.integer]) -> U64:
    """The stable hash of each slot's external id."""
    out = np.empty(slots.shape[0], np.uint64)
    strings = ids.strings_at(slots)
    if not strings.all():
        out[~strings] = mix(ids.int_values(slots[~strings]).view(np.uint64) ^ INT_ID_TAG)
    if strings.any():
        out[strings] = hash_rows(*ids.string_rows(slots[strings])) ^ STR_ID_TAG
    return out


def column_and_hashes(
    ids: IdMap, slots: npt.NDArray[np.integer]
) -> tuple[npt.NDArray[np.generic], U64]:
    """:func:`column` and :func:`id_hashes` of the same slots, string ids formatted once."""
    strings = ids.strings_at(slots)
    if not strings.all() or not strings.any():
        return column(ids, slots), id_hashes(ids, slots)
    rows, lengths = ids.string_rows(slots)
    return _text_column(ids, slots, rows, lengths), hash_rows(rows, lengths) ^ STR_ID_TAG


def _text_column(
    ids: IdMap, slots: npt.NDArray[np.integer], rows: U8, lengths: I64
) -> npt.NDArray[np.generic]:
    """String ids from their padded rows: the rows' bytes when JSON writes them as they are."""
    if not plain_ascii(rows, lengths):
        return ids.decode(slots)
    return rows.view(f"S{rows.shape[1]}").reshape(-1)
