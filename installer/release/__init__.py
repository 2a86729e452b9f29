"""Gray releases of one model: a canary revision beside the stable one, weighted by the gateways'
stages file, judged against stable from the gateways' metrics, promoted or aborted.

decide.py (the pure decision rule) and metrics.py (window figures from /metrics) are the judge;
the flows are start, watch, promote, abort and status.
"""
