"""Where a benchmark's results go besides stdout: its Markdown table, and its raw rows as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable


def write_report(markdown: str | None, text: str, json_path: str | None = None, payload: object = None,
                 default: Callable[[object], object] | None = None) -> None:
    """``text`` to ``markdown`` and ``payload`` to ``json_path`` (``default`` as ``json.dump``'s),
    each only where a path is given."""
    if markdown:
        with open(markdown, "w") as handle:
            handle.write(text)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(payload, handle, indent=1, default=default)
