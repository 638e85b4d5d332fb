"""What the deployment files share: the image's roles (deploy/entrypoint.sh) and the folders."""
from __future__ import annotations

import re

from pipelines.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
ENTRYPOINT = DEPLOY / "entrypoint.sh"


def entrypoint_roles() -> set[str]:
    """The roles the entry point's `case` names (`allocator)`, `code-server)`, ...), help and the
    catch-all excepted."""
    labels = re.findall(r"^\s+([a-z][a-z-]*)\)", ENTRYPOINT.read_text(), flags=re.MULTILINE)
    return set(labels) - {"help"}
