"""Byte relays between TCP ports on a network namespace's own loopback and unix sockets (harness/envs/pinchbench/
mocks.py). Standard library only: it runs under the system python3 inside bubblewrap namespaces.

    python3 mock_relay.py [--unix SOCK=PORT]... [--tcp PORT=SOCK]... -- PROGRAM [ARGS...]

`--unix SOCK=PORT` listens on the unix socket SOCK and connects each client to 127.0.0.1:PORT; `--tcp PORT=SOCK`
listens on 127.0.0.1:PORT and connects each client to SOCK. Every listener is bound before PROGRAM starts (so the
program never races them); a forked child serves them with its output on /dev/null, and this process becomes
PROGRAM (exec). The child lives as long as the namespace: bubblewrap kills it with everything else in its pid
namespace when PROGRAM ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable

Dial = Callable[[], socket.socket]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                s.shutdown(how)


def _serve_one(client: socket.socket, dial: Dial) -> None:
    try:
        upstream = dial()
    except OSError:  # the server behind it is not (yet) listening: the client sees a closed connection
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept_loop(listener: socket.socket, dial: Dial) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(client, dial), daemon=True).start()


def _tcp_dial(port: int) -> Dial:
    return lambda: socket.create_connection(("127.0.0.1", port))


def _unix_dial(path: str) -> Dial:
    def dial() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            raise
        return s
    return dial


def _listen_unix(path: str) -> socket.socket:
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)  # the agent's sandbox connects as another uid
    s.listen(64)
    return s


def _listen_tcp(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    return s


def parse(argv: list[str]) -> tuple[list[tuple[socket.socket, Dial]], list[str]]:
    """The bound listeners with their dialers, and PROGRAM's argv."""
    if "--" not in argv:
        raise SystemExit("mock_relay: usage: [--unix SOCK=PORT]... [--tcp PORT=SOCK]... -- PROGRAM [ARGS...]")
    cut = argv.index("--")
    opts, program = argv[:cut], argv[cut + 1:]
    pairs: list[tuple[socket.socket, Dial]] = []
    for flag, spec in zip(opts[::2], opts[1::2], strict=True):
        left, _, right = spec.partition("=")
        if flag == "--unix":
            pairs.append((_listen_unix(left), _tcp_dial(int(right))))
        elif flag == "--tcp":
            pairs.append((_listen_tcp(int(left)), _unix_dial(right)))
        else:
            raise SystemExit(f"mock_relay: unknown option {flag}")
    if not program:
        raise SystemExit("mock_relay: no PROGRAM after --")
    return pairs, program


def main(argv: list[str]) -> None:
    pairs, program = parse(argv)
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        threads = [threading.Thread(target=_accept_loop, args=p, daemon=True) for p in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os._exit(0)
    for listener, _ in pairs:
        listener.close()
    os.execvp(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
