"""The recall tuning harness (benchmarks/recall_tuning.py) against the store's scan it stands in for
(no store, no model)."""

from __future__ import annotations

import numpy as np


def test_the_tuning_harness_scans_every_column_the_store_scan_reads() -> None:
    # The harness ranks in process what the store's scan would hand recall: a column the scan reads
    # and the harness lacks would stop every tuning run. Imported here: as a script it sets up its
    # path and environment when imported, which collecting the other tests should not do.
    from benchmarks.recall_tuning import scan_table
    from storage.recall_scan import SCAN_COLUMNS

    table = scan_table([], np.zeros((0, 384), dtype=np.float32), np.zeros(0, dtype=np.float32))
    assert set(SCAN_COLUMNS) <= set(table.column_names)
