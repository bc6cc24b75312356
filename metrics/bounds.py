"""Lower bounds on the communication time of one averaging round over shaped links.

One formula per strategy, all in this file. Inputs: P = the payload bytes one worker
moved in the round (max of sent and received, from the step log), N = workers,
B = link rate in bytes/s (full duplex: each direction of a link carries B). Framing
and protocol overhead are not counted, so a measured time can only be longer.
"""
from dataclasses import dataclass


@dataclass
class Round:
    payload: float    # P, bytes
    workers: int      # N
    rate: float       # B, bytes/s
    knobs: dict       # the strategy's knobs (Strategy.knobs: e.g. ps.servers, stepwise.chunks)


def ring(r: Round) -> float:
    # every worker sends and receives 2(N-1)/N x S, which is P
    return r.payload / r.rate


def parameter_server(r: Round) -> float:
    # each of the `servers` server links carries N x S / servers per direction (P = S per worker).
    # sync: the pull of the new parameters cannot start before every push has arrived, so the
    # two directions follow each other; async: pushes and pulls of different workers overlap.
    servers = int(r.knobs.get("servers", 1))
    one_way = max(r.payload, r.workers * r.payload / servers) / r.rate
    return 2 * one_way if r.knobs.get("mode", "sync") == "sync" else one_way


def chain(r: Round) -> float:
    # a pipelined pass of S in `chunks` pieces over N hops: S/B x (1 + (N-1)/chunks);
    # with second_pass the log's P holds both passes, each pipelined the same way
    chunks = int(r.knobs.get("chunks", 1))
    return r.payload / r.rate * (1 + (r.workers - 1) / chunks)


BOUNDS = {
    "allreduce": (ring, "ring all-reduce: 2(N-1)/N*S/B = P/B"),
    "ring": (ring, "ring all-reduce: 2(N-1)/N*S/B = P/B"),
    "hivemind": (ring, "all-reduce counted as a ring: P/B (P = the round's payload per peer)"),
    "ps": (parameter_server, "parameter server: N*S/(servers*B) at the server links per direction, "
                             "x2 in sync mode (pull after push) (P = S per worker)"),
    "stepwise": (chain, "pipelined chain: S/B*(1+(N-1)/chunks) per pass (P = S, or 2S with second_pass)"),
}


def bound_for(strategy: str) -> tuple | None:
    """(function of a Round, formula) or None when no formula is known for this strategy."""
    return BOUNDS.get(strategy)
