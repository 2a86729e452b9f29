"""The deployment plan: what follows from the inventory and the hosts' facts, built once per
command, and the record each revision keeps of it.
"""
