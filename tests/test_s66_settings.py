"""A FUSER_* environment variable that is no setting (a misspelling) is warned about once, at
import, with the closest known name (`fuser/dump.py` SETTINGS); and SETTINGS holds every FUSER_*
name the source tree reads, so that it cannot go stale without a failing test."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuser.dump import SETTINGS, warn_unknown_settings

ROOT = Path(__file__).resolve().parent.parent

# FUSER_* names in the tree that are no environment settings
NOT_SETTINGS = {"FUSER_CANONICAL_KERNEL"}  # (codegen/canonical.py: a placeholder in kernel source)


def names_in(paths):
    found = set()
    for path in paths:
        found.update(re.findall(r"\bFUSER_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    return found


def test_settings_name_every_fuser_variable_the_tree_reads():
    files = [p for folder in ("fuser", "scripts", "benchmarks", ".ci") for p in (ROOT / folder).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so")]
    files.append(ROOT / "tests" / "conftest.py")
    found = names_in(files) - NOT_SETTINGS
    assert "FUSER_CACHE_DIR" in found and "FUSER_TEST_WORKERS" in found  # (the search reads the tree)
    assert found <= SETTINGS, f"read but not in fuser/dump.py SETTINGS: {sorted(found - SETTINGS)}"
    assert not SETTINGS - found, f"in SETTINGS but read nowhere: {sorted(SETTINGS - found)}"


@pytest.mark.parametrize("name, closest", [("FUSER_AUTOTUEN", "FUSER_AUTOTUNE"),
                                           ("FUSER_CACHEDIR", "FUSER_CACHE_DIR"),
                                           ("FUSER_DUMPS", "FUSER_DUMP")])
def test_a_misspelt_setting_is_warned_about_with_the_closest_name(name, closest):
    with pytest.warns(UserWarning, match=rf"fuser: {name}='s66' is no fuser setting and is ignored; "
                                         rf"did you mean {closest}\?"):
        warn_unknown_settings({name: "s66", closest: "1", "PATH": "/bin"})


def test_known_settings_and_other_variables_are_not_warned_about(recwarn):
    warn_unknown_settings({**{name: "1" for name in SETTINGS}, "FUSERX": "1", "MY_FUSER_DUMPS": "1"})
    assert not [w for w in recwarn if "fuser:" in str(w.message)]


def test_the_environment_is_checked_once_at_import():
    env = dict(os.environ, FUSER_AUTOTUEN="0")
    res = subprocess.run([sys.executable, "-W", "always", "-c", "import fuser, fuser.dump"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("FUSER_AUTOTUEN='0' is no fuser setting") == 1, res.stderr
    assert "did you mean FUSER_AUTOTUNE?" in res.stderr
