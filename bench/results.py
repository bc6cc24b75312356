"""The benchmarks' results, bench/results/NAME.json, checked against bench/results/schema.json: the one module that
writes and reads them. A save into bench/results also refreshes conf/evidence.json, which runs read."""
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrics.recording.evidence import EVIDENCE, refresh_evidence
from metrics.recording.machine import fingerprint
from metrics.summary.schema import Json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SCHEMA_PATH = RESULTS / "schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


ENVELOPE = ("name", "goal", "goal_met", "machine", "measured_at", "method", "commit", "sweeps")


@dataclass(frozen=True)
class BenchResult:
    """A benchmark's entry: the fields every entry shares, and its body (the benchmark's own fields). `keys`: the
    entry's keys in the order it is written; goal_met, method and commit are written only where the entry has them."""
    name: str
    goal: str
    machine: Json
    measured_at: str
    sweeps: list[Json]
    body: Json
    keys: tuple[str, ...]
    goal_met: bool | None = None
    method: str | None = None
    commit: Json | None = None

    @classmethod
    def of(cls, entry: Json) -> "BenchResult":
        """The entry a file or a benchmark's run gives."""
        return cls(**{key: value for key, value in entry.items() if key in ENVELOPE},
                   body={key: value for key, value in entry.items() if key not in ENVELOPE}, keys=tuple(entry))

    def json(self) -> Json:
        """The entry as written."""
        fields = self.body | {key: getattr(self, key) for key in ENVELOPE}
        return {key: fields[key] for key in self.keys}


class MalformedEntry(ValueError):
    """An entry that does not follow the schema: one line naming its file and field."""


def problems(value: Any, schema: Json, where: str) -> list[str]:
    """What breaks the schema (the JSON Schema keywords it uses: type, required, properties, items, pattern)."""
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if types and not any(is_type(value, t) for t in types):
        return [f"{where} is {type(value).__name__} {value!r:.40}, not {' or '.join(types)}"]
    found = []
    if isinstance(value, dict):
        found += [f"{where}.{key} is missing" for key in schema.get("required", []) if key not in value]
        found += [p for key, sub in schema.get("properties", {}).items() if key in value
                  for p in problems(value[key], sub, f"{where}.{key}")]
    if isinstance(value, list) and "items" in schema:
        found += [p for i, item in enumerate(value) for p in problems(item, schema["items"], f"{where}[{i}]")]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{where} {value!r} does not match {schema['pattern']}")
    return found


def is_type(value: Any, name: str) -> bool:
    if name in ("number", "integer"):
        return isinstance(value, int if name == "integer" else (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def checked(entry: Json, path: Path) -> Json:
    """The entry, or MalformedEntry naming the file and its first field that breaks the schema."""
    if found := problems(entry, SCHEMA, "entry"):
        raise MalformedEntry(f"{shown(path)}: {found[0]}" + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    if entry["name"] != path.stem:
        raise MalformedEntry(f"{shown(path)}: entry.name is {entry['name']!r}, not the file's name {path.stem!r}")
    return entry


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def path_of(name: str, folder: Path = RESULTS) -> Path:
    return folder / f"{name}.json"


def source(name: str, part: str = "") -> str:
    """Where a figure comes from, as the docs cite it: `bench/results/NAME.json` → `part`."""
    return f"`{shown(path_of(name))}`" + (f" → `{part}`" if part else "")


def load(name: str, folder: Path = RESULTS) -> BenchResult | None:
    """The saved entry of that name (None where there is none)."""
    path = path_of(name, folder)
    return BenchResult.of(checked(json.loads(path.read_text()), path)) if path.exists() else None


def load_all(folder: Path = RESULTS) -> dict[str, BenchResult]:
    """Every saved entry by name, in the order they were measured."""
    entries = [BenchResult.of(checked(json.loads(path.read_text()), path)) for path in folder.glob("*.json")
               if path != SCHEMA_PATH]
    return {e.name: e for e in sorted(entries, key=lambda e: (e.measured_at, e.name))}


def git(*args: str, root: Path = ROOT) -> str | None:
    """A git command's output in the repository; None where git, the repository or what was asked is not there."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def head_commit(root: Path = ROOT) -> Json | None:
    """The commit the code runs at: HEAD, and whether tracked files differ from it (what saving writes left out);
    None outside a git checkout."""
    sha = git("rev-parse", "HEAD", root=root)
    written = [f":(exclude){shown(path)}" for path in (RESULTS, EVIDENCE) if path.is_relative_to(root)]
    changed = git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--", ".", *written,
                  root=root)
    return None if sha is None else {"sha": sha, "dirty": bool(changed)}


COMMIT = head_commit()  # read when this module loads: the code a benchmark runs is the code it loaded


def save(entry: BenchResult, folder: Path = RESULTS, merge: Callable[[Json, Json], Json] | None = None,
         new: bool = True) -> Path:
    """Write the entry (or merge(saved, entry) of their JSON) to folder/NAME.json, a new one (`new`) with the commit
    it ran at (COMMIT; one written back as it was: new=False); into bench/results, conf/evidence.json too."""
    entry = BenchResult.of(entry.json() | {"commit": COMMIT}) if new else entry
    kept = load(entry.name, folder) if merge else None
    written = merge(kept.json(), entry.json()) if merge and kept else entry.json()
    path = path_of(entry.name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(checked(written, path), indent=1) + "\n")
    if folder.resolve() == RESULTS.resolve():
        refresh_evidence(e.json() for e in load_all(folder).values())
    return path


def portable(value: Any, root: Path = ROOT) -> Any:
    """The value with absolute paths made relative to the repository (one outside it: its name, marked so)."""
    if isinstance(value, dict):
        return {key: portable(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item, root) for item in value]
    if isinstance(value, str) and value.startswith("/") and " " not in value:
        path = Path(value)
        return str(path.relative_to(root)) if path.is_relative_to(root) else f"outside the repository: {path.name}"
    return value


def stamped(value: Any, machine: Json) -> Any:
    """Every dict of a new result that carries its own measured_at (a row, a family) gets this machine's fingerprint."""
    if isinstance(value, dict):
        value = {key: stamped(item, machine) for key, item in value.items()}
        return value if "measured_at" not in value or "machine" in value else value | {"machine": machine}
    if isinstance(value, list):
        return [stamped(item, machine) for item in value]
    return value


def recorded(result: Json) -> BenchResult:
    """A benchmark's result as saved: when and where it was measured, its sweeps (default none), paths relative."""
    machine = fingerprint()
    result = {"sweeps": []} | result | {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine}
    return BenchResult.of(portable(stamped(result, machine)))
