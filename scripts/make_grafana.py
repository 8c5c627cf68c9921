#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes contrib/grafana/verity.json, the Grafana dashboard for verity serve's /metrics.

Panels: load (running/waiting requests, KV usage), throughput (prompt and generation tokens/s),
latency quantiles from the histograms (time to first token, inter-token latency, end-to-end,
engine step), batch size, preemptions, rejections by reason, finishes by reason, tool-call parse
failures, client cancellations. The Prometheus data source is a dashboard input (DS_PROMETHEUS).
Run once after changing the metrics; the output is committed."""
import json, os, sys

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
panels = []
y = 0

def ts(title, targets, unit="short", w=12, h=8, desc=""):
    global y
    x = 0 if len([p for p in panels if p["gridPos"]["y"] == y]) == 0 else 12
    p = {"type": "timeseries", "title": title, "description": desc, "datasource": DS,
         "gridPos": {"h": h, "w": w, "x": x, "y": y},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
         "targets": [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(65 + i)}
                     for i, (e, l) in enumerate(targets)]}
    panels.append(p)
    if x == 12 or w == 24:
        y += h

def quantiles(metric):
    return [(f'histogram_quantile({q}, sum by (le) (rate({metric}_bucket[$__rate_interval])))', f"p{int(q*100)}")
            for q in (0.5, 0.9, 0.99)]

ts("Requests", [("verity_requests_running", "running"), ("verity_requests_waiting", "waiting")],
   desc="Requests in the running batch and waiting for admission.")
ts("KV cache usage", [("verity_kv_usage_ratio", "used")], unit="percentunit")
ts("Tokens per second", [("rate(verity_prompt_tokens_total[$__rate_interval])", "prompt"),
                         ("rate(verity_generation_tokens_total[$__rate_interval])", "generated"),
                         ("rate(verity_engine_prompt_tokens_total[$__rate_interval])", "computed (incl. recompute)")])
ts("Batch size", quantiles("verity_batch_size"), desc="Sequences per engine step.")
ts("Time to first token", quantiles("verity_time_to_first_token_seconds"), unit="s")
ts("Inter-token latency", quantiles("verity_inter_token_latency_seconds"), unit="s")
ts("End-to-end latency", quantiles("verity_e2e_request_latency_seconds"), unit="s")
ts("Engine step time", quantiles("verity_engine_step_seconds"), unit="s")
ts("Finished requests", [("sum by (finish_reason) (rate(verity_request_success_total[$__rate_interval]))", "{{finish_reason}}")], unit="reqps")
ts("Rejected requests", [("sum by (reason) (rate(verity_requests_rejected_total[$__rate_interval]))", "{{reason}}")], unit="reqps")
ts("Preemptions and cancellations", [("rate(verity_preemptions_total[$__rate_interval])", "preemptions"),
                                     ("rate(verity_requests_cancelled_total[$__rate_interval])", "client went away")], unit="ops")
ts("Tool-call parse failures", [("rate(verity_tool_parse_failures_total[$__rate_interval])", "failures")], unit="ops")

dash = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                  "pluginId": "prometheus", "pluginName": "Prometheus"}],
    "title": "verity serve", "uid": "verity-serve", "schemaVersion": 39, "version": 1,
    "editable": True, "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
    "tags": ["verity", "llm"], "panels": [dict(p, id=i + 1) for i, p in enumerate(panels)],
    "templating": {"list": []}, "annotations": {"list": []},
}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "contrib", "grafana", "verity.json")
with open(out, "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
print(f"wrote {out}: {len(panels)} panels")
