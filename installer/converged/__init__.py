"""The verified fast path of a converged `installer up`: `fast_path` records and compares on the
control machine; `probe` runs on each host (standard library only) and describes what the roles
manage there."""
