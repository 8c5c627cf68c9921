/* SPDX-License-Identifier: MIT */
/* hunt_launch: templates, process groups, health polling. See hunt_launch.h. */
#include "hunt/hunt_launch.h"
#include "base/clock.h"
#include "base/err.h"
#include "hunt/hunt_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct hunt_proc {
    pid_t pid;
    bool reaped;
    int status;
};

bool hunt_toggle_is_env(const char *name) {
    if (!name[0] || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

static const char *hunt_toggle_value(const hunt_ledger *lg, int i, uint64_t flipped) {
    return (flipped >> i) & 1 ? lg->toggles[i].off : lg->toggles[i].on;
}

int hunt_launch_expand(const char *tmpl, const hunt_ledger *lg, uint64_t flipped, int port,
                       strbuf *out) {
    strbuf_reset(out);
    for (const char *p = tmpl; *p;) {
        if (*p != '{') {
            strbuf_putc(out, *p++);
            continue;
        }
        const char *e = strchr(p, '}');
        if (!e) {
            strbuf_puts(out, p);
            break;
        }
        size_t n = (size_t)(e - p - 1);
        const char *name = p + 1;
        if (n == 5 && !memcmp(name, "flags", 5)) {
            for (int i = 0; i < lg->n_toggles; i++)
                if (!hunt_toggle_is_env(lg->toggles[i].name))
                    strbuf_printf(out, " --%s %s", lg->toggles[i].name,
                                  hunt_toggle_value(lg, i, flipped));
        } else if (n == 4 && !memcmp(name, "port", 4)) {
            if (port >= 0)
                strbuf_printf(out, "%d", port);
            else
                strbuf_puts(out, "{port}");
        } else {
            int found = -1;
            for (int i = 0; i < lg->n_toggles; i++)
                if (strlen(lg->toggles[i].name) == n && !memcmp(lg->toggles[i].name, name, n))
                    found = i;
            if (found < 0)
                return err_set(ERR_INVAL,
                               "unknown placeholder {%.*s} (use {flags}, {port} or a "
                               "toggle name)",
                               (int)n, name);
            strbuf_puts(out, hunt_toggle_value(lg, found, flipped));
        }
        p = e + 1;
    }
    return strbuf_failed(out) ? err_set(ERR_NOMEM, "out of memory") : 0;
}

int hunt_free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return err_set(ERR_IO, "socket: %s", strerror(errno));
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) || getsockname(s, (struct sockaddr *)&sa, &sl)) {
        int e = errno;
        close(s);
        return err_set(ERR_IO, "cannot find a free port: %s", strerror(e));
    }
    close(s);
    return ntohs(sa.sin_port);
}

int hunt_proc_start(const char *cmd, const hunt_ledger *lg, uint64_t flipped, const char *log_path,
                    hunt_proc **out) {
    hunt_proc *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "out of memory");
    int fd =
        open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(p);
        return err_set(ERR_IO, "%s: cannot open the server log: %s", log_path, strerror(errno));
    }
    if (log_path) {
        char line[512];
        int n = snprintf(line, sizeof line,
                         "\n==== verity bisect: launching at %lld: ", (long long)time(NULL));
        if (write(fd, line, (size_t)n) < 0 || write(fd, cmd, strlen(cmd)) < 0 ||
            write(fd, "\n", 1) < 0) {
            /* the log is best effort */
        }
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        free(p);
        return err_set(ERR_IO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        for (int i = 0; i < lg->n_toggles; i++)
            if (hunt_toggle_is_env(lg->toggles[i].name))
                setenv(lg->toggles[i].name, hunt_toggle_value(lg, i, flipped), 1);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid); /* also in the parent: no window where a signal misses the group */
    close(fd);
    p->pid = pid;
    *out = p;
    return 0;
}

/* Has the leader exited? Checked without reaping it (WNOWAIT): while its zombie exists its pid
 * cannot be reused, so signalling the group can only reach processes we started. */
static bool hunt_proc_exited(hunt_proc *p) {
    if (p->reaped)
        return true;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == p->pid) {
        p->status = si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 : (si.si_status & 0x7f);
        return true;
    }
    return false;
}

int hunt_proc_wait_healthy(hunt_proc *p, const char *url, double timeout_s,
                           volatile sig_atomic_t *stop) {
    double end = clock_now_s() + timeout_s;
    for (;;) {
        if (stop && *stop)
            return err_set(ERR_CANCELLED, "interrupted while waiting for %s", url);
        if (hunt_proc_exited(p)) {
            int st = p->status;
            if (WIFEXITED(st))
                return err_set(ERR_STATE, "the server exited with status %d before %s answered",
                               WEXITSTATUS(st), url);
            return err_set(ERR_STATE, "the server died (signal %d) before %s answered",
                           WIFSIGNALED(st) ? WTERMSIG(st) : 0, url);
        }
        long status = 0;
        char body[256];
        if (hunt_http_get(url, NULL, 2, &status, body, sizeof body) == 0 && status == 200)
            return 0;
        if (clock_now_s() >= end)
            return err_set(ERR_TIMEOUT, "%s did not answer 200 within %.0f s", url, timeout_s);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void hunt_proc_stop(hunt_proc *p, double grace_s) {
    if (!p)
        return;
    if (!p->reaped) {
        kill(-p->pid, SIGTERM);
        double end = clock_now_s() + grace_s;
        while (!hunt_proc_exited(p) && clock_now_s() < end) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        /* the leader is gone or overdue; its zombie still reserves the group id, so this reaches
         * only what it started (a shell's children) */
        kill(-p->pid, SIGKILL);
        int st;
        waitpid(p->pid, &st, 0);
        p->reaped = true;
    }
    free(p);
}
