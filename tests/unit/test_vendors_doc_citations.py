"""docs/vendors.md names, for each documented vendor rule, the test that holds it: every test it names
exists (in hookbridge's tests, the plugin's, or the shipped conformance kit), so that a renamed or removed
test cannot leave the table citing nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHERE = (ROOT / "tests", ROOT / "plugins", ROOT / "service" / "testing")


def defined() -> set[str]:
    names: set[str] = set()
    for base in WHERE:
        for path in base.rglob("*.py"):
            names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
            names.add(path.stem)
    return names


def test_every_test_the_vendors_doc_cites_exists() -> None:
    text = (ROOT / "docs" / "vendors.md").read_text()
    names = defined()
    missing = []
    for match in re.finditer(r"test_\w+", text):
        cited, after = match.group(), text[match.end() : match.end() + 3]
        if after.startswith(("{", ".py")):
            continue  # a file name (test_adapter_{nutrient,...}.py)
        if after.startswith("...") or cited.endswith("_"):  # an elided name: test_a_run_succeeds_...
            if not any(name.startswith(cited) for name in names):
                missing.append(cited)
        elif cited not in names:
            missing.append(cited)
    assert not missing, sorted(set(missing))
