"""Day 2: what is installed where (revisions), rolling upgrades and rollbacks with health gates.

revisions.py  the control machine's memory: .installer/state.json and one snapshot per revision
drain.py      taking a host's engines out of every gateway's rotation, and back
rolling.py    host by host (in batches): drain -> configure -> gate -> re-admit, or roll back
"""
