# SPDX-License-Identifier: MIT
# A raw-socket HTTP/1.1 client for the front-door tests (tests/cli/front_door.sh): what curl cannot
# do, or cannot do deterministically. Each mode prints one line of results for the shell to check
# (or FAIL lines of its own); every wait is for a state (bytes arriving, a file appearing, a
# metric changing), with a long socket timeout as the only backstop for a hung server.
#
#   head PORT CONTENT_LENGTH expect|headers|full [HEADER...]
#       POST /v1/completions with Content-Length CONTENT_LENGTH and the extra headers. expect:
#       with "Expect: 100-continue", sending no body; headers: no body at all; full: the whole body
#       (send errors ignored: the server may refuse and close first). Prints the status of the
#       first response, "interim100=yes|no" and the final body.
#   flood PORT N CONTENT_LENGTH
#       N connections at once, each sending headers and the whole body (no Expect), then reading;
#       prints how many saw a 401.
#   hold PORT CONTENT_LENGTH SENT GO_FILE BODY_FILE [HEADER...]
#       Sends headers and the first SENT bytes of BODY_FILE (CONTENT_LENGTH bytes), waits until
#       GO_FILE exists, sends the rest, prints the response's status.
#   halfclose PORT stream|whole BODY_JSON [KEY]
#       Holds the engine (/admin/pause), sends the request, shuts down its writing side, reads
#       until the server's probe of the half-closed client (an interim "100 Continue": a stream's
#       headers go out with its first event, so it too has no answer yet), releases the engine
#       and reads the answer to the end. Prints
#       "probe=yes|no status=N" and the body's last bytes.
#   raw PORT REQUEST
#       Sends REQUEST (Python string escapes: \\r\\n) and reads until the server closes the
#       connection. Prints "statuses=N first=S error=yes|no": how many status lines came back (a
#       head sent twice counts 2), the first one's status, and whether the first response's body
#       is an OpenAI-style error object.
#   disconnect_while_stepping PORT MAX BODY_JSON [KEY]
#       Holds the engine, sends the request, waits until it is queued, grants one step (it holds
#       KV and has a token), closes the connection, and then steps the engine one step at a time,
#       so that tokens keep coming, until verity_requests_cancelled_total rises (at most MAX
#       steps); prints "steps=N cancelled=yes|no". The engine stays held.
import json
import os
import re
import socket
import sys
import threading
import time

TIMEOUT_S = 120


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(TIMEOUT_S)
    return s


def request_head(cl, extra, path="/v1/completions"):
    h = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % path
    h += "Content-Length: %d\r\n" % cl
    for x in extra:
        h += x + "\r\n"
    return (h + "\r\n").encode()


def read_all(s, data=b""):
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    return data


def responses(data):
    """Splits raw bytes into (status, body) of each response; 1xx ones have no body."""
    out = []
    while data.startswith(b"HTTP/1."):
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        head = data[:end].decode("latin-1")
        status = int(head.split(" ", 2)[1])
        data = data[end + 4:]
        body = b""
        if status >= 200:
            body = data
            data = b""
        out.append((status, body))
    return out


def admin(port, path, body=None, key=None):
    s = connect(port)
    b = json.dumps(body).encode() if body is not None else b""
    extra = ["Connection: close"] + (["Authorization: Bearer " + key] if key else [])
    s.sendall(request_head(len(b), extra, path) + b)
    r = responses(read_all(s))
    s.close()
    return r[-1] if r else (0, b"")


def metric(port, name, key=None):
    s = connect(port)
    extra = "Authorization: Bearer %s\r\n" % key if key else ""
    s.sendall(("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n" % extra).encode())
    r = responses(read_all(s))
    s.close()
    for line in r[-1][1].decode().splitlines() if r else []:
        if line.split(" ")[0] == name:
            return float(line.split(" ")[1])
    return None


def mode_head(port, cl, how, extra):
    s = connect(port)
    if how == "expect":
        extra = extra + ["Expect: 100-continue"]
    s.sendall(request_head(cl, extra))
    if how == "full":
        try:
            s.sendall(b"a" * cl)
        except OSError:
            pass
    r = responses(read_all(s))
    if not r:
        print("status=none interim100=no")
        return
    print("status=%d interim100=%s %s" % (r[0][0], "yes" if any(x[0] == 100 for x in r) else "no",
                                          r[-1][1].decode("utf-8", "replace")))


