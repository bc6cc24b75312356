"""The measurement window (conf/config.yaml measure_window): the steps every strategy of a sweep is measured over."""


def window_steps(after_step: int, steps: int, period: tuple[int, int]) -> tuple[int, int]:
    """(first, last) step of the window for a strategy whose averaging steps are offset + k * every (k >= 1)."""
    offset, every = period
    start = offset if after_step <= offset else offset + -(-(after_step - offset) // every) * every
    return start + 1, start + -(-steps // every) * every


def steps_in(steps: list[dict], window: tuple[int, int] | None) -> tuple[list[dict], dict | None]:
    """A worker's steps inside the window (all: no window, or it ended before) and the one before (None: none)."""
    if window is None or not steps or steps[-1]["step"] < window[0]:
        return steps, None
    first, last = window
    inside = [s for s in steps if first <= s["step"] <= last]
    before = [s for s in steps if s["step"] < first]
    return inside, before[-1] if before else None


def worker_window(steps: list[dict], window: tuple[int, int] | None) -> dict:
    """A worker's samples, training time and steps inside the window."""
    inside, before = steps_in(steps, window)
    if not inside:
        return {"samples": 0, "train_s": 0.0, "steps": 0}
    base = before or {"samples": 0, "train_s": 0.0}
    return {"samples": inside[-1]["samples"] - base["samples"], "train_s": inside[-1]["train_s"] - base["train_s"],
            "steps": len(inside)}


def window_section(window: tuple[int, int] | None, steps_by_rank: dict[int, list[dict]]) -> dict | None:
    """The window as measured (method: metrics/methods.yaml summary.window); None: no window was declared."""
    if window is None:
        return None
    ended = [steps[-1]["step"] for steps in steps_by_rank.values() if steps]
    before = bool(ended) and min(ended) < window[0]
    return {"first": 1 if before else window[0], "last": max(ended, default=0) if before else window[1],
            "complete": bool(ended) and min(ended) >= window[1]}
