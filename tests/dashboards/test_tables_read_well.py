"""Every page's tables and headline tiles read well, in English and Chinese (issue 33): headings are
labels (the catalog's, or the interface's words), never a raw column key; no cell reads "None", "nan",
"True" or "False"; every column the pages show has a label of its own (ui.UNLABELLED stays empty)."""
from __future__ import annotations

import re

import pytest

from dashboards import ui
from tests.dashboards.conftest import errors, labels, signed_in

PAGES = ["pool", "queues", "tenants", "idle", "jobs", "health", "capacity", "quality", "audit", "catalog"]
RAW_KEY = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")  # snake_case: a column's name, not a heading
PYTHON_WORDS = {"None", "nan", "NaN", "NaT", "True", "False", "<NA>"}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", PAGES)
def test_no_raw_key_and_no_python_value(dashboard_env, page, lang):
    ui.UNLABELLED.clear()
    at = signed_in("ops", page, lang=lang)
    assert errors(at) == []
    assert at.dataframe, f"{page}: no table drawn"
    for table in at.dataframe:
        headings = labels(table)
        assert set(table.value.columns) <= set(headings), f"{page}: a column without a heading"
        raw = {key: label for key, label in headings.items() if RAW_KEY.match(label)}
        assert raw == {}, f"{page} ({lang}): raw keys as headings"
        for column in table.value.columns:
            bad = {str(v) for v in table.value[column] if v is None or str(v) in PYTHON_WORDS}
            assert not bad, f"{page} ({lang}): {column} shows {bad}"
    for tile in at.metric:
        assert tile.value not in PYTHON_WORDS and not RAW_KEY.match(tile.label), (page, tile.label, tile.value)
    assert ui.UNLABELLED == set(), f"{page}: columns without a label in i18n.py or the catalog"
