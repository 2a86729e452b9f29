"""The deployment's records on the control machine: revisions, the audit trail, and the lock one
changing command holds.
"""
