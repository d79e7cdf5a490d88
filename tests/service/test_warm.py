"""The first epoch compiles nothing: an :class:`EpochProcessor` loads every compiled kernel of
the events path (index, fields, ids, output) for the types it passes when it is made, so a
fresh container's first epoch does not stall for numba's compiler (or its disk cache)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from core.compiled import ENABLED

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from numba.core.registry import CPUDispatcher
    from bench.payments import QUERIES, batch, payments
    from monitor.query.parser import parse_queries
    from monitor.service.epochs import EpochProcessor
    from monitor.service.settings import Settings

    def signatures():
        out = {}
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] in ("monitor", "core", "connectors"):
                for attr, value in list(vars(module).items()):
                    if isinstance(value, CPUDispatcher):
                        out[name + "." + attr] = len(value.signatures)
        return out

    if sys.argv[1] == "big_ring":
        processor = EpochProcessor(parse_queries(QUERIES["big_ring"]), Settings(batch_size=1000))
        before = signatures()
        data = payments(4000, 300, seed=1, ring_every=40)
        processor.preload(batch(data, 0, 2000, np.empty(0, np.int64)))
        deletes = {lo: np.arange(lo - 1500, lo - 1450) for lo in (2000, 3000)}
        updates = [batch(data, lo, lo + 1000, gone) for lo, gone in deletes.items()]
    else:  # a range step over the time orders, with expiries and a compaction of the store
        from bench.timed_payments import QUERIES as TIMED
        from bench.timed_stream import batch as timed_batch, timed_payments
        settings = Settings(batch_size=1000, retention="transfer=1h", event_compaction_min=100)
        processor = EpochProcessor(parse_queries(TIMED["pass_through"]), settings)
        before = signatures()
        data = timed_payments(4000, 0.5, 300, seed=1)
        updates = [timed_batch(data, lo, lo + 1000) for lo in range(0, 4000, 1000)]
    deltas = 0
    for update in updates:
        deltas += processor.process(update).deltas
        processor.commit()
    after = signatures()
    changed = {k: [before.get(k, 0), v] for k, v in after.items() if v != before.get(k, 0)}
    print(json.dumps({"deltas": deltas, "compiled": changed, "kernels": len(after)}))
    """
)


@pytest.mark.skipif(not ENABLED, reason="numba is not in use (SGM_NUMBA=0 or not installed)")
@pytest.mark.parametrize("query", ["big_ring", "pass_through"])
def test_no_kernel_is_compiled_or_loaded_after_the_processor_is_made(query: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, query],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["deltas"] > 0, "the epochs matched nothing: the output path was not run"
    assert result["kernels"] >= 10, result
    assert result["compiled"] == {}, f"compiled in the first epochs, not when warmed: {result}"
