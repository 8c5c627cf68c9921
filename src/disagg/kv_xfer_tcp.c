/* SPDX-License-Identifier: MIT */
/*
 * kv_xfer_tcp: the "tcp" transport: plain stream sockets (TCP, or any connected stream socket
 * through kv_xfer_conn_from_fd). Writes use MSG_NOSIGNAL, so a peer that died is ERR_CONNECT, never
 * SIGPIPE; reads wait with poll(), so a silent peer is ERR_TIMEOUT after the caller's timeout.
 */
#include "disagg/kv_xfer_int.h"

#include "base/err.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct tcp_conn {
    kv_xfer_conn base;
    int fd;
} tcp_conn;

typedef struct tcp_listener {
    kv_xfer_listener base;
    int fd, port;
} tcp_listener;

static const kv_xfer_listener_ops tcp_listener_ops;

static int tcp_write_all(kv_xfer_conn *c, const void *buf, size_t n) {
    tcp_conn *t = (tcp_conn *)c;
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(t->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return err_set(ERR_CONNECT, "kv_xfer tcp: send on fd %d: %s", t->fd,
                           w < 0 ? strerror(errno) : "wrote nothing");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int tcp_read_full(kv_xfer_conn *c, void *buf, size_t n, int timeout_ms) {
    tcp_conn *t = (tcp_conn *)c;
    char *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = t->fd, .events = POLLIN};
        int pr = poll(&pf, 1, timeout_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return err_set(ERR_CONNECT, "kv_xfer tcp: poll on fd %d: %s", t->fd, strerror(errno));
        if (pr == 0)
            return err_set(ERR_TIMEOUT, "kv_xfer tcp: nothing from the peer on fd %d in %d ms",
                           t->fd, timeout_ms);
        ssize_t r = recv(t->fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return err_set(ERR_CONNECT, "kv_xfer tcp: recv on fd %d: %s", t->fd,
                           r < 0 ? strerror(errno) : "the peer closed the connection");
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

enum { IOV_WINDOW = 64 };

/* Moves the n parts of iov through the socket (send when out, else receive, each wait up to
 * timeout_ms), IOV_WINDOW parts per system call at most. */
static int tcp_iov(tcp_conn *t, const struct iovec *iov, int n, bool out, int timeout_ms) {
    int i = 0;
    size_t off = 0; /* bytes of iov[i] already moved */
    for (;;) {
        while (i < n && off == iov[i].iov_len) {
            i++;
            off = 0;
        }
        if (i == n)
            return 0;
        struct iovec w[IOV_WINDOW];
        int k = 0;
        for (int j = i; j < n && k < IOV_WINDOW; j++, k++)
            w[k] = j == i ? (struct iovec){(char *)iov[j].iov_base + off, iov[j].iov_len - off}
                          : iov[j];
        ssize_t r;
        if (out) {
            struct msghdr mh = {.msg_iov = w, .msg_iovlen = (size_t)k};
            r = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
        } else {
            struct pollfd pf = {.fd = t->fd, .events = POLLIN};
            int pr = poll(&pf, 1, timeout_ms);
            if (pr == 0)
                return err_set(ERR_TIMEOUT, "kv_xfer tcp: nothing from the peer on fd %d in %d ms",
                               t->fd, timeout_ms);
            r = pr < 0 ? -1 : readv(t->fd, w, k);
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return err_set(ERR_CONNECT, "kv_xfer tcp: %s on fd %d: %s", out ? "send" : "recv",
                           t->fd,
                           r < 0  ? strerror(errno)
                           : out ? "wrote nothing"
                                 : "the peer closed the connection");
        for (size_t m = (size_t)r; m > 0;) {
            size_t left = iov[i].iov_len - off, step = m < left ? m : left;
            off += step;
            m -= step;
            if (off == iov[i].iov_len && m > 0) {
                i++;
                off = 0;
            }
        }
    }
}

static bool tcp_read_ready(kv_xfer_conn *c) {
    struct pollfd pf = {.fd = ((tcp_conn *)c)->fd, .events = POLLIN};
    return poll(&pf, 1, 0) != 0; /* data, the peer's end, an error (or poll's own failure) */
}

static int tcp_writev_all(kv_xfer_conn *c, const struct iovec *iov, int n) {
    return tcp_iov((tcp_conn *)c, iov, n, true, -1);
}

static int tcp_readv_full(kv_xfer_conn *c, const struct iovec *iov, int n, int timeout_ms) {
    return tcp_iov((tcp_conn *)c, iov, n, false, timeout_ms);
}

static void tcp_shutdown(kv_xfer_conn *c) {
    shutdown(((tcp_conn *)c)->fd, SHUT_RDWR);
}

static void tcp_destroy(kv_xfer_conn *c) {
    tcp_conn *t = (tcp_conn *)c;
    close(t->fd);
    free(t);
}

/* No posted writes (write_held, flush NULL): a socket's send returns once the kernel copied the
 * bytes, so a write never waits for the peer to read them but for buffer space. */
static const kv_xfer_conn_ops tcp_ops = {.write_all = tcp_write_all,
                                         .read_full = tcp_read_full,
                                         .writev_all = tcp_writev_all,
                                         .readv_full = tcp_readv_full,
                                         .read_ready = tcp_read_ready,
                                         .shutdown = tcp_shutdown,
                                         .destroy = tcp_destroy};

int kv_xfer_conn_from_fd(int fd, kv_xfer_conn **out) {
    tcp_conn *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(ERR_NOMEM, "kv_xfer tcp: connection for fd %d", fd);
    t->base.ops = &tcp_ops;
    t->fd = fd;
    *out = &t->base;
    return 0;
}

/* Splits "host:port" into getaddrinfo's arguments. */
static int tcp_split(const char *addr, char *host, size_t cap, const char **port) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || (size_t)(colon - addr) >= cap)
        return err_set(ERR_INVAL, "kv_xfer tcp: address '%s' is not host:port", addr ? addr : "");
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    *port = colon + 1;
    return 0;
}

static int tcp_resolve(const char *addr, bool passive, struct addrinfo **res) {
    char host[256];
    const char *port = NULL;
    int rc = tcp_split(addr, host, sizeof host, &port);
    if (rc)
        return rc;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, res);
    if (g)
        return err_set(ERR_CONNECT, "kv_xfer tcp: '%s': %s", addr, gai_strerror(g));
    return 0;
}

static int tcp_listen(const char *addr, kv_xfer_listener **out) {
    struct addrinfo *res;
    int rc = tcp_resolve(addr, true, &res);
    if (rc)
        return rc;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, SOMAXCONN)) {
        rc = err_set(ERR_CONNECT, "kv_xfer tcp: listen on '%s': %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return rc;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    tcp_listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return err_set(ERR_NOMEM, "kv_xfer tcp: listener for '%s'", addr);
    }
    l->base.ops = &tcp_listener_ops;
    l->fd = fd;
    l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    *out = &l->base;
    return 0;
}

static int tcp_wrap(int fd, kv_xfer_conn **out) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = kv_xfer_conn_from_fd(fd, out);
    if (rc)
        close(fd);
    return rc;
}

