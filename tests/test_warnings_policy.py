"""The suite's warnings policy (docs/pages/getting-started/install.md, "Warnings"): every
warning fails a test, except a
deprecation raised inside a dependency, which is shown and does not fail; a deprecation
attributed to this project's own code fails again.

The policy is checked by running pytest, with this repository's configuration, on a file
of tests that each raise one warning attributed to a chosen module (``warn_explicit``),
and reading which of them failed. The asyncio suite's ``tests/integrations/pytest.ini``
must hold the same filters.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = textwrap.dedent(
    """
    import warnings


    def warn(category, module):
        warnings.warn_explicit("a warning", category, "somewhere.py", 1, module=module)


    def test_dependency_deprecation():
        warn(DeprecationWarning, "somedependency.api")


    def test_dependency_pending_deprecation():
        warn(PendingDeprecationWarning, "langchain_core._api")


    def test_dependency_future_warning():
        warn(FutureWarning, "trio._deprecate")


    def test_our_deprecation():
        warn(DeprecationWarning, "actors._store.handle")


    def test_our_future_warning():
        warn(FutureWarning, "protocol")


    def test_a_test_modules_deprecation():
        warn(DeprecationWarning, "test_something")


    def test_dependency_runtime_warning():
        warn(RuntimeWarning, "somedependency.api")


    def test_dependency_resource_warning():
        warn(ResourceWarning, "somedependency.api")
    """
)

# Which of CASES fail under the policy.
FAILING = {
    "test_our_deprecation",
    "test_our_future_warning",
    "test_a_test_modules_deprecation",
    "test_dependency_runtime_warning",
    "test_dependency_resource_warning",
}


def test_only_a_dependencys_deprecation_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    report = tmp_path / "report.xml"
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")]
    command += ["--rootdir", str(tmp_path), "-p", "no:cacheprovider"]
    command += [f"--junit-xml={report}", str(tmp_path / "test_cases.py")]
    run = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    cases = ET.parse(report).getroot().iter("testcase")
    outcome = {case.get("name"): case.find("failure") is not None for case in cases}
    assert len(outcome) == 8, run.stdout[-2000:]
    assert {name for name, failed in outcome.items() if failed} == FAILING, run.stdout[-3000:]
    # The dependency's deprecations are shown, not swallowed.
    assert "warnings summary" in run.stdout and "DeprecationWarning" in run.stdout


def test_the_asyncio_suite_has_the_same_filters() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    filters = pyproject["tool"]["pytest"]["ini_options"]["filterwarnings"]
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tests" / "integrations" / "pytest.ini")
    lines = [line.strip() for line in ini["pytest"]["filterwarnings"].splitlines()]
    assert [line for line in lines if line] == filters
