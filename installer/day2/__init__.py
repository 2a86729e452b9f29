"""Day 2: rolling upgrades and rollbacks with health gates. What is installed where (the
revisions) is installer/state/revisions.py, which `up` records into as well.

drain.py      taking a host's engines out of every gateway's rotation, and back
gate.py       proving a batch's own engines, each alone behind its own host's gateway
rolling.py    host by host (in batches): drain -> configure -> re-admit on its own gateway and
              gate -> re-admit everywhere, or roll back
"""
