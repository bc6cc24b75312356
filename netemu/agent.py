"""Remote-shell agent for emulated hosts: `python -m netemu.agent [ssh options] HOST COMMAND...`.

Stands in for ssh/rsh so that a launcher built for real hosts (mpirun's
`--mca plm_rsh_agent`, horovodrun's ssh) starts its remote commands in the
namespace of the emulated host whose address is HOST. The hosts come from the
run's network.json, named by $AVGBENCH_NETWORK. As with ssh, COMMAND's words are
joined with spaces and run by sh; ssh options (-o X, -p X, ...) are ignored,
before or after HOST. Like a real host, each has its own temporary directory
(TMPDIR): Open MPI's daemons keep per-host session files there, and emulated hosts
share one hostname and one /tmp.
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
    os.environ["TMPDIR"] = entry["tmpdir"]
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
