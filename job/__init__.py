"""The training job every strategy runs: data, model, optimizer, loop, worker entry."""
