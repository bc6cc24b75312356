"""Append-only JSON-lines files, flushed line by line so a crash keeps what was written."""
import json
from pathlib import Path


class JsonlWriter:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: Path) -> list[dict]:
    """All complete records; a torn last line (crash mid-write) is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class JsonlTail:
    """Reads the records appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self._offset, self._partial = path, 0, ""

    def new_records(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path) as f:
            f.seek(self._offset)
            chunk = f.read()
            self._offset = f.tell()
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        return [json.loads(line) for line in lines if line]
