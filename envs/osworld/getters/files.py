"""OSWorld's state getters for files of other kinds (PDF, archives, EPUB, HTML, MP3 tags, Python, SQLite) and for
VS Code's and the OS's settings.

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/files.py, which no workspace holds.
OSWorld's names and signatures; a bad *result* scores 0.0, a malformed *task* raises EvaluatorError.

Getters:
  vscode_config                    {"vscode_extension_command", "path", "dest"} → runs the command in VS Code's
                                   palette (when its window is open), then a copy of the file (None if absent)
  content_from_vm_file             {"path", "file_type": "xlsx", "file_content": "last_row"} → the sheet's last
                                   row as strings (pandas' astype(str)), None if the file is absent
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

from ..errors import EvaluatorError
from .common import get_vm_file, getter


# ----------------------------------------------------------------------------------------------------
# getters


def _key(config: Mapping[str, Any], key: str, getter_name: str) -> Any:
    if not isinstance(config, Mapping) or key not in config:
        raise EvaluatorError(f"{getter_name}: the getter's config must have key {key!r}; got {config!r:.100}")
    return config[key]


@getter("vscode_config")
def get_vscode_config(session, config: Mapping[str, Any]) -> str | None:
    """Runs config["vscode_extension_command"] from VS Code's command palette (ctrl+shift+p, the command, Enter;
    only when a VS Code window is open, so the keys never land elsewhere), waits a second, and returns a copy of
    config["path"] (the file the command writes) named config["dest"], None if absent."""
    command = _key(config, "vscode_extension_command", "vscode_config")
    find = getattr(session, "find_window", None)
    if find is not None and find("Visual Studio Code"):
        session.activate_window("Visual Studio Code")
        session.run_python(f"pyautogui.hotkey('ctrl', 'shift', 'p'); pyautogui.typewrite({command!r}); "
                           "pyautogui.press('enter')")
        time.sleep(1.0)
    return get_vm_file(session, {"path": _key(config, "path", "vscode_config"),
                                 "dest": config.get("dest", os.path.basename(str(config["path"])))})


@getter("content_from_vm_file")
def get_content_from_vm_file(session, config: Mapping[str, Any]) -> list[str] | None:
    """{"path", "file_type": "xlsx", "file_content": "last_row"}: the first sheet's last row (the header row is
    not a data row), every cell as str by pandas' astype(str) (an empty cell stays NaN); None if the file is
    absent."""
    import pandas as pd
    path = _key(config, "path", "content_from_vm_file")
    kind = (_key(config, "file_type", "content_from_vm_file"), _key(config, "file_content", "content_from_vm_file"))
    if kind != ("xlsx", "last_row"):
        raise EvaluatorError(f"content_from_vm_file: file_type/file_content {kind!r} unsupported; only "
                             "('xlsx', 'last_row')")
    local = get_vm_file(session, {"path": path, "dest": os.path.basename(str(path))})
    if local is None:
        return None
    return pd.read_excel(local).iloc[-1].astype(str).tolist()
