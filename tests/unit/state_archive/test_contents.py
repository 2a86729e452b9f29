"""Every name the installer writes at the top of the state folder is either carried by an
export or left out on purpose: a module that starts keeping a new kind of state fails here
until contents.py says which."""

import re
from pathlib import Path

import installer
from installer.flows import request_audit
from installer.state import audit
from installer.state_archive import contents

_WRITES = re.compile(r'state_dir\(\)\)?\s*/\s*f?"([^"/]+)"')
_FIELD = re.compile(r"\{[^}]*\}")  # an f-string's field: a deployment's name


def test_every_name_the_code_writes_in_the_state_folder_is_classified() -> None:
    root = Path(installer.__file__).parent
    found = {_FIELD.sub("prod", m.group(1)) for f in root.rglob("*.py") for m in _WRITES.finditer(f.read_text())}
    # audit.py, revisions.py and request_audit.py name them otherwise
    found |= {audit.FILE_NAME, "state.lock", request_audit.HEADS_FILE}
    # the pattern still finds what the code writes
    assert {"keys.json", "tls", "redis", "terraform", "runs", "release-prod.lock"} <= found
    unclassified = sorted(n for n in found if contents.classify(n) is None)
    assert unclassified == [], f"say in installer/state_archive/contents.py whether these move: {unclassified}"
    assert contents.classify("notes.txt") is None
