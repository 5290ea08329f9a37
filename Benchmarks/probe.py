"""/healthz latency while idle and slowloris connections hold a metrics port.

Keeps IDLE silent connections and SLOW connections that send a request head one byte every
100 ms open against ADDRESS (opening each again when the server closes it), then times
PROBES requests for /healthz, one after another, and prints the median, p95 and maximum.

    python3 Benchmarks/probe.py HOST:PORT [IDLE] [SLOW] [PROBES]
"""

import selectors
import socket
import sys
import threading
import time


def attack(host, port, idle, slow, stop, opened):
    selector = selectors.DefaultSelector()
    sockets = {}  # socket -> bytes sent (None: idle)
    head = b"GET /healthz HTTP/1.1\r\nX-Slow: "

    def open_one(trickles):
        try:
            s = socket.create_connection((host, port), timeout=1)
        except OSError:
            return
        s.setblocking(False)
        sockets[s] = 0 if trickles else None
        selector.register(s, selectors.EVENT_READ)
        opened[0] += 1

    next_trickle = time.monotonic()
    while not stop.is_set():
        trickling = sum(1 for v in sockets.values() if v is not None)
        while len(sockets) - trickling < idle:
            open_one(False)
        while sum(1 for v in sockets.values() if v is not None) < slow:
            open_one(True)
        for key, _ in selector.select(timeout=0.02):
            s = key.fileobj
            try:
                data = s.recv(1)
            except OSError:
                data = b""
            if not data:
                selector.unregister(s)
                sockets.pop(s, None)
                s.close()
        if time.monotonic() >= next_trickle:
            next_trickle = time.monotonic() + 0.1
            for s, sent in list(sockets.items()):
                if sent is not None:
                    try:
                        s.send(head[sent:sent + 1] if sent < len(head) else b"a")
                        sockets[s] = sent + 1
                    except OSError:
                        pass
    for s in sockets:
        s.close()


def probe(host, port):
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := s.recv(4096):
            response += chunk
    if not response.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"/healthz answered {response[:40]!r}")
    return (time.monotonic() - start) * 1000


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    port = int(port)
    idle, slow, probes = (int(a) for a in (sys.argv[2:] + ["200", "20", "50"][len(sys.argv) - 2:])[:3])
    stop, opened = threading.Event(), [0]
    thread = threading.Thread(target=attack, args=(host, port, idle, slow, stop, opened))
    thread.start()
    try:
        while opened[0] < idle + slow:
            time.sleep(0.01)
        latencies = []
        for _ in range(probes):
            latencies.append(probe(host, port))
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join()
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
    print(f"/healthz beside {idle} idle + {slow} slowloris connections ({opened[0]} opened in all): "
          f"median {latencies[len(latencies) // 2]:.2f} ms, p95 {p95:.2f} ms, max {latencies[-1]:.2f} ms "
          f"over {probes} probes")


if __name__ == "__main__":
    main()
