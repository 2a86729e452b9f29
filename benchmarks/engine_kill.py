"""A lab host's engine dying at once, as on a GPU fault: shared by the failover e2e test and
benchmarks/failover_compare.py, which kill it over SSH with this command."""

# SIGKILL to the engine unit's main process and every descendant (vLLM's engine core), printing
# their PIDs. By PID, because `systemctl kill` fails (EIO) in a lab container; systemd then
# restarts the unit (Restart=on-failure) as on a real host.
KILL_ENGINE = ('p=$(systemctl show -p MainPID --value private-llm-engine); [ "$p" -gt 0 ] || exit 1; all=$p; '
               'while [ -n "$p" ]; do p=$(ps -o pid= --ppid "$(echo $p | tr " " ,)" | xargs); all="$all $p"; done; '
               'kill -KILL $all && echo $all')