static int tcp_accept(kv_xfer_listener *base, int timeout_ms, kv_xfer_conn **out) {
    tcp_listener *l = (tcp_listener *)base;
    struct pollfd pf = {.fd = l->fd, .events = POLLIN};
    int pr;
    while ((pr = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (pr == 0)
        return err_set(ERR_TIMEOUT, "kv_xfer tcp: no connection on port %d in %d ms", l->port,
                       timeout_ms);
    int fd = pr < 0 ? -1 : accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return err_set(ERR_CONNECT, "kv_xfer tcp: accept on port %d: %s", l->port, strerror(errno));
    return tcp_wrap(fd, out);
}

static int tcp_connect(const char *addr, kv_xfer_conn **out) {
    struct addrinfo *res;
    int rc = tcp_resolve(addr, false, &res);
    if (rc)
        return rc;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen)) {
        rc = err_set(ERR_CONNECT, "kv_xfer tcp: connect to '%s': %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return rc;
    }
    freeaddrinfo(res);
    return tcp_wrap(fd, out);
}

static int tcp_listener_port(const kv_xfer_listener *l) {
    return ((const tcp_listener *)l)->port;
}

static void tcp_listener_destroy(kv_xfer_listener *base) {
    tcp_listener *l = (tcp_listener *)base;
    close(l->fd);
    free(l);
}

static const kv_xfer_listener_ops tcp_listener_ops = {tcp_listener_port, tcp_listener_destroy};

const kv_xfer_transport kv_xfer_tcp = {"tcp", tcp_listen, tcp_accept, tcp_connect};
