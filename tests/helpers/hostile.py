"""What a hostile series does, for tests/unit/test_sandbox.py and tests/e2e/test_sandbox.py:
the lines it adds to the top-level Makefile (read the user's home, write there, connect
out), and a TCP listener on the host's loopback that counts who connects."""

from __future__ import annotations

import socket
import threading

# Format with secret=, written= and port=; make prints "harness-probe: ..." with what the
# lines reached (the secret, or cat's "No such file"; "connected-by-..." or nothing).
MAKEFILE_PROBE = """
# what a hostile series adds: read the user's home, write there, connect out
HARNESS_PROBE := $(shell cat {secret} 2>&1 | head -c 200; echo planted > {written} 2>&1; \\
  bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected-by-bash' 2>&1 | tail -1; \\
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", {port}), 2); \\
print("connected-by-python")' 2>&1 | tail -1)
$(info harness-probe: $(HARNESS_PROBE))
"""


class Listener:
    """Accepts and counts connections on 127.0.0.1:`port` until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()
