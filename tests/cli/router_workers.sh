# SPDX-License-Identifier: MIT
# verity router with --router-loop 0 (the worker path: a thread per request, base/workq.h and
# base/http_fetch.h; router.sh itself runs the default, the proxy loop of src/router/rt_loop.c):
# every case of router.sh again (the streams byte for byte against one server, retries, a backend
# killed mid-stream, whole answers, drain, the metrics, connection reuse, a client that stops
# reading or closes), its names prefixed router_workers. instead of router.
VERITY_ROUTER_LOOP=0 bash "$(dirname "$0")/router.sh" 2>&1 | sed -u 's/^\(PASS\|FAIL\|SKIP\) router\./\1 router_workers./'
