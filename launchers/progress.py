"""Live progress in the launcher: rank 0's step and loss, all peers' samples/s."""
import sys
import time

from metrics.jsonl import JsonlTail


class Progress:
    def __init__(self, run_dir, cfg):
        self.enabled = bool(cfg.progress) and sys.stderr.isatty()
        self.tails = {}
        self.run_dir = run_dir
        self.samples: dict[str, int] = {}
        self.start = time.monotonic()
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
            last = records[-1]
            self.samples[path.parent.name] = last["samples"]
            if path.parent.name == "peer0":
                self.bar.n = last["step"]
                rate = sum(self.samples.values()) / max(time.monotonic() - self.start, 1e-9)
                self.bar.set_postfix(loss=f"{last['loss']:.3f}", samples_s=f"{rate:.0f}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar:
            self.bar.close()
