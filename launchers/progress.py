"""Live progress in the launcher (on a terminal): rank 0's step and loss, all peers' samples/s."""
import sys

from metrics.jsonl import JsonlTail


class Progress:
    def __init__(self, run_dir, cfg):
        self.enabled = bool(cfg.progress) and sys.stderr.isatty()
        self.tails = {}
        self.run_dir = run_dir
        self.latest: dict[str, dict] = {}  # peer -> its last step record
        self.bar = None
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.max_steps, desc=f"{cfg.strategy.name} x{cfg.peers}", unit="step", file=sys.stderr)

    def update(self) -> None:
        if not self.enabled:
            return
        for path in self.run_dir.glob("peer*/steps.jsonl"):
            self.tails.setdefault(path, JsonlTail(path))
        for path, tail in self.tails.items():
            records = tail.new_records()
            if not records:
                continue
            self.latest[path.parent.name] = records[-1]
        if "peer0" in self.latest:
            clock = max(r["train_s"] for r in self.latest.values())
            rate = sum(r["samples"] for r in self.latest.values()) / max(clock, 1e-9)
            self.bar.n = self.latest["peer0"]["step"]
            self.bar.set_postfix(loss=f"{self.latest['peer0']['loss']:.3f}", samples_s=f"{rate:.0f}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar:
            self.bar.close()
