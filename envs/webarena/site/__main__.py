"""Command line: serve the shopping site. ``python -m envs.webarena.site --db PATH --port P [--host H]``.

Creates and seeds PATH first when it does not exist (``--seed`` picks the generator seed). Prints one line
``serving http://HOST:PORT`` on stdout once the socket is listening, then serves until SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys

from werkzeug.serving import make_server

from .app import create_app
from .seed import DEFAULT_SEED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.webarena.site", description=__doc__)
    ap.add_argument("--db", required=True, help="SQLite file; created and seeded if missing")
    ap.add_argument("--port", type=int, default=7770, help="TCP port (0 = any free port)")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    ap.add_argument("--access-log", action="store_true", help="log every request on stderr")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the data generator")
    args = ap.parse_args(argv)
    if not args.access_log:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = create_app(args.db, seed=args.seed)
    server = make_server(args.host, args.port, app, threaded=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"serving http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
