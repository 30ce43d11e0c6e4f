"""README's "Start here" table: the files a newcomer reads for one step, each with its line count, kept
true as the code changes (a count off by more than 10% or 15 lines fails, naming the file and its size)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reading_order() -> list[tuple[int, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Start here", 1)[1].split("\n## ", 1)[0]
    return [(int(n), path) for n, path in re.findall(r"^\| (\d+) \| `([^`]+)` \|", section, re.M)]


def test_the_reading_order_names_real_files_with_their_sizes():
    rows = reading_order()
    assert len(rows) >= 8, "the Start here table was not found"
    wrong = []
    for stated, path in rows:
        actual = len((ROOT / path).read_text().splitlines())
        if abs(actual - stated) > max(15, 0.1 * actual):
            wrong.append(f"{path}: README says {stated} lines, it has {actual}")
    assert wrong == [], "update README's Start here table"
    total = re.search(r"reads in about ([\d,]+) lines", (ROOT / "README.md").read_text())
    assert total is not None
    stated_total = int(total.group(1).replace(",", ""))
    assert abs(stated_total - sum(n for n, _ in rows)) <= 0.1 * stated_total
