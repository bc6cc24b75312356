"""Samples-to-target at a larger global batch, from the gradient noise scale (McCandlish et al. 2018: a target takes
E = E_min (1 + B / B_noise) samples at global batch B), used only where bench/noise_scale.py checked it for the model
and learning-rate rule (conf/evidence.json `noise_scale`, passed)."""
GOAL = 0.2  # the check's goal, fixed before its data: every larger batch's predicted samples-to-target within 20 %


def samples_at(samples: float, batch: int, new_batch: int, noise_scale: float) -> float:
    """Samples to the same target at new_batch, from `samples` measured at `batch`."""
    return samples * (1 + new_batch / noise_scale) / (1 + batch / noise_scale)


def checked_noise_scale(results: list[dict], model: str | None, lr_scaling: str) -> dict | None:
    """The passed check for this model and lr rule (its noise_scale and largest checked batch), or None."""
    for entry in results:
        if (entry.get("name") == "noise_scale" and entry.get("passed") and entry.get("model") == model
                and entry.get("lr_scaling") == lr_scaling):
            return {"noise_scale": entry["noise_scale"], "largest_batch": max(r["batch"] for r in entry["rows"]),
                    "measured_at": entry.get("measured_at")}
    return None
