# SPDX-License-Identifier: MIT
# The disaggregated flow (disagg.sh) with the router's --router-loop 0: the prefill request runs on
# its own thread beside the worker that proxies the decode request (router.c), instead of as a
# further transfer of the request's proxy loop (rt_loop.c, the default, which disagg.sh runs).
# Every case of disagg.sh again, its names prefixed disagg_workers. instead of disagg.
VERITY_ROUTER_LOOP=0 bash "$(dirname "$0")/disagg.sh" 2>&1 | sed -u 's/^\(PASS\|FAIL\|SKIP\) disagg\./\1 disagg_workers./'
