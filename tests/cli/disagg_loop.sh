# SPDX-License-Identifier: MIT
# The disaggregated flow (disagg.sh) with the router's --router-loop 1: the prefill request and
# the cancel POST run as further transfers of the request's proxy loop (src/router/rt_loop.c)
# instead of a thread. Every case of disagg.sh again, its names prefixed disagg_loop. instead of
# disagg.
VERITY_ROUTER_LOOP=1 bash "$(dirname "$0")/disagg.sh" 2>&1 | sed -u 's/^\(PASS\|FAIL\|SKIP\) disagg\./\1 disagg_loop./'