def mode_flood(port, n, cl):
    seen = []
    body = b"a" * cl

    def one():
        try:
            s = connect(port)
            s.sendall(request_head(cl, []))
            try:
                s.sendall(body)
            except OSError:
                pass
            r = responses(read_all(s))
            seen.append(r[0][0] if r else 0)
            s.close()
        except OSError:
            seen.append(0)

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("n401=%d" % seen.count(401))


def mode_hold(port, cl, sent, go_file, body_file, extra):
    body = open(body_file, "rb").read()
    assert len(body) == cl, (len(body), cl)
    s = connect(port)
    s.sendall(request_head(cl, extra + ["Connection: close"]) + body[:sent])
    while not os.path.exists(go_file):
        time.sleep(0.02)
    s.sendall(body[sent:])
    r = responses(read_all(s))
    print("status=%d" % (r[-1][0] if r else 0))


def mode_halfclose(port, how, body, key):
    extra = ["Authorization: Bearer " + key] if key else []
    admin(port, "/admin/pause", key=key)
    s = connect(port)
    b = body.encode()
    s.sendall(request_head(len(b), extra) + b)
    s.shutdown(socket.SHUT_WR)
    # the probe: the interim 100, for a whole response and a stream alike (the engine is held,
    # so the stream has not begun)
    probe = b"HTTP/1.1 100 Continue\r\n\r\n"
    data = b""
    try:
        while probe not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    seen = probe in data
    admin(port, "/admin/resume", key=key)
    data = read_all(s, data)
    r = responses(data)
    final = [x for x in r if x[0] >= 200]
    print("probe=%s status=%d %s" % ("yes" if seen else "no", final[0][0] if final else 0,
                                     (final[0][1] if final else data)[-400:].decode("utf-8",
                                                                                    "replace")))


def mode_disconnect_while_stepping(port, max_steps, body, key):
    extra = ["Authorization: Bearer " + key] if key else []
    c0 = metric(port, "verity_requests_cancelled_total", key) or 0
    admin(port, "/admin/pause", key=key)
    s = connect(port)
    b = body.encode()
    s.sendall(request_head(len(b), extra) + b)
    while metric(port, "verity_requests_waiting", key) != 1:
        time.sleep(0.02)
    admin(port, "/admin/step", {"steps": 1}, key)  # admitted, prefilled, its first token out
    s.close()
    for i in range(1, max_steps + 1):
        admin(port, "/admin/step", {"steps": 1}, key)
        if (metric(port, "verity_requests_cancelled_total", key) or 0) > c0:
            print("steps=%d cancelled=yes" % i)
            return
    print("steps=%d cancelled=no" % max_steps)


def mode_raw(port, request):
    s = connect(port)
    try:
        s.sendall(request.encode("latin-1").decode("unicode_escape").encode("latin-1"))
    except OSError:
        pass  # the server may answer and close before it has read everything
    data = read_all(s)
    s.close()
    n = len(re.findall(rb"(?:^|\r\n)HTTP/1\.[01] [0-9]{3} ", data))
    got = responses(data)
    first = got[0][0] if got else 0
    error = "no"
    if got:
        try:
            body = got[0][1]
            e = json.loads(body[: body.rfind(b"}") + 1])["error"]
            error = "yes" if isinstance(e.get("message"), str) and e["message"] else "no"
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    print("statuses=%d first=%d error=%s" % (n, first, error))


def main(a):
    port = int(a[1])
    if a[0] == "head":
        mode_head(port, int(a[2]), a[3], a[4:])
    elif a[0] == "flood":
        mode_flood(port, int(a[2]), int(a[3]))
    elif a[0] == "hold":
        mode_hold(port, int(a[2]), int(a[3]), a[4], a[5], a[6:])
    elif a[0] == "halfclose":
        mode_halfclose(port, a[2], a[3], a[4] if len(a) > 4 else None)
    elif a[0] == "raw":
        mode_raw(port, a[2])
    elif a[0] == "disconnect_while_stepping":
        mode_disconnect_while_stepping(port, int(a[2]), a[3], a[4] if len(a) > 4 else None)
    else:
        sys.exit("unknown mode " + a[0])


if __name__ == "__main__":
    main(sys.argv[1:])
