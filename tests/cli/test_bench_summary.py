"""The benches' one summary helper and one table printer (engine.bench.summary)."""

from __future__ import annotations

from engine.bench.summary import cell, markdown_table, median, quantile


def test_quantile_is_the_nearest_rank_of_the_sorted_values():
    assert quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.9) == 5.0
    assert quantile([0.123456], 0.9) == 0.123 and quantile([0.123456], 0.9, digits=None) == 0.123456
    assert quantile([], 0.5) is None


def test_median_rounds_only_when_asked_and_is_none_for_nothing():
    assert median([1.0, 2.0]) == 1.5 and median(x for x in [3.0, 1.0, 2.0]) == 2.0
    assert median([1.23456, 2.0], 2) == 1.62
    assert median([]) is None


def test_a_table_has_its_header_rule_and_rows():
    table = markdown_table(("a", "b"), [(1, ""), ("x", None)])
    assert table == "| a | b |\n| --- | --- |\n| 1 | |\n| x | None |"
    assert cell(None) == "-" and cell(None, blank="") == "" and cell(0.5, ".1%") == "50.0%"
