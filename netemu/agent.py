"""Remote-shell agent for emulated hosts: `python -m netemu.agent [ssh options] HOST COMMAND...`, a stand-in for ssh
(mpirun's plm_rsh_agent, horovodrun) that runs COMMAND (words joined, run by sh) in the namespace and with the TMPDIR of
the emulated host at address HOST, from the run's network.json ($AVGBENCH_NETWORK). ssh options are ignored.
"""
import json
import os
import sys

NETWORK_ENV = "AVGBENCH_NETWORK"
SSH_OPTIONS_WITH_VALUE = set("bcDEeFIiJLlmOopQRSWw")


def split_ssh_args(args: list[str]) -> tuple[str, list[str]]:
    """(host, command words) from an ssh-style command line; like ssh, options may follow the host."""
    host, i = None, 0
    while i < len(args) and (args[i].startswith("-") or host is None):
        if not args[i].startswith("-"):
            host, i = args[i], i + 1
            continue
        takes_value = len(args[i]) == 2 and args[i][1] in SSH_OPTIONS_WITH_VALUE
        i += 2 if takes_value else 1
    if host is None:
        raise SystemExit("netemu.agent: no host given")
    return host.rpartition("@")[2], args[i:]


def host_entry(network_file: str, host: str) -> dict:
    hosts = json.loads(open(network_file).read())["hosts"]
    for entry in hosts:
        if entry["addr"] == host:
            return entry
    raise SystemExit(f"netemu.agent: {host} is not an emulated host of this run "
                     f"(known: {', '.join(h['addr'] for h in hosts)})")


def main(argv: list[str]) -> None:
    network_file = os.environ.get(NETWORK_ENV)
    if not network_file:
        raise SystemExit(f"netemu.agent: ${NETWORK_ENV} must name the run's network.json")
    host, words = split_ssh_args(argv)
    entry = host_entry(network_file, host)
    os.environ["TMPDIR"] = entry["tmpdir"]  # Open MPI's daemons keep per-host session files there
    enter = entry["enter"]
    os.execvp(enter[0], [*enter, "sh", "-c", " ".join(words) or "exec sh"])


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            sys.exit(255)  # what ssh returns when it cannot reach the host
        raise
