"""What `installer up` and `upgrade` both check and copy before a host changes, and the inventory's
cross-section checks `validate` shares.
"""
