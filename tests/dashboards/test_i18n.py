"""The interface's words: Chinese written as the catalog writes it, and each column label in one home
(pipelines/labels.py), which the dashboards read."""
from __future__ import annotations

import re

from dashboards.i18n import STRINGS
from pipelines.labels import COLUMN_LABELS

CJK = "\u3400-\u9fff\uf900-\ufaff"
# a Chinese character, spaces, a Latin letter; or a Latin word (p95, GPU), spaces, a Chinese character
SPACED = re.compile(rf"[{CJK}] +[A-Za-z]|(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9]* +[{CJK}]")


def test_chinese_has_no_space_next_to_latin_letters():
    spaced = {key: words["zh"] for key, words in [*STRINGS.items(), *COLUMN_LABELS.items()] if SPACED.search(words["zh"])}
    assert spaced == {}


def test_a_column_label_is_not_defined_again_in_the_interface_words():
    again = {key: words for key, words in STRINGS.items()
             if any(words["zh"] == label["zh"] and words["en"].lower() == label["en"].lower()
                    for label in COLUMN_LABELS.values())}
    assert again == {}
