# SPDX-License-Identifier: MIT
# The attacks of tests/cli/abuse.sh against a running `verity serve`, and the well-behaved client
# it watches. Loopback only, bounded in count and time: every socket has a timeout, every loop a
# count. Attack connections come from 127.0.0.2 and up (Linux routes all of 127/8 to lo), at most
# PER_ADDR from each, so the server's per-address limit does not refuse them and the test shows
# what the connection layer does with that many; the well-behaved client is 127.0.0.1.
#
#   run PORT KEY SERVER_PID N_IDLE N_TRICKLE SECONDS
#       1. baseline: the client's requests alone (latencies kept);
#       2. N_IDLE connections that send nothing and N_TRICKLE that send a request head one byte
#          about every second (a closed one is reopened), until all are open (the server's
#          verity_http_connections_open says so), then for SECONDS: the client's requests, /health,
#          rounds of 60 unauthenticated 8 MiB bodies, and requests with the largest stop strings
#          allowed (and one over the limit); the server's RSS is sampled throughout;
#       3. every attack socket closed, then the client's requests again.
#       Prints one "key=value ..." line per result for the shell to check.
import http.client
import json
import socket
import sys
import threading
import time

PER_ADDR = 50
SOCK_TIMEOUT_S = 60


def src_addr(i):
    return "127.0.0.%d" % (2 + i // PER_ADDR)


def attack_socket(port, i):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(SOCK_TIMEOUT_S)
    s.bind((src_addr(i), 0))
    s.connect(("127.0.0.1", port))
    return s


def request(port, key, method, path, body=None, timeout=SOCK_TIMEOUT_S):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Authorization": "Bearer " + key}
    if body is not None:
        h["Content-Type"] = "application/json"
    t0 = time.monotonic()
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, data, time.monotonic() - t0
    except OSError as e:
        return 0, str(e).encode(), time.monotonic() - t0
    finally:
        c.close()


def metric(port, key, name):
    st, data, _ = request(port, key, "GET", "/metrics")
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


GOOD = json.dumps({"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": True})


def good_round(port, key, n, lat, bad):
    for _ in range(n):
        st, data, dt = request(port, key, "POST", "/v1/completions", GOOD)
        if st == 200 and b'"finish_reason"' in data:
            lat.append(dt)
        else:
            bad.append("%d %s" % (st, data[:120]))
        st, data, dt = request(port, key, "GET", "/health")
        if st != 200:
            bad.append("health %d %s" % (st, data[:120]))


def p99_ms(lat):
    if not lat:
        return -1
    x = sorted(lat)
    return 1000 * x[min(len(x) - 1, int(0.99 * len(x)))]


def run(port, key, pid, n_idle, n_trickle, seconds):
    out = {}
    lat0, bad0 = [], []
    good_round(port, key, 5, [], bad0)  # warm-up, not timed (first-touch of the model's pages)
    good_round(port, key, 40, lat0, bad0)
    print("baseline ok=%d bad=%d p99_ms=%.1f %s" % (len(lat0), len(bad0), p99_ms(lat0),
                                                     "|".join(bad0[:3])))
    rss = [rss_kb(pid)]
    stop = threading.Event()
    idle = []
    open_err = []
    for i in range(n_idle):
        try:
            idle.append(attack_socket(port, i))
        except OSError as e:
            open_err.append(str(e))
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\n" + b"X-Pad: " + b"a" * 4000 + b"\r\n\r\n{}")
    trick = []  # [socket, bytes sent]
    stats = {"reopened": 0, "closed_by_server": 0, "bytes": 0}
    closed_once = set()  # tricklers the server closed at least once
    for i in range(n_trickle):
        try:
            trick.append([attack_socket(port, n_idle + i), 0, n_idle + i])
        except OSError as e:
            open_err.append(str(e))

    def trickler():
        # one byte per connection about every second, until the attack ends (at most 150 s)
        end = time.monotonic() + 150
        while not stop.is_set() and time.monotonic() < end:
            for t in trick:
                try:
                    # the server's answer (a 408) or its close: read it before the next byte
                    try:
                        if t[0].recv(4096, socket.MSG_DONTWAIT) is not None:
                            raise OSError("closed by the server")
                    except BlockingIOError:
                        pass
                    t[0].send(head[t[1] % len(head):t[1] % len(head) + 1])
                    t[1] += 1
                    stats["bytes"] += 1
                except OSError:
                    stats["closed_by_server"] += 1
                    closed_once.add(t[2])
                    try:
                        t[0].close()
                    except OSError:
                        pass
                    if stats["reopened"] < 20 * n_trickle:
                        try:
                            t[0], t[1] = attack_socket(port, t[2]), 0
                            stats["reopened"] += 1
                        except OSError:
                            pass
            stop.wait(1.0)

    tt = threading.Thread(target=trickler)
    tt.start()
    # the state, not a time: every attack connection is open at the server
    want = n_idle + n_trickle
    peak = 0
    for _ in range(600):
        v = metric(port, key, "verity_http_connections_open") or 0
        peak = max(peak, v)
        if v >= want:
            break
        time.sleep(0.1)
    print("attack_open want=%d peak=%d open_errors=%d %s" % (want, peak, len(open_err),
                                                              "|".join(open_err[:2])))

    preauth = {"n": 0, "401": 0, "other": []}

    def flood_one(i):
        try:
            s = attack_socket(port, 1500 + i)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % (8 << 20))
            try:
                s.sendall(b"a" * (8 << 20))
            except OSError:
                pass
            data = b""
            while True:
                try:
                    d = s.recv(65536)
                except OSError:
                    break
                if not d:
                    break
                data += d
            s.close()
            if data.startswith(b"HTTP/1.1 401"):
                preauth["401"] += 1
            else:
                preauth["other"].append(data[:40])
        except OSError as e:
            preauth["other"].append(str(e).encode())
        preauth["n"] += 1

    stops = {"ok": 0, "400": 0, "other": []}
    big = ["%c" % (65 + k) * 1024 for k in range(4)]  # 4 x 1 KiB = the 4096-byte limit
    over = ["Z" * 1025] + big[1:]

    def stop_reqs():
        for _ in range(10):
            st, data, _ = request(port, key, "POST", "/v1/completions",
                                  json.dumps({"prompt": "x", "max_tokens": 16, "stop": big}))
            if st == 200:
                stops["ok"] += 1
            else:
                stops["other"].append("%d %s" % (st, data[:80]))
        st, data, _ = request(port, key, "POST", "/v1/completions",
                              json.dumps({"prompt": "x", "max_tokens": 16, "stop": over}))
        if st == 400 and b"stop" in data:
            stops["400"] += 1
        else:
            stops["other"].append("over %d %s" % (st, data[:80]))

    lat1, bad1 = [], []
    end = time.monotonic() + seconds
    rounds = 0
    # until SECONDS have passed and every trickler was closed by the head deadline at least once
    # (a state, waited for; at most 120 s and 200 rounds as a backstop against a hung server)
    backstop = time.monotonic() + 120
    while ((time.monotonic() < end or rounds < 2 or len(closed_once) < len(trick)) and
           time.monotonic() < backstop):
        side = [threading.Thread(target=flood_one, args=(k,)) for k in range(60 if rounds < 4 else 0)]
        side.append(threading.Thread(target=stop_reqs) if rounds < 4 else threading.Thread(target=lambda: None))
        for t in side:
            t.start()
        while any(t.is_alive() for t in side):
            good_round(port, key, 1, lat1, bad1)
            rss.append(rss_kb(pid))
        for t in side:
            t.join()
        good_round(port, key, 5, lat1, bad1)
        rss.append(rss_kb(pid))
        rounds += 1
        if rounds >= 200:
            break
    open_now = metric(port, key, "verity_http_connections_open") or 0
    stop.set()
    tt.join()
    print("attack ok=%d bad=%d p99_ms=%.1f rounds=%d open_at_end=%d %s" % (
        len(lat1), len(bad1), p99_ms(lat1), rounds, open_now, "|".join(bad1[:3])))
    print("trickle bytes=%d closed_by_server=%d closed_once=%d reopened=%d" % (
        stats["bytes"], stats["closed_by_server"], len(closed_once), stats["reopened"]))
    print("preauth n=%d n401=%d other=%d %s" % (preauth["n"], preauth["401"],
                                               len(preauth["other"]), preauth["other"][:2]))
    print("stops ok=%d over400=%d other=%d %s" % (stops["ok"], stops["400"], len(stops["other"]),
                                                  stops["other"][:2]))
    for s in idle:
        s.close()
    for t in trick:
        try:
            t[0].close()
        except OSError:
            pass
    for _ in range(600):  # the state: the server saw every attack socket go
        if (metric(port, key, "verity_http_connections_open") or 0) <= 2:
            break
        time.sleep(0.1)
    lat2, bad2 = [], []
    good_round(port, key, 10, lat2, bad2)
    print("after ok=%d bad=%d open=%d %s" % (len(lat2), len(bad2),
                                           metric(port, key, "verity_http_connections_open") or 0,
                                           "|".join(bad2[:3])))
    print("rss first_kb=%d max_kb=%d" % (rss[0], max(rss)))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "run":
        run(int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]), float(a[6]))
    else:
        sys.exit("usage: abuse.py run PORT KEY SERVER_PID N_IDLE N_TRICKLE SECONDS")
